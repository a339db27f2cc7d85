"""A script that fails: runcompss must report it in its exit code."""

import numpy as np

import dislib_nn as dnn


def first_row(block):
    return block[:1]


if __name__ == "__main__":
    x = dnn.from_array(np.zeros((4, 2)), n_blocks=2)
    x.map_blocks(first_row).collect()   # drops rows: the task fails
