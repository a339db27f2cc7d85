"""Selecting and regrouping rows: slices, index arrays, masks, rechunk.

Each output block is built by one task from the few input blocks that
hold its rows; an input block taken whole is reused as it is, with no
task at all.
"""

import numpy as np
import torch

from dislib_nn.data import _tasks
from dislib_nn.data import _validation as v
from dislib_nn.exceptions import InvalidParameterError


def rechunk(x, sizes):
    """``x``'s rows regrouped into blocks of ``sizes`` rows."""
    bounds = v.offsets(sizes)
    blocks = [_range(x, bounds[k], bounds[k + 1])
              for k in range(len(sizes))]
    return _like(x, blocks, sizes)


def slice_rows(x, key):
    """``x[key]`` for a slice ``key``."""
    start, stop, step = key.indices(len(x))
    if step != 1:
        return take_rows(x, np.arange(start, stop, step, dtype=np.int64))
    pieces = _pieces(x, start, max(start, stop))
    blocks = [_part(x, i, a, b) for i, a, b in pieces]
    return _like(x, blocks, tuple(b - a for _, a, b in pieces))


def take_rows(x, index):
    """``x[index]`` for an int64 array of row numbers in ``[0, len(x))``.

    An increasing index keeps each row in (a part of) its own block; any
    other order builds blocks of ``x.block_sizes[0]`` rows, each gathered
    from the blocks that hold its rows.
    """
    if len(index) == 0:
        return _like(x, [], ())
    bounds = v.offsets(x.block_sizes)
    source = np.searchsorted(bounds, index, side="right") - 1
    local = index - bounds[source]
    if np.all(index[1:] >= index[:-1]):
        return _take_in_place(x, source, local)
    sizes = v.block_sizes(len(index), min(x.block_sizes[0], len(index)),
                          None, "x[index]", 1)
    out_bounds = v.offsets(sizes)
    blocks = []
    for k in range(len(sizes)):
        part = slice(out_bounds[k], out_bounds[k + 1])
        needed, remapped = np.unique(source[part], return_inverse=True)
        blocks.append(_tasks._gather(
            [x._blocks[i] for i in needed], remapped.astype(np.int64),
            local[part], x.sample_shape, x.dtype))
    return _like(x, blocks, sizes)


def as_index(key, n_rows):
    """Row numbers (int64, non-negative) from an index array or a mask."""
    if isinstance(key, torch.Tensor):
        key = key.detach().cpu().numpy()
    try:
        index = np.asarray(key)
    except Exception:  # noqa: BLE001 - report the key itself
        index = None
    if index is None or index.ndim != 1 or (
            index.dtype.kind not in "biu" and index.size > 0):
        raise InvalidParameterError(
            f"DsTensor rows are selected by a slice, a 1-D array of ints "
            f"or a 1-D boolean mask. Got {_describe(key)} instead.")
    if index.dtype.kind == "b":
        if len(index) != n_rows:
            raise InvalidParameterError(
                f"A boolean mask selecting DsTensor rows must have one "
                f"entry per row ({n_rows}). Got {len(index)} entries.")
        return np.flatnonzero(index).astype(np.int64)
    index = index.astype(np.int64)
    bad = (index < -n_rows) | (index >= n_rows)
    if bad.any():
        raise InvalidParameterError(
            f"Row index {int(index[bad][0])} is out of range for a "
            f"DsTensor with {n_rows} rows.")
    return np.where(index < 0, index + n_rows, index)


# ------------------------------------------------------------ helpers
def _pieces(x, start, stop):
    """``(block, first, stop)`` triples covering rows ``[start, stop)``."""
    bounds = v.offsets(x.block_sizes)
    out = []
    for i in range(x.n_blocks):
        a, b = max(start, bounds[i]), min(stop, bounds[i + 1])
        if a < b:
            out.append((i, int(a - bounds[i]), int(b - bounds[i])))
    return out


def _part(x, i, a, b):
    if a == 0 and b == x.block_sizes[i]:
        return x._blocks[i]
    return _tasks._assemble([x._blocks[i]], [(a, b)])


def _range(x, start, stop):
    """One block holding rows ``[start, stop)`` of ``x``."""
    pieces = _pieces(x, start, stop)
    if len(pieces) == 1:
        return _part(x, *pieces[0])
    return _tasks._assemble([x._blocks[i] for i, _, _ in pieces],
                            [(a, b) for _, a, b in pieces])


def _take_in_place(x, source, local):
    blocks, sizes = [], []
    cuts = np.flatnonzero(np.diff(source)) + 1
    for rows, src in zip(np.split(local, cuts), source[np.r_[0, cuts]]):
        full = x.block_sizes[src]
        if len(rows) == full and np.array_equal(rows, np.arange(full)):
            blocks.append(x._blocks[src])
        else:
            blocks.append(_tasks._take(x._blocks[src], rows))
        sizes.append(len(rows))
    return _like(x, blocks, tuple(sizes))


def _like(x, blocks, sizes):
    return type(x)._from_blocks(blocks, tuple(int(s) for s in sizes),
                                x.sample_shape, x.dtype)


def _describe(key):
    shape = getattr(key, "shape", None)
    dtype = getattr(key, "dtype", None)
    if shape is not None:
        return f"{type(key).__name__} of shape {tuple(shape)} and dtype " \
               f"{dtype}"
    return repr(key) if len(repr(key)) < 60 else type(key).__name__
