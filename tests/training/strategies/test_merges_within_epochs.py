"""Merges within an epoch (``sync_every`` a fraction, or ``"step"``).

Compared with plain PyTorch trained the same way, on both local
backends: with a merge after every optimizer step and plain SGD, P
replicas of batch b are single-process SGD with batch P * b over the
same rows; with a fraction, replicas averaged by hand after each share
of their rows.
"""

import copy

import numpy as np
import pytest
import torch

from dislib_nn import (AsyncEpochAveragingRegressor,
                       SyncEpochAveragingRegressor)
from dislib_nn.exceptions import InvalidParameterError
from tests.training import _models, _reference as ref

ATOL = 1e-5         # on the weights


_data = ref.regression_rows
_init = ref.small_mlp


@pytest.mark.parametrize("n_workers", [2, 4])
def test_a_merge_every_step_is_large_batch_sgd(backend, n_workers):
    b, epochs = 4, 2
    X, y = _data(n_workers * b * 5)          # 5 steps per replica and epoch
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=n_workers, shuffle="none", n_epochs=epochs,
        batch_size=b, lr=0.1, sync_every="step")
    est.fit(X, y)
    assert [h["n_merges"] for h in est.history_] == [5] * epochs
    # Single process, batch P * b: batch j holds every replica's j-th.
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], n_workers)
    x = torch.cat([torch.cat([px[j * b:(j + 1) * b] for px, _ in parts])
                   for j in range(5)])
    t = torch.cat([torch.cat([py[j * b:(j + 1) * b] for _, py in parts])
                   for j in range(5)])
    expected = ref.single_process(init, x, t, torch.nn.MSELoss(),
                                  epochs=epochs, batch_size=n_workers * b,
                                  lr=0.1)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("optimizer_state", ["keep", "average"])
def test_a_fraction_merges_after_each_share_of_the_rows(backend,
                                                        optimizer_state):
    # 45 and 44 rows in batches of 8: 6 batches each, 2 per third.
    X, y = _data(89)
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=2, batch_size=8,
        lr=0.05, optimizer__momentum=0.9, optimizer_state=optimizer_state,
        sync_every=1 / 3)
    est.fit(X, y)
    assert [h["n_merges"] for h in est.history_] == [3, 3]
    assert [h["worker_samples"] for h in est.history_] == [[45, 44]] * 2
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], 2)
    expected = _shares_by_hand(init, parts, epochs=2, shares=3,
                               batch_size=8, lr=0.05, momentum=0.9,
                               optimizer_state=optimizer_state)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-5)


def _shares_by_hand(module, parts, epochs, shares, batch_size, lr,
                    momentum, optimizer_state):
    """Replicas trained on consecutive thirds of their batches, averaged
    by sample count after each (their optimizers kept or averaged)."""
    replicas = [copy.deepcopy(module) for _ in parts]
    opts = [torch.optim.SGD(r.parameters(), lr=lr, momentum=momentum)
            for r in replicas]
    criterion = torch.nn.MSELoss()
    for _ in range(epochs):
        for k in range(shares):
            counts = []
            for r, opt, (x, y) in zip(replicas, opts, parts):
                n_batches = -(-len(x) // batch_size)
                first = k * n_batches // shares
                stop = (k + 1) * n_batches // shares
                rows = slice(first * batch_size, stop * batch_size)
                ref.train(r, opt, criterion, x[rows], y[rows], batch_size,
                          lr)
                counts.append(len(x[rows]))
            avg = ref.average([r.state_dict() for r in replicas], counts)
            if optimizer_state == "average":
                merged = ref._average_optimizers(opts, counts)
            for r, opt in zip(replicas, opts):
                r.load_state_dict(avg)
                if optimizer_state == "average":
                    opt.load_state_dict(copy.deepcopy(merged))
    return replicas[0]


def test_a_worker_with_fewer_batches_sits_out_the_last_steps(backend):
    # 13 and 12 rows, batches of 4: 4 and 3 steps; the fourth merge takes
    # the first worker's step alone.
    X, y = _data(25)
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=1, batch_size=4,
        lr=0.1, sync_every="step")
    est.fit(X, y)
    assert est.history_[0]["n_merges"] == 4
    assert est.history_[0]["worker_samples"] == [13, 12]
    assert all(np.isfinite(v.numpy()).all()
               for v in est.module_.state_dict().values())


@pytest.mark.parametrize("value", [0.3, 0.0, -0.5, "steps", 1.5])
def test_sync_every_must_be_epochs_a_fraction_or_step(value):
    X, y = _data(20)
    est = SyncEpochAveragingRegressor(module=_models.MLP, n_workers=2,
                                      sync_every=value)
    with pytest.raises(InvalidParameterError,
                       match=r"The 'sync_every' parameter of "
                             r"SyncEpochAveragingRegressor must be an int "
                             r"in the range \[1, inf\), a fraction 1/k of "
                             r"an epoch .* or a str among \{'auto', 'step'\}"):
        est.fit(X, y)


@pytest.mark.parametrize("value", [0.5, "step"])
def test_the_asynchronous_strategy_merges_once_per_epoch_at_most(value):
    X, y = _data(20)
    est = AsyncEpochAveragingRegressor(module=_models.MLP, n_workers=2,
                                       sync_every=value)
    with pytest.raises(InvalidParameterError,
                       match="The 'sync_every' parameter of "
                             "AsyncEpochAveragingRegressor must be an int"):
        est.fit(X, y)
