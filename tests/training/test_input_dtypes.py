"""Integer and boolean inputs reach the module as int64 and bool.

Each fit is compared with plain PyTorch trained the same way on the
same tensors (int64 ids, bool flags): the same weights to float32
rounding, on every backend.
"""

import os

import numpy as np
import pytest
import torch
from sklearn.exceptions import DataConversionWarning

from dislib_nn import (SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor, data)
from tests.training import _models, _reference as ref

ATOL = 2e-5


def _init(cls, **kwargs):
    torch.manual_seed(0)
    return cls(**kwargs)


def _tokens(n=96, width=5, n_tokens=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, n_tokens, size=(n, width))
    return X, (X[:, 0] < n_tokens // 2).astype(np.int64)


def _two_workers(cls, init, epochs=3, **kwargs):
    return cls(module=init, n_workers=2, shuffle="none", n_epochs=epochs,
               batch_size=8, lr=0.1, **kwargs)


def _expected(init, X, y, criterion, epochs=3):
    parts = ref.split_like_blocks(torch.from_numpy(X), torch.from_numpy(y),
                                  2)
    return ref.epoch_averaging(init, parts, criterion, epochs=epochs,
                               batch_size=8, lr=0.1)


def test_integer_ids_train_like_plain_pytorch(backend):
    X, y = _tokens()
    init = _init(_models.TokenBag)
    est = _two_workers(SyncEpochAveragingClassifier, init).fit(X, y)
    expected = _expected(init, X, y, torch.nn.CrossEntropyLoss())
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    labels = expected(torch.from_numpy(X)).argmax(dim=1).numpy()
    np.testing.assert_array_equal(est.predict(X), labels)
    # A ds-tensor of int32 blocks: its tasks give the module int64 too.
    blocks = data.from_array(X.astype(np.int32), n_blocks=3)
    np.testing.assert_array_equal(est.predict(blocks).collect().numpy(),
                                  labels)
    assert est.score(blocks, data.from_array(y, n_blocks=3)) == \
        pytest.approx(float(np.mean(labels == y)))


def test_ids_above_2_to_the_24_stay_exact():
    # float32 holds integers exactly only up to 2**24: 2**24 + 1 would
    # become 2**24, and its parity with it.
    ids = 2 ** 24 + np.arange(64)
    X, y = ids[:, None], ids % 2
    init = _init(_models.Parity)
    est = _two_workers(SyncEpochAveragingClassifier, init,
                       epochs=10).fit(X, y)
    expected = _expected(init, X, y, torch.nn.CrossEntropyLoss(), epochs=10)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    np.testing.assert_array_equal(est.predict(X[:4]), [0, 1, 0, 1])


def test_integer_inputs_with_float_targets_regress(backend):
    X, _ = _tokens()
    y = (X[:, 0] / 40.0).astype(np.float32)
    init = _init(_models.TokenBag, n_outputs=1)
    est = _two_workers(SyncEpochAveragingRegressor, init).fit(X, y)
    expected = _expected(init, X, y[:, None], torch.nn.MSELoss())
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    want = expected(torch.from_numpy(X))[:, 0].detach().numpy()
    np.testing.assert_allclose(est.predict(X), want, rtol=1e-4, atol=1e-5)


def test_boolean_inputs_reach_the_module_as_bool(backend):
    rng = np.random.default_rng(1)
    X = rng.random((64, 4)) < 0.5
    y = (X[:, 0] & X[:, 1]).astype(np.int64)
    init = _init(_models.Flags)
    # validation_data: its blocks are bool too.
    est = _two_workers(SyncEpochAveragingClassifier, init,
                       validation_data=(X[:16], y[:16])).fit(X, y)
    expected = _expected(init, X, y, torch.nn.CrossEntropyLoss())
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    labels = expected(torch.from_numpy(X)).argmax(dim=1).numpy()
    assert est.history_[-1]["valid_score"] == pytest.approx(
        float(np.mean(labels[:16] == y[:16])))


def test_integer_counts_for_a_float_module_are_cast_with_a_warning(backend):
    # Integers meant as numbers, for nn.Linear layers, which cannot take
    # int64: the fit says so, and trains on float32 copies.
    X, _ = _tokens()
    y = (X[:, 0] / 40.0).astype(np.float32)
    init = _init(_models.MLP, n_features_in=5, n_outputs=1)
    est = _two_workers(SyncEpochAveragingRegressor, init)
    with pytest.warns(DataConversionWarning, match=r"X holds integer "
                      r"values, but the forward of module MLP does not "
                      r"take them as torch.int64 \(RuntimeError: .*fit "
                      r"casts X to torch.float32.*X.astype\('float32'\)"):
        est.fit(X, y)
    expected = _expected(init, X.astype(np.float32), y[:, None],
                         torch.nn.MSELoss())
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    # Integers and floats alike reach it as floats from then on.
    np.testing.assert_allclose(est.predict(X), est.predict(
        X.astype(np.float32)))


def test_float_inputs_to_a_model_fitted_on_integers_are_refused():
    X, y = _tokens()
    est = SyncEpochAveragingClassifier(
        module=_models.TokenBag, n_workers=2, n_epochs=1, batch_size=16,
        lr=0.1, warm_start=True).fit(X, y)
    for call in (est.predict, lambda X: est.fit(X, y),
                 lambda X: est.partial_fit(X, y)):
        with pytest.raises(ValueError, match=r"X has floating-point values "
                           r"\(dtype float64\).*fitted on integer inputs.*"
                           r"torch.int64"):
            call(X.astype(np.float64))
    assert est.n_epochs_ == 1
    # Booleans are integers to it.
    assert est.predict(X.astype(bool)).shape == (len(X),)


def test_the_one_sample_trial_names_the_dtype_the_module_received():
    X, y = _tokens()
    est = SyncEpochAveragingClassifier(
        module=_models.TokenBag, n_workers=2, n_epochs=1, batch_size=16,
        lr=0.1)
    with pytest.raises(RuntimeError) as info:
        est.fit(X.astype(np.float32), y)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "dtype torch.float32" in notes and "torch.int64" in notes


def test_save_and_load_keep_the_input_kind(tmp_path):
    X, y = _tokens()
    est = SyncEpochAveragingClassifier(
        module=_models.TokenBag, n_workers=2, n_epochs=2, batch_size=16,
        lr=0.1, random_state=0).fit(X, y)
    path = os.path.join(tmp_path, "tokens.dnn")
    est.save(path)
    loaded = SyncEpochAveragingClassifier().load(path)
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
    with pytest.raises(ValueError, match="fitted on integer inputs"):
        loaded.predict(X.astype(np.float32))
