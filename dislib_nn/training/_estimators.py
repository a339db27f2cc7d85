"""The public estimators: synchronous and asynchronous epoch averaging,
classifier and regressor.

What classifiers (and regressors) of both strategies share is in
``_Classifier`` (``_Regressor``); the strategy comes from the base, the
docstrings from :mod:`._estimator_docs`.
"""

from sklearn.base import ClassifierMixin, RegressorMixin

from dislib_nn.training import _labels
from dislib_nn.training._base import (AsyncEpochAveragingBase,
                                      SyncEpochAveragingBase)
from dislib_nn.training._estimator_docs import estimator_doc
from dislib_nn.training._targets import CLASSIFICATION, REGRESSION

__all__ = ["SyncEpochAveragingClassifier", "SyncEpochAveragingRegressor",
           "AsyncEpochAveragingClassifier", "AsyncEpochAveragingRegressor"]

class _Classifier(ClassifierMixin):
    """Classifier methods shared by both strategies."""

    _targets = CLASSIFICATION

    def partial_fit(self, X, y=None, classes=None):
        """Train for one more epoch, from the current model if fitted.

        Parameters
        ----------
        X, y : see ``fit``.
        classes : array-like, default=None
            All the labels ``y`` may hold, needed in the first call when
            its ``y`` does not show all of them (default: those in y).
        """
        return self._partial_fit(X, y, classes=classes)

    def predict(self, X):
        """Predicted labels: a numpy array, or a DsTensor for a DsTensor."""
        return self._forward(X, "labels")

    def predict_proba(self, X):
        """Class probabilities (softmax of the module's outputs)."""
        return self._forward(X, "proba")

    def score(self, X, y=None, sample_weight=None):
        """Mean accuracy of ``predict(X)`` against ``y`` (or ``scoring``).

        On a DsTensor it is computed by tasks, block by block (X is never
        collected); ``sample_weight`` is for array input only. Labels
        never seen in ``fit`` raise ValueError.
        """
        return self._score(X, y, sample_weight)

    def _score_arrays(self, X, y, sample_weight):
        from sklearn.metrics import accuracy_score  # 0.2 s: at first use
        _labels.encode(y, self.classes_, "y")
        return float(accuracy_score(y, self.predict(X),
                                    sample_weight=sample_weight))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        return tags


class _Regressor(RegressorMixin):
    """Regressor methods shared by both strategies."""

    _targets = REGRESSION

    def predict(self, X):
        """Predictions: a numpy array, or a DsTensor for a DsTensor."""
        return self._forward(X, "raw")

    def score(self, X, y=None, sample_weight=None):
        """R² of ``predict(X)`` against ``y`` (uniform average over
        outputs), or ``scoring``.

        On a DsTensor it is computed by tasks, block by block (X is never
        collected); ``sample_weight`` is for array input only.
        """
        return self._score(X, y, sample_weight)

    def _score_arrays(self, X, y, sample_weight):
        from sklearn.metrics import r2_score  # 0.2 s: at first use
        return float(r2_score(y, self.predict(X),
                              sample_weight=sample_weight))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.input_tags.three_d_array = True
        return tags


class SyncEpochAveragingClassifier(_Classifier, SyncEpochAveragingBase):
    __doc__ = estimator_doc("SyncEpochAveragingClassifier")


class SyncEpochAveragingRegressor(_Regressor, SyncEpochAveragingBase):
    __doc__ = estimator_doc("SyncEpochAveragingRegressor")


class AsyncEpochAveragingClassifier(_Classifier, AsyncEpochAveragingBase):
    __doc__ = estimator_doc("AsyncEpochAveragingClassifier")


class AsyncEpochAveragingRegressor(_Regressor, AsyncEpochAveragingBase):
    __doc__ = estimator_doc("AsyncEpochAveragingRegressor")
