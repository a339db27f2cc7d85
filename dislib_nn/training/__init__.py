"""Epoch-averaging estimators: data-parallel PyTorch training as tasks.

:class:`SyncEpochAveragingClassifier` and
:class:`SyncEpochAveragingRegressor` train one replica of a PyTorch
module per worker for a whole epoch, then merge the replicas with a
tree of merge tasks, with the scikit-learn API;
:class:`AsyncEpochAveragingClassifier` and
:class:`AsyncEpochAveragingRegressor` merge each replica into a global
model as soon as it finishes an epoch.
"""

from dislib_nn.training._estimators import (AsyncEpochAveragingClassifier,
                                            AsyncEpochAveragingRegressor,
                                            SyncEpochAveragingClassifier,
                                            SyncEpochAveragingRegressor)

__all__ = ["SyncEpochAveragingClassifier", "SyncEpochAveragingRegressor",
           "AsyncEpochAveragingClassifier", "AsyncEpochAveragingRegressor"]
