"""Predictions already made, as an estimator a scorer can call.

A scorer that no block statistics give (:mod:`._scoring`'s exact path)
is called as scikit-learn calls one, ``scorer(estimator, X, y)``, on the
master, after the block tasks returned their module outputs. It gets a
:class:`FrozenClassifier` or :class:`FrozenRegressor` holding those
outputs, which ``predict`` and ``predict_proba`` decode as the fitted
estimator decodes its own (its ``_decode``: labels as ``classes_`` of the
highest score, probabilities as the softmax in float64), with scikit-
learn's tags (``is_classifier`` and the scorers' response methods work),
and for X a :class:`GatheredRows` placeholder: X itself is never
gathered, so the frozen estimator predicts those rows only.

This module imports scikit-learn: it is imported when such a score is
read, never by a task.
"""

import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin

__all__ = ["GatheredRows", "FrozenClassifier", "FrozenRegressor",
           "frozen_predictions"]


class GatheredRows:
    """The X an exact scorer receives: ``len`` and ``shape[0]`` are the
    number of samples whose predictions the frozen estimator holds; the
    samples themselves stay where they are."""

    def __init__(self, n_samples):
        self.shape = (int(n_samples),)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return (f"<the {self.shape[0]} samples whose predictions were "
                f"gathered (X itself was not)>")


class _Frozen(BaseEstimator):
    """What both frozen estimators share (set by
    :func:`frozen_predictions`; ``__init__`` takes nothing, so that
    ``get_params`` is empty)."""

    def __init__(self):
        pass

    def _decoded(self, X, what):
        if X is not self._rows:
            raise TypeError(
                f"This {type(self).__name__} holds the predictions of "
                f"{self._of}'s {len(self._rows)} samples being scored, "
                f"and predicts those only: call it with the X the scorer "
                f"received ({self._rows!r}). Got a {type(X).__name__}.")
        return self._estimator._decode(torch.from_numpy(self._raw), what)

    def __sklearn_is_fitted__(self):
        return True

    def __repr__(self):
        return (f"{type(self).__name__}(the predictions of {self._of} on "
                f"{len(self._rows)} samples)")


class FrozenClassifier(ClassifierMixin, _Frozen):
    """A classifier's predictions on the samples scored."""

    def predict(self, X):
        return self._decoded(X, "labels")

    def predict_proba(self, X):
        return self._decoded(X, "proba")


class FrozenRegressor(RegressorMixin, _Frozen):
    """A regressor's predictions on the samples scored."""

    def predict(self, X):
        return self._decoded(X, "raw")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


def frozen_predictions(estimator, outputs, targets):
    """``(frozen, X, y)`` to call a scorer with, from the gathered module
    ``outputs`` and ``targets`` (class indices for a classifier, whose
    ``y`` is then their labels)."""
    classifier = estimator._targets.name == "classifier"
    frozen = (FrozenClassifier if classifier else FrozenRegressor)()
    frozen._estimator = estimator
    frozen._of = type(estimator).__name__
    frozen._raw = outputs
    frozen._rows = GatheredRows(len(targets))
    if classifier:
        frozen.classes_ = estimator.classes_
        y = estimator.classes_[targets]
    else:
        y = targets
    return frozen, frozen._rows, y
