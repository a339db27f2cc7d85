"""Loading ds-tensors from HDF5 datasets and Zarr arrays, one task per block.

The master opens the file for its metadata only (shape, dtype, chunks)
and closes it; every block is read by its own task, which opens the file
on the worker, reads its rows and closes it. The files must be readable
by the workers at the same path (a shared file system on a cluster).
h5py and zarr are optional: they are imported when a loader is called,
never when dislib_nn is.
"""

import importlib
import itertools
import os

from dislib_nn.data import _tasks
from dislib_nn.data import _validation as v
from dislib_nn.data._placing import per_block
from dislib_nn.data._tensor import DsTensor
from dislib_nn.exceptions import (DataFileError, InvalidParameterError,
                                  MissingDependencyError, ShapeError)
from dislib_nn.runtime import n_workers


def load_hdf5(path, dataset, block_size=None, n_blocks=None):
    """A DsTensor of one HDF5 dataset, each block read by its own task.

    Parameters
    ----------
    path : str or os.PathLike
        An HDF5 file, readable by the workers at this path.
    dataset : str
        The dataset's name in the file (``"x"``, ``"train/images"``): its
        first axis holds the samples (at least one), of a numeric dtype.
    block_size, n_blocks : int, default=None
        As in :func:`from_array`: rows per block (or a tuple, the rows of
        each block), or a number of nearly equal blocks. With neither,
        one block per worker of the runtime; for a chunked dataset the
        blocks then start on chunk boundaries where that still gives
        every worker a block (see :func:`load_zarr`).

    Returns
    -------
    DsTensor

    Examples
    --------
    >>> import os, tempfile
    >>> import h5py, numpy as np
    >>> import dislib_nn as dnn
    >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
    >>> with h5py.File(path, "w") as f:
    ...     f["x"] = np.ones((100, 8), dtype=np.float32)
    >>> dnn.load_hdf5(path, "x", block_size=40)
    DsTensor(shape=(100, 8), dtype=torch.float32, block_sizes=(40, 40, 20))
    """
    h5py = _require("h5py", "load_hdf5", "hdf5")
    path = _path(path, "load_hdf5", folder=False)
    if not isinstance(dataset, str):
        raise InvalidParameterError(
            f"The 'dataset' parameter of load_hdf5 must be a str, the name "
            f"of a dataset in the file. Got {dataset!r} instead.")
    if not h5py.is_hdf5(path):
        raise DataFileError(
            f"load_hdf5: 'path' = {path!r} is not an HDF5 file.")
    with h5py.File(path, "r") as f:
        node = f.get(dataset)
        if not isinstance(node, h5py.Dataset):
            what = (f"is not in {path!r}" if node is None else
                    f"names a {type(node).__name__.lower()} of {path!r}, "
                    f"not a dataset")
            raise InvalidParameterError(
                f"load_hdf5: 'dataset' = {dataset!r} {what}; its datasets: "
                f"{_listing(_hdf5_datasets(h5py, f))}.")
        shape, chunks = node.shape, node.chunks
        dtype = v.numpy_to_torch_dtype(_tasks._native(node.dtype),
                                       "dataset", "load_hdf5")
    shape = _rows(shape, "load_hdf5", f"'dataset' = {dataset!r}")
    sizes = _sizes(shape[0], chunks, block_size, n_blocks, "load_hdf5")
    bounds = v.offsets(sizes)
    blocks = per_block(len(sizes), lambda i: _tasks._read_hdf5_rows(
        path, dataset, int(bounds[i]), int(bounds[i + 1])))
    return DsTensor._from_blocks(blocks, sizes, shape[1:], dtype)


