"""The defaults that adapt to the replicas' steps (sync_every="auto",
lr_scaling="auto"): the rule, and fits that follow it."""

import math

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification

from dislib_nn import (AsyncEpochAveragingClassifier,
                       SyncEpochAveragingClassifier)
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training._adaptive import (MERGES_PER_EPOCH, MIN_STEPS,
                                          MIN_WORKERS, plan)
from dislib_nn.training._fit_params import own_params
from dislib_nn.training.strategies._async import (LAG, LAG_FEW_STEPS,
                                                  AsyncStrategy)
from tests.conftest import use_backend
from tests.training import _models


# ------------------------------------------------------------- the rule
@pytest.mark.parametrize("workers", [1, 2, 8])
def test_enough_steps_keep_one_merge_at_the_given_rate(workers):
    chosen = plan("auto", "auto", workers, MIN_STEPS)
    assert (chosen.sync_every, chosen.lr_factor, chosen.warmup,
            chosen.adapted) == (1, 1.0, False, False)


@pytest.mark.parametrize("workers,steps,every", [
    (16, MIN_STEPS - 1, 1 / MERGES_PER_EPOCH),
    (32, 12, 1 / MERGES_PER_EPOCH),
    (64, MERGES_PER_EPOCH + 1, 1 / MERGES_PER_EPOCH)])
def test_few_steps_merge_more_often_at_a_sqrt_p_rate(workers, steps, every):
    chosen = plan("auto", "auto", workers, steps)
    assert chosen.sync_every == every and chosen.adapted
    assert chosen.lr_factor == pytest.approx(math.sqrt(workers))
    assert chosen.factor(0) == pytest.approx(math.sqrt(workers) / 2)
    assert chosen.factor(1) == pytest.approx(math.sqrt(workers))
    assert "fewer than" in chosen.describe()


@pytest.mark.parametrize("workers,steps", [(16, MERGES_PER_EPOCH),
                                           (64, 1)])
def test_fewest_steps_merge_after_each_at_the_given_rate(workers, steps):
    """Large-batch SGD with too few steps to warm a scaled rate up."""
    chosen = plan("auto", "auto", workers, steps)
    assert chosen.sync_every == "step" and chosen.adapted
    assert (chosen.lr_factor, chosen.warmup) == (1.0, False)
    assert plan("auto", "sqrt", workers, steps).lr_factor == \
        pytest.approx(math.sqrt(workers))


@pytest.mark.parametrize("workers", [1, MIN_WORKERS - 1])
def test_few_replicas_never_adapt(workers):
    assert not plan("auto", "auto", workers, 3).adapted


def test_explicit_values_are_taken_as_given():
    chosen = plan(2, "linear", 16, 3)
    assert (chosen.sync_every, chosen.lr_factor, chosen.adapted) == \
        (2, 16.0, False)
    assert plan(0.5, "auto", 16, 3).lr_factor == 1.0
    assert plan("auto", "none", 16, 3).lr_factor == 1.0


def test_a_user_schedule_gets_no_warm_up():
    chosen = plan("auto", "auto", 16, 3, has_schedule=True)
    assert chosen.factor(0) == chosen.lr_factor


def test_a_strategy_without_fractions_keeps_one_merge():
    chosen = plan("auto", "auto", 16, 3, fractions=False)
    assert (chosen.sync_every, chosen.lr_factor) == (1, 1.0)


# ------------------------------------------------------------ the fits
_MODULE = dict(module=_models.Classifier, module__batch_norm=False)


def _data(n=256):
    X, y = make_classification(n_samples=n, n_features=8, n_informative=6,
                               n_classes=3, random_state=0)
    return X.astype(np.float32), y


def _weights(est):
    return {k: v.detach().clone() for k, v in
            est.module_.state_dict().items()}


class _HalfFirst:
    def __call__(self, epoch):
        return 0.5 if epoch == 0 else 1.0


@pytest.mark.parametrize("n, every, factor, merges", [
    # 8 steps a replica: four merges an epoch at lr * sqrt(8), half of
    # it in epoch 1.
    (512, 0.25, math.sqrt(8), 4),
    # 4 steps a replica: a merge after every step at lr.
    (256, "step", 1.0, 4)])
def test_auto_equals_its_explicit_spelling(n, every, factor, merges):
    """8 workers of batch 8 on n rows."""
    X, y = _data(n=n)
    common = dict(**_MODULE, n_epochs=2, batch_size=8,
                  n_workers=8, random_state=0, lr=0.05)
    auto = SyncEpochAveragingClassifier(**common).fit(X, y)
    spelled = SyncEpochAveragingClassifier(
        **dict(common, lr=0.05 * factor), sync_every=every,
        lr_scaling="none",
        lr_schedule=_HalfFirst() if factor > 1 else None).fit(X, y)
    for key, value in _weights(spelled).items():
        torch.testing.assert_close(_weights(auto)[key], value, rtol=1e-6,
                                   atol=1e-6)
    first = auto.history_[0]
    assert first["schedule"]["adapted"] and \
        first["schedule"]["sync_every"] == every
    rates = [0.05 * factor / 2, 0.05 * factor] if factor > 1 else \
        [0.05, 0.05]
    assert [r["lr"] for r in auto.history_] == pytest.approx(rates)
    assert first["n_merges"] == merges


