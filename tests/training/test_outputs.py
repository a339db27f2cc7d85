"""Modules whose forward returns several outputs: a tuple, a dict, a
named tuple.

Each fit is compared with plain PyTorch trained the same way, whose loss
reads the same output by hand: the same weights to float32 rounding,
the same predictions.
"""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris

from dislib_nn import (SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor, data)
from dislib_nn.exceptions import InvalidParameterError
from tests.training import _models, _reference as ref

ATOL = 2e-5


def _iris():
    X, y = load_iris(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(X))
    return X[order].astype(np.float32), y[order]


def _init(returns):
    torch.manual_seed(0)
    return _models.TwoHeads(returns=returns)


def _fit(init, X, y, cls=SyncEpochAveragingClassifier, **kwargs):
    return cls(module=init, n_workers=2, shuffle="none", n_epochs=3,
               batch_size=16, lr=0.1, **kwargs).fit(X, y)


def _expected(init, X, y, loss, epochs=3):
    parts = ref.split_like_blocks(torch.from_numpy(X), torch.from_numpy(y),
                                  2)
    return ref.epoch_averaging(init, parts, loss, epochs=epochs,
                               batch_size=16, lr=0.1)


def _cross_entropy_of(select):
    def loss(out, y):
        return torch.nn.functional.cross_entropy(select(out), y)
    return loss


@pytest.mark.parametrize("returns, output, select", [
    ("tuple", None, lambda out: out[0]),
    ("dict", "logits", lambda out: out["logits"]),
    ("named", "logits", lambda out: out.logits),
    ("named", 1, lambda out: out[1]),
])
def test_the_selected_output_trains_and_predicts(backend, returns, output,
                                                 select):
    X, y = _iris()
    init = _init(returns)
    est = _fit(init, X, y, output=output)
    expected = _expected(init, X, y, _cross_entropy_of(select))
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    with torch.no_grad():
        scores = select(expected.eval()(torch.from_numpy(X)))
    np.testing.assert_array_equal(est.predict(X), scores.argmax(1).numpy())
    np.testing.assert_allclose(
        est.predict_proba(X), torch.softmax(scores.double(), 1).numpy(),
        atol=1e-5)
    # On a ds-tensor, by tasks: the same labels.
    blocks = data.from_array(X, n_blocks=3)
    np.testing.assert_array_equal(est.predict(blocks).collect().numpy(),
                                  scores.argmax(1).numpy())


def test_a_dicts_first_value_is_the_default(sequential):
    # The dict's first value is the auxiliary head: one column, which a
    # classifier of 3 classes refuses before any task runs.
    X, y = _iris()
    with pytest.raises(ValueError, match=r"output has shape \(1, 1\)"):
        _fit(_init("dict"), X, y)


def test_loss_input_all_gives_the_criterion_every_output(backend):
    X, y = _iris()
    init = _init("dict")
    est = _fit(init, X, y, output="logits", loss_input="all",
               criterion=_models.HeadsLoss, validation_data=(X[:40],
                                                             y[:40]))
    expected = _expected(init, X, y, _models.HeadsLoss())
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    with torch.no_grad():
        out = expected.eval()(torch.from_numpy(X[:40]))
        valid_loss = float(_models.HeadsLoss()(out, torch.from_numpy(
            y[:40])))
    assert est.history_[-1]["valid_loss"] == pytest.approx(valid_loss,
                                                           rel=1e-4)
    np.testing.assert_array_equal(est.predict(X[:40]),
                                  out["logits"].argmax(1).numpy())


def test_a_regressor_predicts_the_selected_output(sequential):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(64, 4)).astype(np.float32)
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0], dtype=np.float32))
    torch.manual_seed(0)
    init = _models.TwoHeads(n_classes=1)
    est = _fit(init, X, y, cls=SyncEpochAveragingRegressor, output=1)

    def loss(out, target):
        return torch.nn.functional.mse_loss(out[1][:, 0], target)
    expected = _expected(init, X, y, loss)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    with torch.no_grad():
        aux = expected.eval()(torch.from_numpy(X))[1][:, 0]
    np.testing.assert_allclose(est.predict(X), aux.double().numpy(),
                               atol=1e-5)


@pytest.mark.parametrize("returns, output, message", [
    ("tuple", 2, r"output=2, but the module's forward returned a tuple "
                 r"of 2 element\(s\) \(output=0 to 1\)"),
    ("dict", "scores", r"output='scores' is not a key of the dict the "
                       r"module's forward returned; its keys are "
                       r"\['aux', 'logits'\]"),
    ("tuple", "logits", r"output='logits' names a key, but the module's "
                        r"forward returned a tuple of 2"),
    ("named", "score", r"named tuple with fields \['aux', 'logits'\]"),
])
def test_an_output_that_is_not_there_is_named_before_any_task(
        sequential, returns, output, message):
    X, y = _iris()
    est = SyncEpochAveragingClassifier(module=_init(returns), output=output,
                                       n_epochs=1)
    with pytest.raises(ValueError, match=message):
        est.fit(X, y)
    assert not hasattr(est, "module_")


def test_output_on_a_module_of_one_tensor(sequential):
    X, y = _iris()
    est = SyncEpochAveragingClassifier(module=_models.Classifier,
                                       output="logits", n_epochs=1)
    with pytest.raises(ValueError, match=r"output='logits' names one of "
                                         r"several outputs, but the "
                                         r"module's forward returned one "
                                         r"tensor"):
        est.fit(X, y)


@pytest.mark.parametrize("param, value, message", [
    ("output", -1, r"The 'output' parameter of SyncEpochAveragingClassifier"
                   r" must be None, an int in the range \[0, inf\) or a "
                   r"non-empty str. Got -1 instead"),
    ("loss_input", "sum", r"The 'loss_input' parameter of "
                          r"SyncEpochAveragingClassifier must be a str "
                          r"among \{'output', 'all'\}. Got 'sum' instead"),
])
def test_bad_output_parameters(sequential, param, value, message):
    X, y = _iris()
    est = SyncEpochAveragingClassifier(module=_init("tuple"),
                                       **{param: value})
    with pytest.raises(InvalidParameterError, match=message):
        est.fit(X, y)


def test_a_criterion_that_cannot_take_all_outputs_says_why(sequential):
    X, y = _iris()
    est = SyncEpochAveragingClassifier(module=_init("dict"), output="logits",
                                       loss_input="all", n_epochs=1)
    with pytest.raises(Exception) as info:
        est.fit(X, y)
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "given all the module's forward returns (dict)" in notes
    assert "loss_input='all'" in notes
