"""``scoring=``: validation scores and ``score`` computed block by block,
or exactly from the gathered predictions for any other scorer, equal
scikit-learn's function on the collected predictions."""

import threading

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, make_regression
from sklearn.metrics import (explained_variance_score, fbeta_score,
                             get_scorer, make_scorer, matthews_corrcoef,
                             median_absolute_error, r2_score, roc_auc_score)

from dislib_nn import (AsyncEpochAveragingClassifier,
                       AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor, from_array)
from dislib_nn.exceptions import InvalidParameterError, UnsafeFileError
from dislib_nn.training._scoring import (CLASSIFIER_SCORERS,
                                         REGRESSOR_SCORERS)
from tests.conftest import use_backend
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


@pytest.fixture(params=["local", "sequential"], scope="module")
def local_or_sequential(request):
    use_backend(request.param)
    yield request.param
    use_backend("local")


def my_score(est, X, y):
    """A scorer of one's own: the mean probability of the true class."""
    proba = est.predict_proba(X)
    return float(np.mean(proba[np.arange(len(y)),
                               np.searchsorted(est.classes_, y)]))


def _mean_true_proba(est, X, y):
    # my_score's reference, written apart from it.
    proba = est.predict_proba(X)
    return float(np.mean([proba[i, list(est.classes_).index(label)]
                          for i, label in enumerate(y)]))


#: scoring -> its value from the collected predictions of ``est`` on X.
EXACT_CLASSIFIER_SCORES = {
    "f2_macro": (make_scorer(fbeta_score, beta=2, average="macro"),
                 lambda est, X, y: fbeta_score(y, est.predict(X), beta=2,
                                               average="macro")),
    "roc_auc_ovr": ("roc_auc_ovr", lambda est, X, y: roc_auc_score(
        y, est.predict_proba(X), multi_class="ovr")),
    "matthews_corrcoef": ("matthews_corrcoef", lambda est, X, y:
                          matthews_corrcoef(y, est.predict(X))),
    "my_score": (my_score, _mean_true_proba),
}


def _classifier(cls=SyncEpochAveragingClassifier, **params):
    torch.manual_seed(0)
    return cls(module=_models.Classifier, module__batch_norm=False,
               n_workers=2, batch_size=16, lr=0.1, random_state=0,
               **params)


@pytest.mark.parametrize("key", list(EXACT_CLASSIFIER_SCORES))
def test_other_classifier_scorers_are_computed_exactly(
        local_or_sequential, key):
    scoring, reference = EXACT_CLASSIFIER_SCORES[key]
    X, y = _imbalanced_digits()
    Xv, yv = X[::3], y[::3]
    est = _classifier(n_epochs=2, scoring=scoring,
                      validation_data=(Xv, yv)).fit(X, y)
    # The last record is of the final model: that of epoch 2.
    assert len(est.history_) == 2
    assert est.history_[-1]["valid_score"] == pytest.approx(
        reference(est, Xv, yv), rel=1e-9, abs=1e-12)
    expected = reference(est, X, y)
    assert est.score(X, y) == pytest.approx(expected, rel=1e-12)
    blocks = est.score(from_array(X, n_blocks=3), from_array(y, n_blocks=3))
    assert blocks == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_each_epochs_valid_score_is_of_the_model_at_that_epoch(local):
    X, y = _imbalanced_digits()
    valid = (X[::3], y[::3])
    two = _classifier(n_epochs=2, scoring=my_score,
                      validation_data=valid).fit(X, y)
    one = _classifier(n_epochs=1, scoring=my_score,
                      validation_data=valid).fit(X, y)
    first = _mean_true_proba(one, *valid)
    assert one.history_[0]["valid_score"] == pytest.approx(first, rel=1e-9)
    assert two.history_[0]["valid_score"] == pytest.approx(first, rel=1e-9)
    assert two.history_[1]["valid_score"] != pytest.approx(first, rel=1e-6)


def test_an_exact_scorer_gets_the_labels_of_classes(local):
    X, y = _imbalanced_digits()
    labels = np.array(["zero", "one", "two", "three", "four", "five",
                       "six", "seven", "eight", "nine"])[y]
    valid = (X[::3], labels[::3])
    est = _classifier(n_epochs=2, scoring="matthews_corrcoef",
                      validation_data=valid).fit(X, labels)
    assert est.history_[-1]["valid_score"] == pytest.approx(
        matthews_corrcoef(valid[1], est.predict(valid[0])), rel=1e-9)


