"""Loading a ds-tensor from one ``.npy`` file, one task per block.

The master reads only the file's header; every block is read by its own
task through a memory map, so the file must be readable by the workers
at the same path (a shared file system on a cluster). Many files
(``.npy`` and ``.pt``) are loaded by ``_shards``, which reads ``.npy``
headers with :func:`_header` too; HDF5 and Zarr by ``_formats``.
"""

import os

import numpy as np

from dislib_nn.data import _tasks
from dislib_nn.data import _validation as v
from dislib_nn.data._placing import per_block
from dislib_nn.data._tensor import DsTensor
from dislib_nn.exceptions import DataFileError, InvalidParameterError, \
    ShapeError
from dislib_nn.runtime import n_workers


def load_npy(path, block_size=None, n_blocks=None):
    """A DsTensor read from one ``.npy`` file, each block by its own task.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npy`` file (``numpy.save``) of numeric data with at least
        one row, readable by the workers at this path.
    block_size, n_blocks : int, default=None
        As in :func:`from_array`: rows per block (or a tuple, the rows of
        each block), or a number of nearly equal blocks; with neither,
        one block per worker of the runtime.

    Returns
    -------
    DsTensor

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import dislib_nn as dnn
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.ones((100, 8), dtype=np.float32))
    >>> dnn.load_npy(path, block_size=40)
    DsTensor(shape=(100, 8), dtype=torch.float32, block_sizes=(40, 40, 20))
    """
    path, shape, dtype = _header(path, "load_npy", "path")
    sizes = v.block_sizes(shape[0], block_size, n_blocks, "load_npy",
                          n_workers())
    bounds = v.offsets(sizes)
    blocks = per_block(len(sizes), lambda i: _tasks._read_npy_rows(
        path, int(bounds[i]), int(bounds[i + 1])))
    return DsTensor._from_blocks(blocks, sizes, shape[1:], dtype)


def _header(path, caller, name):
    """``(absolute path, shape, torch dtype)`` from a ``.npy`` header."""
    try:
        path = os.path.abspath(os.fspath(path))
    except TypeError:
        raise InvalidParameterError(
            f"The '{name}' parameter of {caller} must be a path. Got "
            f"{path!r} instead.") from None
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{caller}: '{name}' = {path!r} does not exist or is not a "
            f"file.")
    if not path.endswith(".npy"):
        hint = (" An .npz archive holds several arrays: extract them with "
                "numpy.load and save each with numpy.save."
                if path.endswith(".npz") else "")
        raise DataFileError(
            f"{caller} reads .npy files (numpy.save). Got '{name}' = "
            f"{path!r}.{hint}")
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, np_dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, _, np_dtype = np.lib.format.read_array_header_2_0(f)
    except ValueError as exc:
        raise DataFileError(
            f"{caller}: '{name}' = {path!r} is not a valid .npy file "
            f"({exc}).") from None
    dtype = v.numpy_to_torch_dtype(np_dtype, name, caller)
    if len(shape) == 0 or shape[0] == 0:
        raise ShapeError(
            f"{caller} needs data with at least one row. '{name}' = "
            f"{path!r} holds an array of shape {shape}.")
    return path, tuple(shape), dtype
