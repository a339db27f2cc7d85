"""ds-tensor: blocked N-d tensors whose blocks tasks own.

A :class:`DsTensor` of shape ``(n, *sample_shape)`` is split along its
first axis into blocks of consecutive samples; each block is a CPU torch
tensor held by the task runtime, and the master keeps only the geometry.
"""

from dislib_nn.data._creation import from_array, random, zeros
from dislib_nn.data._dataset import from_dataset
from dislib_nn.data._interop import from_ds_array
from dislib_nn.data._formats import load_hdf5, load_zarr
from dislib_nn.data._io import load_npy
from dislib_nn.data._shards import load_npy_files, load_shards
from dislib_nn.data._shuffle import partition, shuffle, train_test_split
from dislib_nn.data._tensor import DsTensor

__all__ = ["DsTensor", "from_array", "from_dataset", "load_npy", "load_npy_files",
           "load_hdf5", "load_zarr", "load_shards", "from_ds_array", "random",
           "zeros", "shuffle", "train_test_split", "partition"]
