"""How many replicas train when n_workers asks for more than X's blocks.

An array is split into as many blocks as needed; a DsTensor comes with
its own. With ``shuffle="global"`` the rows are re-dealt every epoch, so
fit re-blocks X and trains ``n_workers`` replicas; with ``"local"`` and
``"none"`` a block is a worker's whole share, so one replica trains per
block and a warning names both numbers.
"""

import warnings

import numpy as np
import pytest
import torch

import dislib_nn as dnn
from dislib_nn import (AsyncEpochAveragingRegressor,
                       SyncEpochAveragingRegressor)
from tests.conftest import use_backend
from tests.training import _models, _reference as ref

rng = np.random.RandomState(0)
X = rng.randn(40, 4).astype(np.float32)
Y = (X @ np.array([1.0, -2.0, 0.5, 0.0], np.float32)
     + 0.1 * rng.randn(40).astype(np.float32))


@pytest.fixture(scope="module", autouse=True)
def _sequential():
    use_backend("sequential")
    yield
    use_backend("local")


def _init():
    torch.manual_seed(0)
    return _models.MLP(n_features_in=4, n_outputs=1)


def _reg(cls=SyncEpochAveragingRegressor, **params):
    base = dict(module=_init(), n_epochs=2, batch_size=4, lr=0.05,
                random_state=0)
    return cls(**dict(base, **params))


def _four_blocks():
    return dnn.from_array(X, n_blocks=4), dnn.from_array(Y, n_blocks=4)


@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
@pytest.mark.parametrize("shuffle", ["none", "local"])
def test_a_fixed_partition_trains_one_replica_per_block_and_warns(
        shuffle, cls):
    x, y = _four_blocks()
    est = _reg(cls, n_workers=8, shuffle=shuffle)
    with pytest.warns(UserWarning, match=(
            r"n_workers=8 but X has 4 blocks: training 4 replicas; "
            r"re-block X with X\.rechunk\(n_blocks=8\) \(and y alike\) to "
            rf"use 8\. With shuffle='{shuffle}' each worker keeps whole "
            r"blocks")):
        est.fit(x, y)
    assert est.n_workers_ == 4
    assert [len(h["worker_samples"]) for h in est.history_] == [4, 4]


def test_the_fixed_partition_is_the_four_blocks():
    x, y = _four_blocks()
    with pytest.warns(UserWarning, match="training 4 replicas"):
        # sync_every=1: the reference merges once per epoch (4 replicas of
        # 2 steps would merge after every step by default).
        est = _reg(n_workers=8, shuffle="none", sync_every=1).fit(x, y)
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(Y)[:, None], 4)
    expected = ref.epoch_averaging(_init(), parts, torch.nn.MSELoss(),
                                   epochs=2, batch_size=4, lr=0.05)
    for key, value in expected.state_dict().items():
        torch.testing.assert_close(est.module_.state_dict()[key], value,
                                   atol=2e-5, rtol=1e-4, msg=key)


@pytest.mark.parametrize("cls, balance", [
    (SyncEpochAveragingRegressor, False), (SyncEpochAveragingRegressor, True),
    (AsyncEpochAveragingRegressor, False)])
def test_a_global_shuffle_reblocks_and_trains_n_workers_replicas(
        cls, balance):
    x, y = _four_blocks()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        est = _reg(cls, n_workers=8, balance=balance).fit(x, y)
    assert est.n_workers_ == 8
    assert [len(h["worker_samples"]) for h in est.history_] == [8, 8]
    if balance:     # dealt by measured throughput: timings decide
        return
    # The same model as X re-blocked by hand, as an array would be.
    x8 = x.rechunk(n_blocks=8)
    by_hand = _reg(cls, n_workers=8).fit(x8, y.rechunk(x8.block_sizes))
    for key, value in by_hand.module_.state_dict().items():
        torch.testing.assert_close(est.module_.state_dict()[key], value,
                                   atol=0, rtol=0, msg=key)
    # And as the same rows given as an array.
    from_array = _reg(cls, n_workers=8).fit(X, Y)
    for key, value in from_array.module_.state_dict().items():
        torch.testing.assert_close(est.module_.state_dict()[key], value,
                                   atol=0, rtol=0, msg=key)


def test_n_workers_none_takes_the_blocks_there_are():
    x, y = dnn.from_array(X, n_blocks=1), dnn.from_array(Y, n_blocks=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        est = _reg(n_workers=None, n_epochs=1).fit(x, y)
    assert est.n_workers_ == 1