def load_zarr(path, component=None, block_size=None, n_blocks=None):
    """A DsTensor of one Zarr array, each block read by its own task.

    Parameters
    ----------
    path : str or os.PathLike
        A Zarr store folder (format 2 or 3), readable by the workers at
        this path.
    component : str, default=None
        The array's path inside the store's group (``"x"``,
        ``"train/images"``); None when the store is itself an array. Its
        first axis holds the samples (at least one), of a numeric dtype.
    block_size, n_blocks : int, default=None
        As in :func:`from_array`: rows per block (or a tuple, the rows of
        each block), or a number of nearly equal blocks. With neither,
        one block per worker of the runtime, and the blocks start on
        chunk boundaries (along the first axis) where there are at least
        as many chunks as workers: the blocks then differ by up to one
        chunk, and no chunk is read (and decompressed) by two tasks.
        When you give them, block sizes that are multiples of the chunk
        rows do the same.

    Returns
    -------
    DsTensor

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np, zarr
    >>> import dislib_nn as dnn
    >>> path = os.path.join(tempfile.mkdtemp(), "data.zarr")
    >>> group = zarr.open_group(path, mode="w")
    >>> group.create_array("x", data=np.ones((100, 8), dtype=np.float32),
    ...                    chunks=(25, 8)).shape
    (100, 8)
    >>> dnn.load_zarr(path, "x", block_size=50)
    DsTensor(shape=(100, 8), dtype=torch.float32, block_sizes=(50, 50))
    """
    zarr = _require("zarr", "load_zarr", "zarr")
    path = _path(path, "load_zarr", folder=True)
    if component is not None and not isinstance(component, str):
        raise InvalidParameterError(
            f"The 'component' parameter of load_zarr must be None or a "
            f"str, the path of an array in the store. Got {component!r} "
            f"instead.")
    try:
        root = zarr.open(store=path, mode="r")
    except (ValueError, OSError, KeyError) as exc:
        raise DataFileError(f"load_zarr: 'path' = {path!r} is not a Zarr "
                            f"store ({exc}).") from None
    node = root
    if isinstance(root, zarr.Group):
        node = root.get(component) if component else None
    elif component:
        raise InvalidParameterError(
            f"load_zarr: 'component' = {component!r} was given, but "
            f"'path' = {path!r} is an array, not a group: leave "
            f"component=None.")
    if not isinstance(node, zarr.Array):
        if not component:
            what = (f"'path' = {path!r} is a group, not an array: name one "
                    f"of its arrays with 'component'")
        elif node is None:
            what = f"'component' = {component!r} is not in {path!r}"
        else:
            what = (f"'component' = {component!r} names a group of "
                    f"{path!r}, not an array")
        raise InvalidParameterError(
            f"load_zarr: {what}; its arrays: "
            f"{_listing(_zarr_arrays(zarr, root))}.")
    name, value = ("component", component) if component else ("path",
                                                               path)
    dtype = v.numpy_to_torch_dtype(_tasks._native(node.dtype), name,
                                   "load_zarr")
    shape = _rows(node.shape, "load_zarr", f"'{name}' = {value!r}")
    sizes = _sizes(shape[0], node.chunks, block_size, n_blocks,
                   "load_zarr")
    bounds = v.offsets(sizes)
    blocks = per_block(len(sizes), lambda i: _tasks._read_zarr_rows(
        path, component, int(bounds[i]), int(bounds[i + 1])))
    return DsTensor._from_blocks(blocks, sizes, shape[1:], dtype)


def _require(module, caller, extra):
    """Import an optional dependency, or MissingDependencyError."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingDependencyError(
            f"{caller} needs {module}, which is not installed: pip install "
            f"{module} (or, in a checkout of dislib_nn, pip install -e "
            f"\".[{extra}]\").") from error


def _path(path, caller, folder):
    """The absolute path of an existing file (or folder)."""
    try:
        path = os.path.abspath(os.fspath(path))
    except TypeError:
        raise InvalidParameterError(
            f"The 'path' parameter of {caller} must be a path. Got "
            f"{path!r} instead.") from None
    if not (os.path.isdir(path) if folder else os.path.isfile(path)):
        what = "a folder (a Zarr store)" if folder else "a file"
        raise FileNotFoundError(
            f"{caller}: 'path' = {path!r} does not exist or is not {what}.")
    return path


def _rows(shape, caller, name):
    """``shape`` as a tuple, or ShapeError unless it has a row."""
    if shape is None or len(shape) == 0 or shape[0] == 0:
        raise ShapeError(
            f"{caller} needs data with at least one row. {name} holds an "
            f"array of shape {shape}.")
    return tuple(int(d) for d in shape)


def _sizes(n_rows, chunks, block_size, n_blocks, caller):
    """The blocks' sizes: as asked, else one block per worker, cut on the
    chunks' boundaries if every worker still gets one."""
    if block_size is not None or n_blocks is not None or not chunks:
        return v.block_sizes(n_rows, block_size, n_blocks, caller,
                             n_workers())
    wanted = max(1, min(n_workers(), n_rows))
    chunk_rows = int(chunks[0])
    n_chunks = -(-n_rows // chunk_rows)
    if n_chunks < wanted:
        return v.balanced(n_rows, wanted)
    sizes = [k * chunk_rows for k in v.balanced(n_chunks, wanted)]
    sizes[-1] -= n_chunks * chunk_rows - n_rows     # the last chunk's gap
    return tuple(sizes)


def _hdf5_datasets(h5py, group):
    """The names of up to ``_LISTED + 1`` datasets under an HDF5 group."""
    found = []

    def visit(name, node):
        if isinstance(node, h5py.Dataset):
            found.append(name)
        return True if len(found) > _LISTED else None   # True stops
    group.visititems(visit)
    return found


def _zarr_arrays(zarr, group):
    """The paths of up to ``_LISTED + 1`` arrays under a Zarr group."""
    arrays = (name for name, node in group.members(max_depth=None)
              if isinstance(node, zarr.Array))
    return list(itertools.islice(arrays, _LISTED + 1))


def _listing(names):
    """Names for an error message: the first ``_LISTED``, sorted."""
    if not names:
        return "none"
    more = " and more" if len(names) > _LISTED else ""
    return ", ".join(repr(n) for n in sorted(names[:_LISTED])) + more


_LISTED = 10
