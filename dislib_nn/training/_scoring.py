"""The ``scoring`` parameter: which score validation and ``score`` give.

A scikit-learn scorer name, computed from statistics that every block
returns and that add up in any order (:mod:`._metrics`), so that on a
DsTensor neither X nor the predictions reach the master:

- classifiers: ``"accuracy"`` (the default), ``"balanced_accuracy"``,
  ``"f1_macro"``, ``"f1_micro"``, ``"f1_weighted"``,
  ``"precision_macro"``, ``"recall_macro"`` (from each block's
  confusion matrix) and ``"neg_log_loss"`` (from its summed log
  probabilities);
- regressors: ``"r2"`` (the default), ``"neg_mean_absolute_error"``,
  ``"neg_mean_squared_error"``, ``"neg_root_mean_squared_error"``.

Each equals scikit-learn's function of the same name on the collected
predictions, with its defaults (macro averages over the labels present
in ``y`` or the predictions, a class without predictions scoring 0, a
uniform average over a regressor's outputs). On arrays ``score`` calls
scikit-learn's scorer itself. A :class:`Scorer` record says what the
blocks must return and how the score is read from their sum.
"""

import numpy as np

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training import _metrics

__all__ = ["Scorer", "scorer_of", "CLASSIFIER_SCORERS", "REGRESSOR_SCORERS",
           "SCORER_NAMES", "check_scoring"]


class Scorer:
    """One score read off combined block statistics.

    Attributes
    ----------
    name : str
        The scikit-learn scorer name.
    wants : tuple of str
        The block statistics beyond the counts: ``"confusion"``,
        ``"log_loss"`` (classifiers), ``"abs"`` (regressors).
    read : callable
        ``stats -> float``.
    """

    def __init__(self, name, wants, read):
        self.name = name
        self.wants = tuple(wants)
        self.read = read

    def __call__(self, stats):
        return float(self.read(stats))


# ------------------------------------------------------- classification
def _per_class(stats):
    """``(tp, fp, fn, support, present)`` per class from the confusion
    matrix (rows: true class, columns: predicted)."""
    c = np.asarray(stats["confusion"], dtype=np.float64)
    tp = np.diag(c)
    support = c.sum(axis=1)
    predicted = c.sum(axis=0)
    return tp, predicted - tp, support - tp, support, \
        (support + predicted) > 0


def _ratio(num, den):
    out = np.zeros_like(num)
    np.divide(num, den, out=out, where=den > 0)
    return out


def _balanced_accuracy(stats):
    tp, _, _, support, _ = _per_class(stats)
    seen = support > 0
    return float(np.mean(tp[seen] / support[seen])) if seen.any() \
        else float("nan")


def _f1(average):
    def read(stats):
        tp, fp, fn, support, present = _per_class(stats)
        if average == "micro":
            return _ratio(np.array([2 * tp.sum()]),
                          np.array([2 * tp.sum() + fp.sum() + fn.sum()]))[0]
        f1 = _ratio(2 * tp, 2 * tp + fp + fn)
        if average == "weighted":
            return float(np.sum(f1 * support) / support.sum())
        return float(np.mean(f1[present]))
    return read


def _precision_macro(stats):
    tp, fp, _, _, present = _per_class(stats)
    return float(np.mean(_ratio(tp, tp + fp)[present]))


def _recall_macro(stats):
    tp, _, fn, _, present = _per_class(stats)
    return float(np.mean(_ratio(tp, tp + fn)[present]))


def _neg_log_loss(stats):
    return -stats["log_loss_sum"] / stats["n"]


# ----------------------------------------------------------- regression
def _neg_mae(stats):
    return -float(np.mean(stats["abs_sum"] / stats["n"]))


def _neg_mse(stats):
    return -float(np.mean(stats["sse"] / stats["n"]))


def _neg_rmse(stats):
    return -float(np.mean(np.sqrt(stats["sse"] / stats["n"])))


CLASSIFIER_SCORERS = {
    "accuracy": Scorer("accuracy", (), _metrics.accuracy),
    "balanced_accuracy": Scorer("balanced_accuracy", ("confusion",),
                                _balanced_accuracy),
    "f1_macro": Scorer("f1_macro", ("confusion",), _f1("macro")),
    "f1_micro": Scorer("f1_micro", ("confusion",), _f1("micro")),
    "f1_weighted": Scorer("f1_weighted", ("confusion",), _f1("weighted")),
    "precision_macro": Scorer("precision_macro", ("confusion",),
                              _precision_macro),
    "recall_macro": Scorer("recall_macro", ("confusion",), _recall_macro),
    "neg_log_loss": Scorer("neg_log_loss", ("log_loss",), _neg_log_loss),
}
REGRESSOR_SCORERS = {
    "r2": Scorer("r2", (), _metrics.r2),
    "neg_mean_absolute_error": Scorer("neg_mean_absolute_error", ("abs",),
                                      _neg_mae),
    "neg_mean_squared_error": Scorer("neg_mean_squared_error", (),
                                     _neg_mse),
    "neg_root_mean_squared_error": Scorer("neg_root_mean_squared_error",
                                          (), _neg_rmse),
}
SCORER_NAMES = tuple(CLASSIFIER_SCORERS) + tuple(REGRESSOR_SCORERS)
_DEFAULT = {"classifier": "accuracy", "regressor": "r2"}


def _table(targets):
    return CLASSIFIER_SCORERS if targets.name == "classifier" \
        else REGRESSOR_SCORERS


def scorer_of(estimator):
    """The :class:`Scorer` of ``estimator``'s ``scoring`` (checked by
    :func:`check_scoring`)."""
    targets = estimator._targets
    name = estimator.scoring or _DEFAULT[targets.name]
    return _table(targets)[name]


def check_scoring(estimator):
    """Raise if ``scoring`` names a score of the other kind of estimator
    or none at all."""
    scoring = estimator.scoring
    if scoring is None:
        return
    table = _table(estimator._targets)
    if isinstance(scoring, str) and scoring in table:
        return
    kind = estimator._targets.name
    other = "regressor" if kind == "classifier" else "classifier"
    why = (f" is a {other}'s score" if scoring in SCORER_NAMES else "")
    raise InvalidParameterError(
        f"The 'scoring' parameter of {type(estimator).__name__} must be "
        f"None or one of the {kind} scores computed block by block: "
        f"{', '.join(repr(n) for n in table)}. Got {scoring!r} instead"
        f"{(', which' + why) if why else ''}.")
