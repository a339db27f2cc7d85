"""Diverged replicas are left out of the merge (the arithmetic, no tasks)."""

import math

import torch

from dislib_nn.training.merge import _sums


def _state(value):
    return {"w": torch.full((2, 2), value), "steps": torch.tensor(3)}


def test_is_finite_looks_at_loss_weights_and_optimizer_state():
    assert _sums.is_finite(_state(1.0), loss=0.5)
    assert not _sums.is_finite(_state(float("nan")))
    assert not _sums.is_finite(_state(float("inf")))
    assert not _sums.is_finite(_state(1.0), loss=float("nan"))
    optim = {"state": {0: {"momentum_buffer": torch.tensor([1.0, math.inf])}},
             "param_groups": [{"lr": 0.1}]}
    assert not _sums.is_finite(optim)


def test_finite_mean_renormalises_over_the_finite_replicas():
    states = [_state(1.0), _state(float("nan")), _state(4.0)]
    merged, all_diverged = _sums.finite_mean(
        states, [10, 30, 30], [True, False, True], previous=_state(0.0))
    # Plain arithmetic: (10 * 1 + 30 * 4) / 40.
    torch.testing.assert_close(merged["w"], torch.full((2, 2), 3.25))
    assert not all_diverged


def test_finite_mean_keeps_the_previous_model_when_all_diverged():
    previous = _state(2.0)
    merged, all_diverged = _sums.finite_mean(
        [_state(float("nan")), _state(float("inf"))], [5, 5],
        [False, False], previous)
    assert all_diverged
    torch.testing.assert_close(merged["w"], previous["w"])


# --------------------------------------------------------- the estimators
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from dislib_nn import (AsyncEpochAveragingRegressor,  # noqa: E402
                       SyncEpochAveragingRegressor)
from dislib_nn.exceptions import (DivergenceError,  # noqa: E402
                                  InvalidParameterError, TaskFailureWarning)
from tests.conftest import use_backend  # noqa: E402
from tests.training._models import NaNOnCalls  # noqa: E402

# Sequential backend, 2 workers, 16 rows each, batches of 4: epoch e's
# training forwards are calls 8e+1..8e+4 (worker 0) and 8e+5..8e+8
# (worker 1); a retry runs its 4 calls right after the first run's.


@pytest.fixture
def sequential():
    use_backend("sequential")
    yield
    use_backend("local")


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    return x, x.sum(axis=1).astype(np.float32)


def _fit(tmp_path, first, last, cls=SyncEpochAveragingRegressor, **kwargs):
    params = dict(module=NaNOnCalls, module__counter=str(tmp_path / "calls"),
                  module__first=first, module__last=last, n_workers=2,
                  batch_size=4, n_epochs=2, random_state=0)
    params.update(kwargs)
    return cls(**params).fit(*_data())


def _finite(est):
    return all(bool(torch.isfinite(v).all())
               for v in est.module_.state_dict().values())


def test_retry_reruns_the_epoch_and_ends_with_the_unfaulted_model(
        sequential, tmp_path):
    retried = _fit(tmp_path, 6, 6)
    (tmp_path / "clean").mkdir()
    clean = _fit(tmp_path / "clean", 0, 0)
    assert [r["retried"] for r in retried.history_] == [[1], []]
    assert [r["diverged"] for r in retried.history_] == [[], []]
    for key, value in clean.module_.state_dict().items():
        torch.testing.assert_close(retried.module_.state_dict()[key], value,
                                   rtol=0, atol=0)


def test_retry_that_diverges_again_raises_naming_epoch_and_worker(
        sequential, tmp_path):
    est = SyncEpochAveragingRegressor(
        module=NaNOnCalls, module__counter=str(tmp_path / "calls"),
        module__first=6, module__last=12, n_workers=2, batch_size=4,
        n_epochs=2, random_state=0)
    with pytest.raises(DivergenceError,
                       match=r"Worker 1 diverged in epoch 1 after a retry"):
        est.fit(*_data())
    assert not hasattr(est, "module_")


def test_raise_names_epoch_and_worker(sequential, tmp_path):
    with pytest.raises(DivergenceError, match=r"Worker 0 diverged in epoch 2"):
        _fit(tmp_path, 10, 10, on_failure="raise")


@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
def test_skip_drops_the_diverged_worker_and_records_it(sequential, tmp_path,
                                                       cls):
    est = _fit(tmp_path, 6, 6, cls=cls, on_failure="skip")
    assert [r["diverged"] for r in est.history_] == [[1], []]
    assert all(np.isfinite(r["train_loss"]) for r in est.history_)
    assert _finite(est)


def test_skip_keeps_the_previous_model_when_every_worker_diverged(
        sequential, tmp_path):
    est = _fit(tmp_path, 1, 8, on_failure="skip")
    assert est.history_[0]["diverged"] == [0, 1]
    assert est.history_[1]["diverged"] == []
    assert _finite(est)


@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
def test_an_epoch_that_merged_nothing_warns_and_the_fit_counts_drops(
        sequential, tmp_path, cls):
    with pytest.warns(TaskFailureWarning) as caught:
        est = _fit(tmp_path, 1, 8, cls=cls, on_failure="skip")
    messages = [str(w.message) for w in caught]
    assert any(m.startswith(
        "Epoch 1 merged nothing: every worker's update was left out "
        "(workers [0, 1] diverged), so the model is the one the epoch "
        "started from. After 3 such epochs in a row the fit stops.")
        for m in messages), messages
    assert any(m.startswith("This fit left 2 of 4 worker-epochs out of "
                            "the merges") for m in messages), messages
    assert est.history_[1]["diverged"] == []


@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
def test_epochs_in_a_row_that_merge_nothing_stop_the_fit(sequential,
                                                         tmp_path, cls):
    with pytest.warns(TaskFailureWarning), pytest.raises(
            DivergenceError,
            match=r"3 epochs in a row \(1 to 3\) merged nothing under "
                  r"on_failure='skip': every worker's update was left out "
                  r"\(epoch 1: workers \[0, 1\] diverged; epoch 2: "
                  r"workers \[0, 1\] diverged; epoch 3: workers \[0, 1\] "
                  r"diverged\)\. The model has not changed since epoch 0"):
        _fit(tmp_path, 1, 10**6, cls=cls, on_failure="skip", n_epochs=5)


def test_on_failure_is_validated_at_fit(sequential):
    est = SyncEpochAveragingRegressor(module=NaNOnCalls, on_failure="ignore")
    with pytest.raises(InvalidParameterError, match="'on_failure'"):
        est.fit(*_data())
