"""Scores from per-block statistics equal scikit-learn's on the whole."""

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, r2_score

from dislib_nn.training import _metrics


def _blocks(n, sizes):
    bounds = np.cumsum([0] + list(sizes))
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


@pytest.mark.parametrize("outputs", [None, 1, 3])
@pytest.mark.parametrize("sizes", [(50,), (1, 49), (10, 20, 5, 15)])
def test_r2_from_blocks_matches_sklearn(outputs, sizes):
    rng = np.random.RandomState(0)
    shape = (50,) if outputs is None else (50, outputs)
    y = rng.normal(3, 2, size=shape)
    pred = y + rng.normal(0, 1, size=shape)
    stats = [_metrics.regression_stats(torch.from_numpy(pred[s]),
                                       torch.from_numpy(y[s]))
             for s in _blocks(50, sizes)]
    for order in (stats, stats[::-1]):
        total = _metrics.combine_all(order)
        assert _metrics.r2(total) == pytest.approx(r2_score(y, pred),
                                                   rel=1e-10)


def test_r2_of_a_constant_target_follows_sklearn():
    y = np.ones(6)
    for pred in (np.ones(6), np.arange(6.0)):
        stats = _metrics.regression_stats(torch.from_numpy(pred),
                                          torch.from_numpy(y))
        assert _metrics.r2(stats) == r2_score(y, pred)


def test_accuracy_and_mean_loss_from_blocks():
    rng = np.random.RandomState(1)
    logits = rng.normal(size=(40, 4))
    y = rng.randint(0, 4, size=40)
    stats = [_metrics.class_stats(torch.from_numpy(logits[s]),
                                  torch.from_numpy(y[s]), loss_sum=2.0)
             for s in _blocks(40, (15, 25))]
    total = _metrics.combine_all(stats)
    assert _metrics.accuracy(total) == accuracy_score(y, logits.argmax(1))
    assert _metrics.mean_loss(total) == pytest.approx(4.0 / 40)
