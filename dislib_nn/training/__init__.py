"""Epoch-averaging estimators: data-parallel PyTorch training as tasks.

:class:`SyncEpochAveragingClassifier` and
:class:`SyncEpochAveragingRegressor` train one replica of a PyTorch
module per worker for a whole epoch, then merge the replicas with a
tree of merge tasks, with the scikit-learn API;
:class:`AsyncEpochAveragingClassifier` and
:class:`AsyncEpochAveragingRegressor` merge each replica into a global
model as soon as it finishes an epoch.

The estimators are imported when first used (PEP 562): a worker that
imports one of this package's task modules does not import the
estimators, nor scikit-learn.
"""

__all__ = ["SyncEpochAveragingClassifier", "SyncEpochAveragingRegressor",
           "AsyncEpochAveragingClassifier", "AsyncEpochAveragingRegressor"]


def __getattr__(name):
    if name in __all__:
        from dislib_nn.training import _estimators
        value = getattr(_estimators, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