@pytest.mark.parametrize("n_targets", [1, 2])
@pytest.mark.parametrize("scoring, reference", [
    ("neg_median_absolute_error",
     lambda y, p: -median_absolute_error(y, p)),
    (make_scorer(explained_variance_score),
     explained_variance_score),
])
def test_other_regressor_scorers_are_computed_exactly(
        local_or_sequential, n_targets, scoring, reference):
    X, y = make_regression(n_samples=120, n_features=4, n_targets=n_targets,
                           noise=5.0, random_state=0)
    X, y = X.astype(np.float32), (y / 100).astype(np.float32)
    valid = (X[:40], y[:40])
    torch.manual_seed(0)
    est = SyncEpochAveragingRegressor(
        module=_models.MLP, n_workers=2, n_epochs=2, batch_size=16,
        lr=0.05, random_state=0, scoring=scoring,
        validation_data=valid).fit(X, y)
    assert est.history_[-1]["valid_score"] == pytest.approx(
        reference(valid[1], est.predict(valid[0])), rel=1e-6)
    expected = reference(y, est.predict(X))
    assert est.score(X, y) == pytest.approx(expected, rel=1e-12)
    blocks = est.score(from_array(X, n_blocks=3), from_array(y, n_blocks=3))
    assert blocks == pytest.approx(expected, rel=1e-6)


def test_the_asynchronous_estimators_take_a_callable(local):
    X, y = _imbalanced_digits()
    Xv, yv = X[::3], y[::3]
    _, reference = EXACT_CLASSIFIER_SCORES["f2_macro"]
    est = _classifier(AsyncEpochAveragingClassifier, n_epochs=2,
                      scoring=make_scorer(fbeta_score, beta=2,
                                          average="macro"),
                      validation_data=(Xv, yv)).fit(X, y)
    assert est.history_[-1]["valid_score"] == pytest.approx(
        reference(est, Xv, yv), rel=1e-9, abs=1e-12)
    assert est.score(from_array(X, n_blocks=3), from_array(
        y, n_blocks=3)) == pytest.approx(reference(est, X, y), rel=1e-9)


def test_early_stopping_watches_the_callable_score(local):
    from dislib_nn.callbacks import EarlyStopping
    X, y = _imbalanced_digits()
    valid = (X[::3], y[::3])
    calls = []

    def constant(est, X, y):
        calls.append(len(X))
        return 0.5
    est = _classifier(n_epochs=6, scoring=constant, validation_data=valid,
                      callbacks=[EarlyStopping(monitor="valid_score",
                                               mode="max", patience=2)]
                      ).fit(X, y)
    # No improvement after the first epoch: two more, then it stops.
    assert [r["valid_score"] for r in est.history_] == [0.5] * 3
    assert calls == [len(valid[1])] * 3


class Unpicklable:
    """A scorer that cannot travel to a task: it is called on the master."""

    def __init__(self):
        self.lock = threading.Lock()

    def __call__(self, est, X, y):
        return float(np.mean(est.predict(X) == y))

    def __reduce__(self):
        raise TypeError("this scorer must not be pickled")


def test_a_callable_scorer_is_not_sent_to_tasks(local):
    X, y = _imbalanced_digits()
    valid = (X[::3], y[::3])
    est = _classifier(n_epochs=2, scoring=Unpicklable(),
                      validation_data=valid).fit(X, y)
    assert est.history_[-1]["valid_score"] == pytest.approx(
        np.mean(est.predict(valid[0]) == valid[1]), rel=1e-12)
    assert est.score(from_array(X, n_blocks=3), from_array(
        y, n_blocks=3)) == pytest.approx(np.mean(est.predict(X) == y),
                                         rel=1e-12)


def test_the_frozen_estimator_predicts_the_scored_rows_only(local):
    X, y = _imbalanced_digits()

    def peeks(est, X_given, y):
        return est.predict(X[:5])
    est = _classifier(n_epochs=1, scoring=peeks,
                      validation_data=(X[::3], y[::3]))
    with pytest.raises(TypeError, match=r"FrozenClassifier holds the "
                       r"predictions of SyncEpochAveragingClassifier's "
                       r"\d+ samples being scored, and predicts those only"):
        est.fit(X, y)


