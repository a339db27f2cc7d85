"""dislib_nn: data-parallel neural-network training on PyCOMPSs.

Each worker trains its own replica of a PyTorch model for a whole epoch;
replicas' weights and buffers are averaged at epoch boundaries by
reduction tasks. Runs under ``runcompss`` on clusters and with plain
``python`` everywhere else (see :mod:`dislib_nn.runtime`).
"""

__version__ = "0.1.0"

__all__ = []
