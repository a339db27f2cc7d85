"""Every way of getting a fitted estimator leaves the same fitted state.

fit, partial_fit, a warm-started fit, load, unpickling, resuming from a
checkpoint mid-fit or after the fit had finished, and GridSearchCV's
refit: each gives the same attributes, predicts as its module does, and
trains on with partial_fit. Also ``feature_names_in_`` (pandas).
"""

import pickle
import re
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification, make_regression
from sklearn.model_selection import GridSearchCV

from dislib_nn import (AsyncEpochAveragingClassifier,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from tests.conftest import use_backend
from tests.training import _models


@pytest.fixture(scope="module", autouse=True)
def _sequential():
    use_backend("sequential")
    yield
    use_backend("local")


def _classification():
    X, y = make_classification(n_samples=60, n_features=4, n_informative=3,
                               n_redundant=0, n_classes=3, random_state=0)
    return X.astype(np.float32), y


def _regression():
    X, y = make_regression(n_samples=60, n_features=4, noise=0.5,
                           random_state=0)
    return X.astype(np.float32), (y / 100).astype(np.float32)


# name -> (estimator class, its module parameters, data)
KINDS = {
    "sync_classifier": (SyncEpochAveragingClassifier,
                        dict(module=_models.Classifier, module__hidden=8),
                        _classification),
    "async_classifier": (AsyncEpochAveragingClassifier,
                         dict(module=_models.Classifier, module__hidden=8),
                         _classification),
    "sync_regressor": (SyncEpochAveragingRegressor,
                       dict(module=_models.MLP), _regression),
}


def _make(kind, **params):
    cls, module, _ = KINDS[kind]
    settings = dict(module, n_epochs=2, batch_size=16, lr=0.05,
                    n_workers=2, random_state=0)
    settings.update(params)
    return cls(**settings)


def _data(kind):
    return KINDS[kind][2]()


# Each path: (kind, X, y, tmp_path) -> a fitted estimator.
def _by_fit(kind, X, y, tmp_path):
    return _make(kind).fit(X, y)


def _by_partial_fit(kind, X, y, tmp_path):
    return _make(kind).partial_fit(X, y)


def _by_warm_start(kind, X, y, tmp_path):
    return _make(kind, warm_start=True, n_epochs=1).fit(X, y).fit(X, y)


def _by_load(kind, X, y, tmp_path):
    _make(kind).fit(X, y).save(tmp_path / "model.pt")
    return KINDS[kind][0]().load(tmp_path / "model.pt")


def _by_load_with_parameters(kind, X, y, tmp_path):
    _make(kind).fit(X, y).save(tmp_path / "model.pt")
    return _make(kind).load(tmp_path / "model.pt")


def _by_unpickle(kind, X, y, tmp_path):
    return pickle.loads(pickle.dumps(_make(kind).fit(X, y)))


def _by_resume_mid_fit(kind, X, y, tmp_path):
    # The checkpoint of a fit that stopped after its first epoch.
    _make(kind, n_epochs=1, checkpoint_dir=tmp_path).fit(X, y)
    return _make(kind, checkpoint_dir=tmp_path).fit(X, y, resume=True)


def _by_resume_of_a_finished_fit(kind, X, y, tmp_path):
    _make(kind, checkpoint_dir=tmp_path).fit(X, y)
    return _make(kind, checkpoint_dir=tmp_path).fit(X, y, resume=True)


def _by_grid_search_refit(kind, X, y, tmp_path):
    search = GridSearchCV(_make(kind), {"lr": [0.01, 0.05]}, cv=2)
    return search.fit(X, y).best_estimator_


PATHS = {"fit": _by_fit, "partial_fit": _by_partial_fit,
         "warm_start": _by_warm_start, "load": _by_load,
         "load_with_parameters": _by_load_with_parameters,
         "unpickle": _by_unpickle, "resume_mid_fit": _by_resume_mid_fit,
         "resume_finished": _by_resume_of_a_finished_fit,
         "grid_search_refit": _by_grid_search_refit}


def _reference_outputs(est, X):
    """The fitted module's outputs on X, by plain PyTorch."""
    module = est.module_
    module.eval()
    with torch.no_grad():
        out = module(torch.from_numpy(X))
    return out.to(torch.float64).numpy()


def _weights(est):
    return {k: v.detach().clone() for k, v in est.module_.state_dict().items()}


def _check_predicts_and_trains_on(est, X, y):
    outputs = _reference_outputs(est, X)
    if hasattr(est, "classes_"):
        expected = est.classes_[outputs.argmax(axis=1)]
        np.testing.assert_array_equal(est.predict(X), expected)
        assert est.score(X, y) == pytest.approx(np.mean(expected == y))
    else:
        np.testing.assert_allclose(est.predict(X), outputs[:, 0],
                                   rtol=1e-5, atol=1e-6)
    before, epochs = _weights(est), est.n_epochs_
    est.partial_fit(X, y)
    assert est.n_epochs_ == epochs + 1 == len(est.history_)
    after = _weights(est)
    assert any(not torch.equal(before[k], after[k]) for k in before
               if before[k].is_floating_point())


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_path_to_a_fitted_estimator_gives_the_same_state(
        kind, tmp_path):
    X, y = _data(kind)
    keys = {}
    for name, path in PATHS.items():
        folder = tmp_path / name
        folder.mkdir()
        est = path(kind, X, y, folder)
        keys[name] = set(vars(est))
        _check_predicts_and_trains_on(est, X, y)
        # Training on keeps the same attributes.
        assert set(vars(est)) == keys[name], name
    expected = keys["fit"]
    assert {"module_", "history_", "n_epochs_", "n_features_in_",
            "n_workers_", "optimizer_states_"} <= expected
    different = {name: sorted(k ^ expected) for name, k in keys.items()
                 if k != expected}
    assert not different


def test_a_loaded_estimator_continues_with_partial_fit_and_warm_start(
        tmp_path):
    # Regression test: both raised AttributeError ('_carried').
    X, y = _classification()
    path = tmp_path / "model.pt"
    fitted = _make("sync_classifier").fit(X, y)
    fitted.save(path)
    for est in (SyncEpochAveragingClassifier().load(path).partial_fit(X, y),
                SyncEpochAveragingClassifier().load(path).set_params(
                    warm_start=True).fit(X, y)):
        assert est.n_epochs_ > fitted.n_epochs_
        _check_predicts_and_trains_on(est, X, y)


@pytest.mark.parametrize("kind", ["sync_classifier", "async_classifier"])
def test_a_loaded_copy_trains_on_like_the_original(kind, tmp_path):
    # Plain SGD keeps no optimizer state, so the loaded copy (which has
    # none) continues exactly as the estimator it was saved from: the same
    # seeds, epoch count, sizes and weights.
    X, y = _classification()
    original = _make(kind, optimizer=torch.optim.SGD).fit(X, y)
    original.save(tmp_path / "model.pt")
    loaded = KINDS[kind][0]().load(tmp_path / "model.pt")
    unpickled = pickle.loads(pickle.dumps(original))
    original.partial_fit(X, y)
    for copy in (loaded.partial_fit(X, y), unpickled.partial_fit(X, y)):
        for key, value in _weights(original).items():
            torch.testing.assert_close(_weights(copy)[key], value)
        assert copy.history_[-1]["train_loss"] == pytest.approx(
            original.history_[-1]["train_loss"])


def test_resuming_a_finished_fit_predicts_scores_and_runs_no_epoch(
        tmp_path):
    # Regression test: score raised AttributeError ('_output').
    X, y = _classification()
    first = _make("sync_classifier", checkpoint_dir=tmp_path).fit(X, y)
    again = _make("sync_classifier", checkpoint_dir=tmp_path).fit(
        X, y, resume=True)
    assert again.history_ == first.history_
    for key, value in _weights(first).items():
        assert torch.equal(_weights(again)[key], value)
    np.testing.assert_array_equal(again.predict(X), first.predict(X))
    assert again.score(X, y) == first.score(X, y)


# ------------------------------------------------------ feature names
def _frame(X, columns):
    pd = pytest.importorskip("pandas")
    return pd.DataFrame(X, columns=columns)


COLUMNS = ["a", "b", "c", "d"]


def test_fit_on_a_dataframe_sets_feature_names_in():
    X, y = _classification()
    est = _make("sync_classifier").fit(_frame(X, COLUMNS), y)
    assert isinstance(est.feature_names_in_, np.ndarray)
    assert est.feature_names_in_.dtype == object
    np.testing.assert_array_equal(est.feature_names_in_, COLUMNS)
    # Other column names than strings are not feature names.
    assert not hasattr(_make("sync_classifier").fit(
        _frame(X, [0, 1, 2, 3]), y), "feature_names_in_")
    # A refit on an array forgets them.
    assert not hasattr(est.fit(X, y), "feature_names_in_")


def test_mixed_column_name_types_are_refused_before_training():
    X, y = _classification()
    est = _make("sync_classifier")
    with pytest.raises(TypeError, match=r"only supported if all input "
                       r"features have string names, but X has "
                       r"\['int', 'str'\]"):
        est.fit(_frame(X, ["a", "b", 2, 3]), y)
    assert not hasattr(est, "module_")


def test_predicting_without_or_with_other_feature_names():
    X, y = _classification()
    est = _make("sync_classifier").fit(_frame(X, COLUMNS), y)
    with pytest.warns(UserWarning, match="X does not have valid feature "
                      "names, but SyncEpochAveragingClassifier was fitted "
                      "with feature names"):
        est.predict(X)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.score(X, y)
    assert [str(w.message) for w in caught] == [
        "X does not have valid feature names, but "
        "SyncEpochAveragingClassifier was fitted with feature names"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = est.predict(_frame(X, COLUMNS))
        est.score(_frame(X, COLUMNS), y)
    np.testing.assert_array_equal(expected, est.predict_proba(
        _frame(X, COLUMNS)).argmax(axis=1))
    message = re.escape("The feature names should match those that were "
                        "passed during fit.\n")
    for columns, detail in (
            (COLUMNS[::-1], "Feature names must be in the same order"),
            (["a", "b", "c", "x"], "Feature names unseen at fit time:\n- x"
             "\nFeature names seen at fit time, yet now missing:\n- d\n")):
        for method in (est.predict, est.predict_proba,
                       lambda Z: est.score(Z, y)):
            with pytest.raises(ValueError,
                               match=message + re.escape(detail)):
                method(_frame(X, columns))
    unnamed = _make("sync_classifier").fit(X, y)
    with pytest.warns(UserWarning, match="X has feature names, but "
                      "SyncEpochAveragingClassifier was fitted without"):
        unnamed.predict(_frame(X, COLUMNS))


def test_partial_fit_with_other_feature_names_changes_nothing():
    X, y = _classification()
    est = _make("sync_classifier").fit(_frame(X, COLUMNS), y)
    before, history = _weights(est), list(est.history_)
    with pytest.raises(ValueError, match="The feature names should match"):
        est.partial_fit(_frame(X, ["a", "b", "c", "x"]), y)
    assert est.history_ == history
    for key, value in before.items():
        assert torch.equal(_weights(est)[key], value)


def test_feature_names_survive_save_load_and_pickle(tmp_path):
    X, y = _classification()
    est = _make("sync_classifier").fit(_frame(X, COLUMNS), y)
    est.save(tmp_path / "model.pt")
    for copy in (SyncEpochAveragingClassifier().load(tmp_path / "model.pt"),
                 pickle.loads(pickle.dumps(est))):
        np.testing.assert_array_equal(copy.feature_names_in_, COLUMNS)
        with pytest.raises(ValueError, match="Feature names unseen"):
            copy.predict(_frame(X, ["a", "b", "c", "x"]))


@pytest.mark.parametrize("kind", list(KINDS))
def test_scikit_learns_feature_names_check(kind):
    # Not among the checks parametrize_with_checks yields for estimators
    # outside scikit-learn: run it here.
    pytest.importorskip("pandas")
    from sklearn.utils.estimator_checks import \
        check_dataframe_column_names_consistency
    est = _make(kind)
    check_dataframe_column_names_consistency(type(est).__name__, est)
