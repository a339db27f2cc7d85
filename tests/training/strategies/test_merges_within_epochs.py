"""Merges within an epoch (``sync_every`` a fraction, or ``"step"``).

Compared with plain PyTorch trained the same way, on both local
backends: with a merge after every optimizer step and plain SGD, P
replicas of batch b are single-process SGD with batch P * b over the
same rows; with a fraction, replicas averaged by hand after each share
of their rows. The asynchronous strategy at ``max_lag=0`` gives the
same models.
"""

import copy
import re

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
    expected = _large_batch_sgd(init, X, y, n_workers, b, steps=5,
                                epochs=epochs, lr=0.1)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-5)


def _large_batch_sgd(init, X, y, n_workers, b, steps, epochs, lr):
    """Single-process SGD with batch P * b: batch j holds every replica's
    j-th (the replicas' rows split as the blocks are)."""
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], n_workers)
    x = torch.cat([torch.cat([px[j * b:(j + 1) * b] for px, _ in parts])
                   for j in range(steps)])
    t = torch.cat([torch.cat([py[j * b:(j + 1) * b] for _, py in parts])
                   for j in range(steps)])
    return ref.single_process(init, x, t, torch.nn.MSELoss(), epochs=epochs,
                              batch_size=n_workers * b, lr=lr)


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


def test_shares_without_rows_are_left_out(backend):
    # 2 x 20 rows in batches of 8: 3 batches a worker, 4 shares; the
    # first share of every worker is empty, the others are the thirds.
    X, y = _data(40)
    init = _init()
    params = dict(module=init, n_workers=2, shuffle="none", n_epochs=2,
                  batch_size=8, lr=0.05, optimizer__momentum=0.9)
    quarters = SyncEpochAveragingRegressor(sync_every=0.25,
                                           **params).fit(X, y)
    thirds = SyncEpochAveragingRegressor(sync_every=1 / 3,
                                         **params).fit(X, y)
    assert [h["n_merges"] for h in quarters.history_] == [3, 3]
    ref.assert_same_model(quarters.module_, thirds.module_, atol=1e-7,
                          rtol=0)


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


@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
@pytest.mark.parametrize("value", [0.3, 0.0, -0.5, "steps", 1.5])
def test_sync_every_must_be_epochs_a_fraction_or_step(cls, value):
    X, y = _data(20)
    est = cls(module=_models.MLP, n_workers=2, sync_every=value)
    with pytest.raises(InvalidParameterError,
                       match=r"The 'sync_every' parameter of "
                             + cls.__name__ + r" must be an int "
                             r"in the range \[1, inf\), a fraction 1/k of "
                             r"an epoch .*, a str among \{'auto', 'step'\} "
                             r"or a callable \(epoch -> any of those but "
                             r"'auto'\)\. Got "):
        est.fit(X, y)


# The asynchronous strategy: a round is a share of the epoch, and
# max_lag counts rounds (merges), so max_lag=0 is the synchronous model.

@pytest.mark.parametrize("sync_every", [1 / 3, "step"])
def test_asynchronous_rounds_within_epochs_at_max_lag_0_are_synchronous(
        backend, sync_every):
    X, y = _data(89)
    init = _init()
    params = dict(module=init, n_workers=2, shuffle="none", n_epochs=2,
                  batch_size=8, lr=0.05, optimizer__momentum=0.9,
                  sync_every=sync_every)
    sync = SyncEpochAveragingRegressor(**params).fit(X, y)
    lag0 = AsyncEpochAveragingRegressor(max_lag=0, **params).fit(X, y)
    shares = 3 if sync_every != "step" else 6
    assert [len(h["merges"]) for h in lag0.history_] == [2 * shares] * 2
    assert [h["worker_samples"] for h in lag0.history_] == [[45, 44]] * 2
    assert all(m["staleness"] == 0.0 for h in lag0.history_
               for m in h["merges"])
    # A round's weights are its workers' shares of the round's rows.
    for h in lag0.history_:
        weights = [m["weight"] for m in sorted(h["merges"],
                                               key=lambda m: m["index"])]
        for r in range(shares):
            assert sum(weights[2 * r:2 * r + 2]) == pytest.approx(1.0)
    ref.assert_same_model(lag0.module_, sync.module_, atol=ATOL, rtol=1e-5)
    # ... which is the replicas averaged by hand after each share.
    if sync_every != "step":
        parts = ref.split_like_blocks(torch.from_numpy(X),
                                      torch.from_numpy(y)[:, None], 2)
        expected = _shares_by_hand(init, parts, epochs=2, shares=3,
                                   batch_size=8, lr=0.05, momentum=0.9,
                                   optimizer_state="keep")
        ref.assert_same_model(lag0.module_, expected, atol=ATOL, rtol=1e-5)


