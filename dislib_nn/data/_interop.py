"""Converting between DsTensor and dislib's ds-array.

A ds-array (``dislib.data.array.Array``) is a 2-D grid of blocks:
``a._blocks[i][j]`` is the block in row ``i`` and column ``j`` (a numpy
array, a scipy sparse matrix or a future). :func:`from_ds_array` reads
only those attributes, so it does not import dislib; every row of blocks
becomes one block of the DsTensor, its column blocks concatenated along
the features by one task. The ds-array keeps ownership of its own blocks.
"""

import numpy as np
import torch

from dislib_nn.data import _tasks
from dislib_nn.data import _validation as v
from dislib_nn.data._placing import per_block
from dislib_nn.data._tensor import DsTensor
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.runtime import uses_pycompss, wait_on

_DS_ARRAY_ATTRIBUTES = ("_blocks", "_top_left_shape", "_reg_shape", "shape")


def from_ds_array(a, dtype=None):
    """A DsTensor with the rows of a dislib ds-array.

    Parameters
    ----------
    a : dislib.data.array.Array
        A ds-array of shape ``(n, features)``; sparse blocks become dense.
    dtype : torch.dtype or numpy dtype, default=None
        The dtype of the result. By default, that of the ds-array's first
        block (found by a small task, which the master waits for).

    Returns
    -------
    DsTensor
        Of shape ``(n, features)``, one block per row of blocks of ``a``.
    """
    missing = [name for name in _DS_ARRAY_ATTRIBUTES
               if not hasattr(a, name)]
    if missing:
        raise InvalidParameterError(
            f"The 'a' parameter of from_ds_array must be a dislib ds-array "
            f"(with {', '.join(_DS_ARRAY_ATTRIBUTES)}). Got "
            f"{type(a).__name__}, which lacks {', '.join(missing)}.")
    n_rows, n_features = (int(s) for s in a.shape)
    grid = [list(row) for row in a._blocks]
    sizes = _row_sizes(n_rows, len(grid), int(a._top_left_shape[0]),
                       int(a._reg_shape[0]))
    if dtype is None:
        np_dtype = np.dtype(wait_on(_tasks._first_dtype(grid[0][0])))
    else:
        np_dtype = np.dtype(_torch_to_numpy(
            v.torch_dtype(dtype, "dtype", "from_ds_array")))
    torch_dtype = v.numpy_to_torch_dtype(np_dtype, "a", "from_ds_array")
    blocks = per_block(len(grid), lambda i: _tasks._from_grid_row(
        grid[i], np_dtype))
    return DsTensor._from_blocks(blocks, sizes, (n_features,), torch_dtype)


def to_ds_array(x):
    """``x`` as a ds-array: samples flattened, one row of blocks per block.

    Under COMPSs the ds-array's blocks are futures of new tasks; outside
    it dislib runs its tasks inline on the master, so the blocks are
    fetched to the master there.
    """
    from dislib.data.array import Array
    if x.n_blocks == 0:
        raise InvalidParameterError(
            "to_ds_array needs a DsTensor with at least one row. Got an "
            "empty one.")
    sizes = x.block_sizes
    if not _regular(sizes):
        x = x.rechunk(sizes[0])
        sizes = x.block_sizes
    features = int(np.prod(x.sample_shape, dtype=np.int64))
    blocks = [_tasks._to_numpy_2d(b) for b in x._blocks]
    if not uses_pycompss():
        blocks = wait_on(blocks)
    reg = sizes[1] if len(sizes) > 1 else sizes[0]
    return Array([[b] for b in blocks], top_left_shape=(sizes[0], features),
                 reg_shape=(reg, features), shape=(len(x), features),
                 sparse=False)


def _regular(sizes):
    """Whether a ds-array can have these rows of blocks: a first block of
    any size, then blocks of one size, the last one possibly smaller."""
    return len(sizes) <= 2 or (len(set(sizes[1:-1])) == 1
                               and sizes[-1] <= sizes[1])


def _row_sizes(n_rows, n_block_rows, top, reg):
    if n_block_rows == 1:
        return (n_rows,)
    middle = (reg,) * (n_block_rows - 2)
    return (top,) + middle + (n_rows - top - sum(middle),)


def _torch_to_numpy(dtype):
    if dtype == torch.bfloat16:
        raise InvalidParameterError(
            "from_ds_array cannot produce bfloat16 (ds-array blocks are "
            "numpy arrays); convert afterwards with astype.")
    return torch.empty(0, dtype=dtype).numpy().dtype
