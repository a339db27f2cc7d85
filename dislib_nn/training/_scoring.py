"""The ``scoring`` parameter: which score validation and ``score`` give.

Any scikit-learn scorer name (``sklearn.metrics.get_scorer_names()``),
or a callable with scikit-learn's scorer signature ``scorer(estimator,
X, y) -> float`` (``make_scorer(...)``, or a function of one's own).

These names are computed from statistics that every block returns and
that add up in any order (:mod:`._metrics`), so that on a DsTensor
neither X nor the predictions reach the master:

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
uniform average over a regressor's outputs). Every other scorer is
computed exactly: each block also returns its module outputs and
targets (one row per sample scored; never X), and the master calls the
scorer on them with a frozen-predictions estimator (:mod:`._frozen`).
The scorer itself stays on the master: tasks never receive it. On
arrays ``score`` calls the scorer with the estimator itself. A
:class:`Scorer` record says what the blocks must return and how the
score is read from their combined statistics.

:func:`check_scoring` refuses, before any task, what does not fit the
estimator: an unknown name, a non-callable, a callable that cannot take
``(estimator, X, y)``, a scikit-learn scorer of the other kind of
estimator (its score function is one of ``sklearn.metrics``'s
regression metrics, or one of its classification, ranking or clustering
metrics) or one whose response methods the estimator lacks (a regressor
has no ``predict_proba``; neither has a ``decision_function``).
scikit-learn itself is imported only for the names outside the tables
and for callables, at first use.
"""

import difflib
import inspect

import numpy as np

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training import _metrics

__all__ = ["Scorer", "scorer_of", "CLASSIFIER_SCORERS", "REGRESSOR_SCORERS",
           "SCORER_NAMES", "ScoringSpec", "check_scoring", "scorer_callable"]


class Scorer:
    """One score read off combined block statistics.

    Attributes
    ----------
    name : str
        The scikit-learn scorer name (a callable's repr).
    wants : tuple of str
        The block statistics beyond the counts: ``"confusion"``,
        ``"log_loss"`` (classifiers), ``"abs"`` (regressors), or
        ``"outputs"`` (the module's outputs and the targets, row by row:
        for the scorers computed exactly).
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
    scoring = estimator.scoring
    if scoring is None:
        return _table(targets)[_DEFAULT[targets.name]]
    if isinstance(scoring, str) and scoring in _table(targets):
        return _table(targets)[scoring]
    return _exact(estimator, scoring)


def _exact(estimator, scoring):
    """A scorer called on the gathered outputs of the samples scored."""
    name = scoring if isinstance(scoring, str) else repr(scoring)

    def read(stats):
        from dislib_nn.training._frozen import frozen_predictions
        scorer = scorer_callable(scoring)
        frozen, X, y = frozen_predictions(estimator, stats["outputs"],
                                          stats["targets"])
        return scorer(frozen, X, y)
    return Scorer(name, ("outputs",), read)


def scorer_callable(scoring):
    """The callable of a scorer name (scikit-learn's), or the callable
    itself."""
    if not isinstance(scoring, str):
        return scoring
    from sklearn.metrics import get_scorer    # 0.2 s: at first use
    return get_scorer(scoring)


class ScoringSpec:
    """The constraint of ``scoring`` (:mod:`._param_validation`): a str
    or a callable, which :func:`check_scoring` has checked further."""

    def is_satisfied_by(self, value):
        return isinstance(value, str) or callable(value)

    def __str__(self):
        return _EXPECTED


_EXPECTED = ("a scikit-learn scorer name (a str of "
             "sklearn.metrics.get_scorer_names()) or a callable "
             "scorer(estimator, X, y) -> float")


def check_scoring(estimator):
    """Raise InvalidParameterError, naming the value, if ``scoring`` is
    none of the estimator's scores (see the module)."""
    scoring = estimator.scoring
    if scoring is None or (isinstance(scoring, str)
                           and scoring in _table(estimator._targets)):
        return
    start = (f"The 'scoring' parameter of {type(estimator).__name__} "
             f"must be None,")
    if isinstance(scoring, str):
        from sklearn.metrics import get_scorer_names  # at first use
        names = get_scorer_names()
        if scoring not in names:
            close = difflib.get_close_matches(scoring, names, n=3,
                                                cutoff=0.75)
            hint = (f" Did you mean {' or '.join(repr(c) for c in close)}?"
                    if close else "")
            raise InvalidParameterError(
                f"{start} {_EXPECTED}. Got {scoring!r} instead, which is "
                f"not a scorer name of scikit-learn.{hint}")
        _check_fits(estimator, scorer_callable(scoring), start)
        return
    if not callable(scoring):
        raise InvalidParameterError(
            f"{start} {_EXPECTED}. Got {_show(scoring)} instead.")
    try:
        signature = inspect.signature(scoring)
    except (TypeError, ValueError):     # some builtins have none
        signature = None
    if signature is not None:
        try:
            signature.bind(None, None, None)
        except TypeError:
            raise InvalidParameterError(
                f"{start} {_EXPECTED}. Got {_show(scoring)} instead, "
                f"which cannot be called as scorer(estimator, X, y): its "
                f"signature is {signature}.") from None
    _check_fits(estimator, scoring, start)


def _check_fits(estimator, scorer, start):
    """A scikit-learn scorer of the estimator's kind whose response
    methods it has (any other callable is taken as it is)."""
    kind = estimator._targets.name
    shown = _show(estimator.scoring)
    methods = getattr(scorer, "_response_method", None)
    if isinstance(methods, str):
        methods = (methods,)
    if methods and not any(hasattr(estimator, m) for m in methods):
        has = [m for m in _RESPONSE_METHODS if hasattr(estimator, m)]
        raise InvalidParameterError(
            f"{start} a {kind}'s scorer name or a callable scorer("
            f"estimator, X, y) that uses {' or '.join(has)} only. Got "
            f"{shown} instead, which needs {' or '.join(methods)}.")
    score_kind = _score_kind(scorer)
    if score_kind is not None and score_kind != kind:
        raise InvalidParameterError(
            f"{start} a {kind}'s scorer name or a callable scorer("
            f"estimator, X, y) of a {kind}. Got {shown} instead, which is "
            f"a {score_kind}'s score ({_function_name(scorer)}).")


_RESPONSE_METHODS = ("predict", "predict_proba", "decision_function")


def _score_kind(scorer):
    """``"regressor"`` for a scikit-learn scorer of one of its regression
    metrics, ``"classifier"`` for its other metrics (classification,
    ranking, clustering: they score labels or class scores), None for
    another callable."""
    function = getattr(scorer, "_score_func", None)
    module = getattr(function, "__module__", None) or ""
    if not module.startswith("sklearn.metrics"):
        return None
    return "regressor" if module.startswith("sklearn.metrics._regression") \
        else "classifier"


def _function_name(scorer):
    function = scorer._score_func
    return f"{function.__module__.split('._')[0]}." \
        f"{getattr(function, '__qualname__', repr(function))}"


def _show(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
