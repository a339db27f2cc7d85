"""Module-level functions for map_blocks tests (tasks pickle them by name)."""

import numpy as np
import torch


def double(block):
    return block * 2


def add(block, other):
    return block + other


def flatten_to_float16(block):
    return block.reshape(block.shape[0], -1).to(torch.float16)


def row_sums_numpy(block):
    return block.numpy().sum(axis=tuple(range(1, block.dim())))


def needs_rows(block):
    """Fails on an empty block (so map_blocks must ask a real block)."""
    if block.shape[0] == 0:
        raise ValueError("empty")
    return block[:, :1] * 1.0


def drops_a_row(block):
    return block[1:]


def not_a_tensor(block):
    return [1, 2, 3]


def geometry_depends_on_data(block):
    if block.shape[0] == 0:
        return block
    return block[:, :1]


def first_column(block):
    return block[:, 0]


ARRAYS = {
    "1d": np.arange(23, dtype=np.float64),
    "2d": np.arange(23 * 3, dtype=np.float32).reshape(23, 3),
    "3d": np.arange(23 * 2 * 3, dtype=np.int64).reshape(23, 2, 3),
    "4d": np.arange(23 * 3 * 2 * 2, dtype=np.int32).reshape(23, 3, 2, 2),
}