def test_save_keeps_a_callable_scoring_as_code_it_loads_if_trusted(
        local, tmp_path):
    X, y = _imbalanced_digits()
    est = _classifier(n_epochs=1, scoring=make_scorer(
        fbeta_score, beta=2, average="macro")).fit(X, y)
    path = tmp_path / "model.pt"
    est.save(path)
    # A file runs no code: an estimator that takes its parameters from
    # it refuses the scorer, which is stored by value.
    with pytest.raises(UnsafeFileError,
                       match=r"wants to run code stored by value "
                             r"\(sklearn\.metrics\._scorer\._Scorer\)"):
        SyncEpochAveragingClassifier().load(path)
    trusted = SyncEpochAveragingClassifier().load(path, trusted=True)
    assert trusted.score(X, y) == pytest.approx(est.score(X, y), rel=1e-12)
    # With its own parameters it reads none from the file.
    own = _classifier(scoring="matthews_corrcoef").load(path)
    assert own.score(X, y) == pytest.approx(
        matthews_corrcoef(y, est.predict(X)), rel=1e-12)
    # A name is data.
    est.set_params(scoring="matthews_corrcoef")
    est.save(path)
    assert SyncEpochAveragingClassifier().load(path).score(X, y) == \
        pytest.approx(matthews_corrcoef(y, est.predict(X)), rel=1e-12)


_START = r"The 'scoring' parameter of {} must be None, "
_ANY = (r"a scikit-learn scorer name \(a str of "
        r"sklearn\.metrics\.get_scorer_names\(\)\) or a callable "
        r"scorer\(estimator, X, y\) -> float\. ")
C, R = SyncEpochAveragingClassifier, SyncEpochAveragingRegressor


@pytest.mark.parametrize("cls, scoring, match", [
    (C, "no_such_score", _ANY + r"Got 'no_such_score' instead, which is "
     r"not a scorer name of scikit-learn\.$"),
    (C, "roc_aux", r"Got 'roc_aux' instead, which is not a scorer name of "
     r"scikit-learn\. Did you mean 'roc_auc'"),
    (C, "r2", r"a classifier's scorer name or a callable scorer\("
     r"estimator, X, y\) of a classifier\. Got 'r2' instead, which is a "
     r"regressor's score \(sklearn\.metrics\.r2_score\)\.$"),
    (C, "neg_median_absolute_error", r"Got 'neg_median_absolute_error' "
     r"instead, which is a regressor's score"),
    (C, make_scorer(r2_score), r"Got make_scorer\(r2_score.*\) instead, "
     r"which is a regressor's score"),
    (C, make_scorer(lambda y, p: 0.0, response_method="decision_function"),
     r"a callable scorer\(estimator, X, y\) that uses predict or "
     r"predict_proba only\. Got make_scorer\(.*\) instead, which needs "
     r"decision_function\.$"),
    (R, "balanced_accuracy", r"Got 'balanced_accuracy' instead, which is a "
     r"classifier's score \(sklearn\.metrics\.balanced_accuracy_score\)"),
    (R, "matthews_corrcoef", r"Got 'matthews_corrcoef' instead, which is a "
     r"classifier's score"),
    (R, make_scorer(fbeta_score, beta=2), r"Got make_scorer\(fbeta_score.*"
     r"\) instead, which is a classifier's score"),
    (R, "neg_log_loss", r"a regressor's scorer name or a callable scorer\("
     r"estimator, X, y\) that uses predict only\. Got 'neg_log_loss' "
     r"instead, which needs predict_proba\.$"),
    (R, "roc_auc", r"Got 'roc_auc' instead, which needs decision_function "
     r"or predict_proba\.$"),
    (C, 3, _ANY + r"Got 3 instead\.$"),
    (C, ["accuracy"], _ANY + r"Got \['accuracy'\] instead\.$"),
    (C, lambda est, X: 0.0, _ANY + r"Got <function <lambda> .*> instead, "
     r"which cannot be called as scorer\(estimator, X, y\): its signature "
     r"is \(est, X\)\.$"),
    (AsyncEpochAveragingRegressor, "accuracy", r"Got 'accuracy' instead, "
     r"which is a classifier's score"),
])
def test_a_score_that_does_not_fit_is_named_before_any_task(
        local, cls, scoring, match):
    X, y = _imbalanced_digits()
    if not issubclass(cls, C):
        y = y.astype(np.float32)
    est = cls(module=_models.MLP, scoring=scoring)
    with pytest.raises(InvalidParameterError,
                       match=_START.format(cls.__name__) + ".*" + match):
        est.fit(X, y)
    assert not hasattr(est, "module_")
