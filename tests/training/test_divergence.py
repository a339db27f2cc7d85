"""Diverged replicas are left out of the merge (the arithmetic, no tasks)."""

import math

import torch

from dislib_nn.training import _merge


def _state(value):
    return {"w": torch.full((2, 2), value), "steps": torch.tensor(3)}


def test_is_finite_looks_at_loss_weights_and_optimizer_state():
    assert _merge.is_finite(_state(1.0), loss=0.5)
    assert not _merge.is_finite(_state(float("nan")))
    assert not _merge.is_finite(_state(float("inf")))
    assert not _merge.is_finite(_state(1.0), loss=float("nan"))
    optim = {"state": {0: {"momentum_buffer": torch.tensor([1.0, math.inf])}},
             "param_groups": [{"lr": 0.1}]}
    assert not _merge.is_finite(optim)


def test_finite_mean_renormalises_over_the_finite_replicas():
    states = [_state(1.0), _state(float("nan")), _state(4.0)]
    merged, all_diverged = _merge.finite_mean(
        states, [10, 30, 30], [True, False, True], previous=_state(0.0))
    # Plain arithmetic: (10 * 1 + 30 * 4) / 40.
    torch.testing.assert_close(merged["w"], torch.full((2, 2), 3.25))
    assert not all_diverged


def test_finite_mean_keeps_the_previous_model_when_all_diverged():
    previous = _state(2.0)
    merged, all_diverged = _merge.finite_mean(
        [_state(float("nan")), _state(float("inf"))], [5, 5],
        [False, False], previous)
    assert all_diverged
    torch.testing.assert_close(merged["w"], previous["w"])
