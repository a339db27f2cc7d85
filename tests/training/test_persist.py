"""Fitted estimators: pickle, joblib and save/load, into a fresh process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from dislib_nn import (SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from dislib_nn.exceptions import NotFittedError, ShapeError
from tests.training._models import MLP, Classifier
from tests.training._paths import ROOT, SCRIPTS

SCRIPT = os.path.join(SCRIPTS, "persist_fit.py")


def _data():
    rng = np.random.RandomState(1)
    X = rng.randn(48, 4).astype("float32")
    return X, (X[:, 0] > 0).astype(np.int64)


@pytest.fixture(scope="module")
def fitted():
    X, y = _data()
    return SyncEpochAveragingClassifier(
        module=Classifier, module__hidden=12, n_epochs=2, n_workers=2,
        random_state=0).fit(X, y)


def _run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("DISLIB_NN_BACKEND", None)
    done = subprocess.run([sys.executable, SCRIPT] + list(args),
                          capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_pickle_joblib_and_save_predict_in_a_fresh_process(
        fresh_python, tmp_path):
    expected = _run("fit", str(tmp_path), "local")
    # The training data is not needed, and not inside the files.
    X_train = np.load(tmp_path / "X_train.npy")
    os.remove(tmp_path / "X_train.npy")
    for name in ("est.pkl", "est.joblib", "est.pt"):
        assert X_train.tobytes() not in (tmp_path / name).read_bytes()
    got = _run("load", str(tmp_path), "sequential")
    for name in ("pickle", "joblib", "save"):
        np.testing.assert_allclose(got[name], expected, rtol=1e-6)


def test_save_then_load_with_the_same_or_no_parameters(fitted, tmp_path):
    path = tmp_path / "model.pt"
    fitted.save(path)
    X, _ = _data()
    for est in (SyncEpochAveragingClassifier().load(path),
                SyncEpochAveragingClassifier(
                    module=Classifier, module__hidden=12).load(path)):
        np.testing.assert_array_equal(est.classes_, fitted.classes_)
        assert est.history_ == fitted.history_
        for key, value in fitted.module_.state_dict().items():
            assert torch.equal(est.module_.state_dict()[key], value)
        np.testing.assert_allclose(est.predict_proba(X),
                                   fitted.predict_proba(X), rtol=1e-6)


def test_load_into_another_architecture_names_the_keys(fitted, tmp_path):
    path = tmp_path / "model.pt"
    fitted.save(path)
    other = SyncEpochAveragingClassifier(module=MLP)
    with pytest.raises(ShapeError, match=r"do not fit module MLP .*keys the "
                       r"module has and .* lacks: \['body.0.bias', "
                       r"'body.0.weight'.*keys .* has and the module lacks: "
                       r"\['hidden.weight', 'norm.bias'"):
        other.load(path)
    wider = SyncEpochAveragingClassifier(module=Classifier, module__hidden=20)
    with pytest.raises(ShapeError, match=r"different shapes \(saved, "
                       r"module\): hidden.weight \(12, 4\) vs \(20, 4\)"):
        wider.load(path)
    # A failed load leaves the estimator as it was.
    assert not hasattr(wider, "module_")
    assert wider.get_params()["module__hidden"] == 20


def test_save_before_fit_and_load_of_the_wrong_file(fitted, tmp_path):
    with pytest.raises(NotFittedError, match="no weights to save"):
        SyncEpochAveragingClassifier(module=Classifier).save(
            tmp_path / "x.pt")
    path = tmp_path / "model.pt"
    fitted.save(path)
    with pytest.raises(TypeError, match=r"holds a .*"
                       r"SyncEpochAveragingClassifier; it cannot be loaded "
                       r"into a .*SyncEpochAveragingRegressor"):
        SyncEpochAveragingRegressor().load(path)
    torch.save({"weights": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="is not a file written by"):
        SyncEpochAveragingClassifier().load(tmp_path / "other.pt")
