"""ds-tensor: blocked N-d tensors whose blocks tasks own.

A :class:`DsTensor` of shape ``(n, *sample_shape)`` is split along its
first axis into blocks of consecutive samples; each block is a CPU torch
tensor held by the task runtime, and the master keeps only the geometry.
"""

from dislib_nn.data._creation import from_array, random, zeros
from dislib_nn.data._tensor import DsTensor

__all__ = ["DsTensor", "from_array", "random", "zeros"]