def test_asynchronous_step_merges_at_max_lag_0_are_large_batch_sgd(backend):
    n_workers, b, epochs = 2, 4, 2
    X, y = _data(n_workers * b * 5)
    init = _init()
    est = AsyncEpochAveragingRegressor(
        module=init, n_workers=n_workers, shuffle="none", n_epochs=epochs,
        batch_size=b, lr=0.1, sync_every="step", max_lag=0)
    est.fit(X, y)
    expected = _large_batch_sgd(init, X, y, n_workers, b, steps=5,
                                epochs=epochs, lr=0.1)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("max_lag", [1, None])
def test_asynchronous_fractions_merge_every_worker_every_share(backend,
                                                               max_lag):
    X, y = _data(160)
    est = AsyncEpochAveragingRegressor(
        module=_init(), n_workers=4, n_epochs=2, batch_size=4, lr=0.05,
        sync_every=0.25, max_lag=max_lag, random_state=0)
    est.fit(X, y)
    for h in est.history_:
        merges = h["merges"]
        assert len(merges) == 16
        assert sorted(m["worker"] for m in merges) == sorted(
            list(range(4)) * 4)
        assert sum(h["worker_samples"]) == 160
    indices = [m["index"] for h in est.history_ for m in h["merges"]]
    assert sorted(indices) == list(range(32))


# A schedule of merges (post-local SGD: frequent merges first, rarer
# ones later): sync_every as a callable of the epoch.

def _post_local(epoch):
    return "step" if epoch == 0 else 1


@pytest.mark.parametrize("cls, extra", [
    (SyncEpochAveragingRegressor, {}),
    (AsyncEpochAveragingRegressor, {"max_lag": 0})])
def test_a_callable_sync_every_is_each_epoch_s_value(backend, cls, extra):
    X, y = _data(89)
    init = _init()
    common = dict(module=init, n_workers=2, shuffle="none", batch_size=8,
                  lr=0.05, optimizer__momentum=0.9, **extra)
    scheduled = cls(n_epochs=2, sync_every=_post_local, **common).fit(X, y)
    # The same epochs as two fits, each with its epoch's value.
    by_parts = cls(n_epochs=1, sync_every="step", **common).fit(X, y)
    by_parts.set_params(warm_start=True, sync_every=1).fit(X, y)
    ref.assert_same_model(scheduled.module_, by_parts.module_, atol=ATOL,
                          rtol=1e-5)
    assert [h["schedule"]["sync_every"] for h in scheduled.history_] == \
        ["step", 1]
    merges = [h.get("n_merges", len(h.get("merges", [])) // 2)
              for h in scheduled.history_]
    assert merges == [6, 1]               # 45 and 44 rows: 6 batches


@pytest.mark.parametrize("returned", [0.3, 0, "steps", None])
def test_a_callable_sync_every_returning_a_bad_value_is_refused(returned):
    X, y = _data(40)
    est = SyncEpochAveragingRegressor(
        module=_models.MLP, n_workers=2, n_epochs=3,
        sync_every=lambda epoch: 1 if epoch < 2 else returned)
    with pytest.raises(InvalidParameterError,
                       match=r"sync_every\(2\) returned " + re.escape(
                           repr(returned))):
        est.fit(X, y)
    assert not hasattr(est, "module_")
