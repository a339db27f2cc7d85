"""dislib_nn: data-parallel neural-network training on PyCOMPSs.

Each worker trains its own replica of a PyTorch model for a whole epoch;
replicas' weights and buffers are averaged at epoch boundaries by
reduction tasks. Runs under ``runcompss`` on clusters and with plain
``python`` everywhere else (see :mod:`dislib_nn.runtime`).
"""

from dislib_nn import data as _data
from dislib_nn import training as _training
from dislib_nn.data import *  # noqa: F401,F403
from dislib_nn.training import *  # noqa: F401,F403
from dislib_nn.plot import plot_history

__version__ = "0.1.0"

__all__ = (list(_data.__all__) + list(_training.__all__)
           + ["plot_history"])
