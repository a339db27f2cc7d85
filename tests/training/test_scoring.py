"""``scoring=``: validation scores and ``score`` computed block by block
equal scikit-learn's scorer on the collected predictions."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, make_regression
from sklearn.metrics import get_scorer

from dislib_nn import (SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor, from_array)
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training._scoring import (CLASSIFIER_SCORERS,
                                         REGRESSOR_SCORERS)
from tests.training import _models


def _imbalanced_digits():
    # Digit 0 ten times as often as the others: accuracy and balanced
    # accuracy part ways.
    X, y = load_digits(return_X_y=True)
    keep = (y == 0) | (np.arange(len(y)) % 10 == 0)
    return (X[keep] / 16).astype(np.float32), y[keep]


@pytest.fixture(scope="module")
def classifier_fits():
    X, y = _imbalanced_digits()
    valid = (X[::3], y[::3])
    fits = {}
    for name in CLASSIFIER_SCORERS:
        torch.manual_seed(0)
        fits[name] = SyncEpochAveragingClassifier(
            module=_models.Classifier, module__batch_norm=False,
            n_workers=2, n_epochs=4, batch_size=16, lr=0.1,
            random_state=0, scoring=name, validation_data=valid).fit(X, y)
    return X, y, valid, fits


@pytest.mark.parametrize("name", list(CLASSIFIER_SCORERS))
def test_classifier_scores_are_scikit_learns(local, classifier_fits, name):
    X, y, (Xv, yv), fits = classifier_fits
    est = fits[name]
    expected = get_scorer(name)(est, X, y)
    blocks = est.score(from_array(X, n_blocks=3), from_array(y, n_blocks=3))
    assert blocks == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert est.score(X, y) == pytest.approx(expected, rel=1e-12)
    # The last epoch's validation score is the fitted model's.
    assert est.history_[-1]["valid_score"] == pytest.approx(
        get_scorer(name)(est, Xv, yv), rel=1e-9, abs=1e-12)


def test_balanced_accuracy_is_not_accuracy_on_imbalanced_classes(
        local, classifier_fits):
    X, y, _, fits = classifier_fits
    est = fits["balanced_accuracy"]
    assert est.score(X, y) != pytest.approx(
        get_scorer("accuracy")(est, X, y), abs=1e-3)


@pytest.mark.parametrize("name", list(REGRESSOR_SCORERS))
def test_regressor_scores_are_scikit_learns(backend, name):
    X, y = make_regression(n_samples=120, n_features=4, n_targets=2,
                           noise=5.0, random_state=0)
    X, y = X.astype(np.float32), (y / 100).astype(np.float32)
    valid = (X[:40], y[:40])
    torch.manual_seed(0)
    est = SyncEpochAveragingRegressor(
        module=_models.MLP, n_workers=2, n_epochs=3, batch_size=16,
        lr=0.05, random_state=0, scoring=name,
        validation_data=valid).fit(X, y)
    expected = get_scorer(name)(est, X, y)
    blocks = est.score(from_array(X, n_blocks=3), from_array(y, n_blocks=3))
    assert blocks == pytest.approx(expected, rel=1e-6)
    assert est.history_[-1]["valid_score"] == pytest.approx(
        get_scorer(name)(est, *valid), rel=1e-6)


@pytest.mark.parametrize("cls, scoring, match", [
    (SyncEpochAveragingClassifier, "r2",
     r"'scoring' parameter of SyncEpochAveragingClassifier must be None or "
     r"one of the classifier scores.*Got 'r2' instead, which is a "
     r"regressor's score"),
    (SyncEpochAveragingRegressor, "balanced_accuracy",
     r"regressor scores.*'neg_mean_absolute_error'.*Got "
     r"'balanced_accuracy' instead, which is a classifier's score"),
    (SyncEpochAveragingClassifier, "roc_auc",
     r"classifier scores computed block by block: 'accuracy', "
     r"'balanced_accuracy'.*Got 'roc_auc' instead\.$"),
])
def test_a_score_that_does_not_fit_is_named_before_any_task(
        local, cls, scoring, match):
    X, y = _imbalanced_digits()
    est = cls(module=_models.MLP, scoring=scoring)
    with pytest.raises(InvalidParameterError, match=match):
        est.fit(X, y)
    assert not hasattr(est, "module_")
