"""scikit-learn's model selection over DsTensors.

``GridSearchCV`` selects the folds with ``_safe_indexing`` (``x[rows,
...]``, a DsTensor row selection, done by tasks) and reads the labels
with ``numpy.asarray`` (``type_of_target``, ``StratifiedKFold``): the
search must give what it gives on the same rows as numpy arrays.
"""

import numpy as np
import pytest
import torch
from sklearn.model_selection import GridSearchCV

import dislib_nn as dnn
from dislib_nn import (SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from tests.conftest import use_backend
from tests.training import _models

rng = np.random.RandomState(0)
X = rng.randn(40, 4).astype(np.float32)
# Alternating labels: StratifiedKFold(2) then splits rows 0-19 / 20-39,
# as KFold(2) does for the regressor.
Y_CLF = np.arange(40) % 2
X[:, 0] += 1.5 * Y_CLF
Y_REG = (X @ np.array([1.0, -2.0, 0.5, 0.0], np.float32)).astype(np.float32)

GRID = {"lr": [0.01, 0.05], "module__hidden": [4, 8]}


@pytest.fixture(scope="module", autouse=True)
def _sequential():
    use_backend("sequential")
    yield
    use_backend("local")


def _estimator(kind):
    if kind == "classifier":
        return SyncEpochAveragingClassifier(
            module=_models.Classifier, module__batch_norm=False,
            n_epochs=3, batch_size=4, n_workers=2, random_state=0)
    return SyncEpochAveragingRegressor(
        module=_models.MLP, n_epochs=3, batch_size=4, n_workers=2,
        random_state=0)


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_grid_search_on_ds_tensors_matches_numpy(kind):
    y = Y_CLF if kind == "classifier" else Y_REG
    on_arrays = GridSearchCV(_estimator(kind), GRID, cv=2,
                             error_score="raise").fit(X, y)
    # Two blocks of 20 rows: a fold's training rows are one block, which
    # fit re-blocks for its two workers as it splits an array.
    x, y_ds = dnn.from_array(X, n_blocks=2), dnn.from_array(y, n_blocks=2)
    on_ds = GridSearchCV(_estimator(kind), GRID, cv=2,
                         error_score="raise").fit(x, y_ds)
    assert on_ds.best_params_ == on_arrays.best_params_
    for key in ("split0_test_score", "split1_test_score", "mean_test_score",
                "rank_test_score"):
        np.testing.assert_allclose(on_ds.cv_results_[key],
                                   on_arrays.cv_results_[key], rtol=1e-5,
                                   err_msg=key)
    # Both scores differ across the grid: the comparison tells them apart.
    assert len(set(np.round(on_arrays.cv_results_["mean_test_score"], 6))) > 1
    # The refit best estimators are the same model.
    got = on_ds.best_estimator_.module_.state_dict()
    for key, value in on_arrays.best_estimator_.module_.state_dict().items():
        torch.testing.assert_close(got[key], value, atol=0, rtol=0, msg=key)
    np.testing.assert_allclose(on_ds.score(x, y_ds), on_arrays.score(X, y),
                               rtol=1e-5)
