"""Creating ds-tensors: from an in-memory array, random or zeros."""

import numpy as np
import torch

from dislib_nn.data import _tasks
from dislib_nn.data import _validation as v
from dislib_nn.data._placing import per_block
from dislib_nn.data._tensor import DsTensor
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from dislib_nn.runtime import delete_object, n_workers, shared_empty


def from_array(data, block_size=None, n_blocks=None):
    """A DsTensor holding a copy of an in-memory array.

    Each block is copied once into its own buffer and handed to the
    runtime; no task receives more than its own block.

    Parameters
    ----------
    data : numpy.ndarray or torch.Tensor
        Numeric data of shape ``(n, *sample_shape)`` with ``n >= 1``.
    block_size : int or tuple of int, default=None
        Rows per block (the last block may be smaller), or the rows of
        each block.
    n_blocks : int, default=None
        Number of blocks of nearly equal size. Give at most one of
        ``block_size`` and ``n_blocks``; with neither, one block per
        worker of the runtime.

    Returns
    -------
    DsTensor

    Examples
    --------
    >>> import numpy as np
    >>> import dislib_nn as dnn
    >>> x = dnn.from_array(np.zeros((10, 3, 4, 4)), n_blocks=3)
    >>> x.block_sizes
    (4, 3, 3)
    """
    dtype = _check_data(data, "from_array")
    sizes = v.block_sizes(data.shape[0], block_size, n_blocks,
                          "from_array", n_workers())
    bounds = v.offsets(sizes)
    sample = tuple(data.shape[1:])
    def make(i):
        block = shared_empty((sizes[i],) + sample, dtype)
        if isinstance(data, np.ndarray):
            _tasks._as_numpy(block)[...] = data[bounds[i]:bounds[i + 1]]
        else:
            block.copy_(data[bounds[i]:bounds[i + 1]].detach())
        made = _tasks._to_block(block)
        # The runtime keeps its own copy of the argument (under COMPSs, a
        # file it tracks): let it go once the task has read it.
        delete_object(block)
        return made
    blocks = per_block(len(sizes), make)
    return DsTensor._from_blocks(blocks, sizes, sample, dtype)


def random(shape, block_size=None, n_blocks=None, random_state=None,
           dtype=torch.float32):
    """A DsTensor of uniform random values in [0, 1), made by tasks.

    Each block is drawn in its own task from a seed derived from
    ``random_state``, so the same ``random_state`` and block sizes give
    the same tensor on every backend. Integer dtypes draw from
    ``[0, 100)``, bool from ``{False, True}``.

    Parameters
    ----------
    shape : tuple of int
        ``(n, *sample_shape)`` with ``n >= 1``.
    block_size, n_blocks : int, default=None
        As in :func:`from_array`.
    random_state : int, numpy RandomState or Generator, default=None
    dtype : torch.dtype or numpy dtype, default=torch.float32

    Returns
    -------
    DsTensor
    """
    n_rows, sample = _check_shape(shape, "random")
    dtype = v.torch_dtype(dtype, "dtype", "random")
    sizes = v.block_sizes(n_rows, block_size, n_blocks, "random",
                          n_workers())
    seeds = v.seed_sequence(random_state, "random").spawn(len(sizes))
    blocks = per_block(len(sizes), lambda i: _tasks._random_block(
        (sizes[i],) + sample, int(seeds[i].generate_state(1)[0]), dtype))
    return DsTensor._from_blocks(blocks, sizes, sample, dtype)


def zeros(shape, block_size=None, n_blocks=None, dtype=torch.float32):
    """A DsTensor of zeros, made by tasks.

    Parameters are those of :func:`random`, without ``random_state``.
    """
    n_rows, sample = _check_shape(shape, "zeros")
    dtype = v.torch_dtype(dtype, "dtype", "zeros")
    sizes = v.block_sizes(n_rows, block_size, n_blocks, "zeros",
                          n_workers())
    blocks = per_block(len(sizes), lambda i: _tasks._zeros_block(
        (sizes[i],) + sample, dtype))
    return DsTensor._from_blocks(blocks, sizes, sample, dtype)


# ------------------------------------------------------------ helpers
def _check_data(data, caller):
    """The torch dtype of ``data``; raises unless it holds >= 1 row."""
    if isinstance(data, np.ndarray):
        dtype = v.numpy_to_torch_dtype(data.dtype, "data", caller)
    elif isinstance(data, torch.Tensor):
        if data.layout != torch.strided:
            raise InvalidParameterError(
                f"The 'data' parameter of {caller} must be a dense tensor. "
                f"Got a tensor with layout {data.layout}.")
        dtype = v.torch_dtype(data.dtype, "data", caller)
    else:
        raise InvalidParameterError(
            f"The 'data' parameter of {caller} must be a numpy array or a "
            f"torch tensor. Got {type(data).__name__} instead.")
    if data.ndim == 0 or data.shape[0] == 0:
        raise ShapeError(
            f"{caller} needs data with at least one row. Got shape "
            f"{tuple(data.shape)}.")
    return dtype


def _check_shape(shape, caller):
    dims = v.sample_shape(shape, "shape", caller)
    if len(dims) == 0 or dims[0] == 0:
        raise ShapeError(
            f"{caller} needs a shape with at least one row. Got shape "
            f"{shape!r}.")
    return dims[0], dims[1:]