def test_four_workers_on_enough_rows_keep_one_merge_per_epoch():
    X, y = _data(n=4 * 8 * MIN_STEPS)
    est = SyncEpochAveragingClassifier(
        **_MODULE, n_epochs=1, batch_size=8, n_workers=4,
        random_state=0).fit(X, y)
    assert est.history_[0]["n_merges"] == 1
    assert not est.history_[0]["schedule"]["adapted"]
    assert est.history_[0]["lr"] == pytest.approx(est.lr)


def test_verbose_says_which_schedule_runs(capsys):
    X, y = _data()
    SyncEpochAveragingClassifier(
        **_MODULE, n_epochs=1, batch_size=8, n_workers=8,
        random_state=0, verbose=1).fit(X, y)
    out = capsys.readouterr().out
    assert "a merge after every optimizer step" in out
    assert "fewer than 64" in out


def test_the_asynchronous_strategy_follows_the_same_rule():
    """Its "auto" is its explicit spelling, as the synchronous one's; with
    few steps a replica its max_lag="auto" is 0, so both defaults give
    the same model (the order merges run in changes nothing but
    rounding)."""
    X, y = _data(n=512)                        # 8 steps a replica
    common = dict(**_MODULE, n_epochs=2, batch_size=8,
                  n_workers=8, random_state=0, lr=0.05)
    auto = AsyncEpochAveragingClassifier(**common).fit(X, y)
    spelled = AsyncEpochAveragingClassifier(
        **dict(common, lr=0.05 * math.sqrt(8)), sync_every=0.25,
        lr_scaling="none", lr_schedule=_HalfFirst(), max_lag=0).fit(X, y)
    sync = SyncEpochAveragingClassifier(**common).fit(X, y)
    for other in (spelled, sync):
        for key, value in _weights(other).items():
            torch.testing.assert_close(_weights(auto)[key], value,
                                       rtol=1e-5, atol=1e-5)
    first = auto.history_[0]
    assert first["schedule"]["adapted"] and \
        first["schedule"]["sync_every"] == 0.25
    assert first["schedule"]["max_lag"] == LAG_FEW_STEPS == 0
    assert "max_lag" not in spelled.history_[0]["schedule"]
    assert len(first["merges"]) == 4 * 8


def _async_lag(max_lag, workers, steps, merge_delay=0):
    estimator = AsyncEpochAveragingClassifier(
        **_MODULE, max_lag=max_lag, merge_delay=merge_delay)
    return plan("auto", "auto", workers, steps,
                own=own_params(AsyncStrategy, estimator),
                adapt=AsyncStrategy.adapt)


@pytest.mark.parametrize("workers,steps,lag", [
    (2, 3, LAG), (MIN_WORKERS, MIN_STEPS, LAG),
    (MIN_WORKERS, MIN_STEPS - 1, LAG_FEW_STEPS), (64, 3, LAG_FEW_STEPS)])
def test_auto_lag_is_none_where_the_replicas_make_few_steps(workers, steps,
                                                            lag):
    chosen = _async_lag("auto", workers, steps)
    assert chosen.strategy_params == {"max_lag": lag}
    assert chosen.as_dict()["max_lag"] == lag
    assert f"max_lag={lag}" in chosen.describe()


@pytest.mark.parametrize("workers,steps", [(2, 3), (64, 3)])
def test_auto_lag_is_zero_with_a_merge_delay(workers, steps):
    chosen = _async_lag("auto", workers, steps, merge_delay=1)
    assert chosen.strategy_params == {"max_lag": 0}


@pytest.mark.parametrize("max_lag", [None, 0, 3])
def test_an_explicit_lag_is_taken_as_given(max_lag):
    assert _async_lag(max_lag, 64, 3).strategy_params == {}
    assert _async_lag(max_lag, 64, 3, merge_delay=1).strategy_params == {}


def test_auto_lag_on_enough_steps_lets_a_worker_run_ahead(capsys):
    """Two workers with many steps: one round of lag, as before "auto"
    (on the sequential backend, where merges run in worker order and a
    lag of 1 is reproducible)."""
    X, y = _data()
    use_backend("sequential")
    try:
        _lag_one_on_enough_steps(X, y, capsys)
    finally:
        use_backend("local")


def _lag_one_on_enough_steps(X, y, capsys):
    est = AsyncEpochAveragingClassifier(
        **_MODULE, n_epochs=2, batch_size=8, n_workers=2, random_state=0,
        verbose=1).fit(X, y)
    assert est.max_lag == "auto"
    assert [h["schedule"]["max_lag"] for h in est.history_] == [LAG, LAG]
    assert "max_lag=1" in capsys.readouterr().out
    same = AsyncEpochAveragingClassifier(
        **_MODULE, n_epochs=2, batch_size=8, n_workers=2, random_state=0,
        max_lag=1).fit(X, y)
    for key, value in _weights(same).items():
        torch.testing.assert_close(_weights(est)[key], value, rtol=1e-5,
                                   atol=1e-5)


def test_bad_lr_scaling_names_the_value():
    X, y = _data()
    with pytest.raises(InvalidParameterError, match="lr_scaling.*'cube'"):
        SyncEpochAveragingClassifier(**_MODULE, lr_scaling="cube").fit(X, y)
