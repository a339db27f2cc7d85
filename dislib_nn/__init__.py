"""dislib_nn: data-parallel neural-network training on PyCOMPSs.

Each worker trains its own replica of a PyTorch model for a whole epoch;
replicas' weights and buffers are averaged at epoch boundaries by
reduction tasks. Runs under ``runcompss`` on clusters and with plain
``python`` everywhere else (see :mod:`dislib_nn.runtime`).

The public names are imported when first used (PEP 562): a worker that
imports a task module, ``dislib_nn.training.tasks._train`` say, pays
for torch and that module only, not for scikit-learn, which only the
estimators need. ``from dislib_nn import X`` and ``dislib_nn.X`` work as
for an eager import.
"""

import importlib as _importlib

__version__ = "0.1.0"

# Public name -> the module that defines it. tests/test_imports.py checks
# that this table holds the __all__ of dislib_nn.data and
# dislib_nn.training, and nothing else.
_PUBLIC = {
    "DsTensor": "dislib_nn.data",
    "from_array": "dislib_nn.data",
    "from_dataset": "dislib_nn.data",
    "load_npy": "dislib_nn.data",
    "load_npy_files": "dislib_nn.data",
    "load_hdf5": "dislib_nn.data",
    "load_zarr": "dislib_nn.data",
    "load_shards": "dislib_nn.data",
    "from_ds_array": "dislib_nn.data",
    "random": "dislib_nn.data",
    "zeros": "dislib_nn.data",
    "shuffle": "dislib_nn.data",
    "train_test_split": "dislib_nn.data",
    "partition": "dislib_nn.data",
    "SyncEpochAveragingClassifier": "dislib_nn.training",
    "SyncEpochAveragingRegressor": "dislib_nn.training",
    "AsyncEpochAveragingClassifier": "dislib_nn.training",
    "AsyncEpochAveragingRegressor": "dislib_nn.training",
    "plot_history": "dislib_nn.plot",
}

# Subpackages reachable as attributes (``dislib_nn.runtime.set_backend``)
# without importing them first.
_SUBMODULES = frozenset({"data", "training", "runtime", "exceptions",
                         "plot", "callbacks", "strategies"})

__all__ = list(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        value = getattr(_importlib.import_module(_PUBLIC[name]), name)
    elif name in _SUBMODULES:
        value = _importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(
            f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value     # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC) | _SUBMODULES)
