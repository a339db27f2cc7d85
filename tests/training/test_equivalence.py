"""The estimators against plain PyTorch trained the same way.

Same initial weights (the same module instance is given to both), same
epochs, batch size and row order (``shuffle="none"``): the results must
agree to float32 rounding.
"""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification, make_regression

from dislib_nn import (SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from tests.conftest import use_backend
from tests.training import _models, _reference as ref

ATOL = 2e-5


@pytest.fixture(scope="module", autouse=True)
def _local():
    use_backend("local")


def _regression(n=90, features=4):
    X, y = make_regression(n_samples=n, n_features=features, noise=1.0,
                           random_state=0)
    return X.astype(np.float32), (y / 100).astype(np.float32)


def _init(cls, seed=0, **kwargs):
    torch.manual_seed(seed)
    return cls(**kwargs)


def _assert_same_model(model, reference):
    ref.assert_same_model(model, reference, atol=ATOL, rtol=1e-4)


def test_one_worker_is_plain_pytorch():
    X, y = _regression()
    init = _init(_models.MLP, n_features_in=4, n_outputs=1)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=1, shuffle="none", n_epochs=3,
        batch_size=16, lr=0.05, optimizer__momentum=0.9)
    est.fit(X, y)
    expected = ref.single_process(
        init, torch.from_numpy(X), torch.from_numpy(y)[:, None],
        torch.nn.MSELoss(), epochs=3, batch_size=16, lr=0.05, momentum=0.9)
    _assert_same_model(est.module_, expected)
    # The estimator was given 1-D targets: predictions are 1-D too.
    assert est.predict(X).shape == (90,)


@pytest.mark.parametrize("optimizer_state", ["keep", "reset", "average"])
def test_two_workers_average_like_hand_written_loop(optimizer_state):
    X, y = _regression(n=91)
    init = _init(_models.MLP, n_features_in=4, n_outputs=1)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=3,
        batch_size=8, lr=0.05, optimizer_state=optimizer_state,
        optimizer__momentum=0.9)
    est.fit(X, y)
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], 2)
    expected = ref.epoch_averaging(
        init, parts, torch.nn.MSELoss(), epochs=3, batch_size=8, lr=0.05,
        optimizer_state=optimizer_state, momentum=0.9)
    _assert_same_model(est.module_, expected)


@pytest.mark.parametrize("sync_every", [1, 2])
def test_merge_delay_matches_the_hand_written_delayed_correction(sync_every):
    # merge_delay=1: replicas go on from their own weights and take each
    # merge's correction one merge later (docs/strategies.md).
    X, y = _regression(n=91)
    init = _init(_models.MLP, n_features_in=4, n_outputs=1)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=5,
        batch_size=8, lr=0.05, optimizer__momentum=0.9,
        sync_every=sync_every, merge_delay=1)
    est.fit(X, y)
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], 2)
    expected = ref.epoch_averaging(
        init, parts, torch.nn.MSELoss(), epochs=5, batch_size=8, lr=0.05,
        momentum=0.9, sync_every=sync_every, merge_delay=1)
    _assert_same_model(est.module_, expected)
    undelayed = ref.epoch_averaging(
        init, parts, torch.nn.MSELoss(), epochs=5, batch_size=8, lr=0.05,
        momentum=0.9, sync_every=sync_every)
    # The delay changes the model (the test compares something).
    assert not torch.allclose(expected.body[0].weight,
                              undelayed.body[0].weight, atol=1e-4)


def test_batchnorm_statistics_and_uneven_parts_merge_by_sample_count():
    X, y = make_classification(n_samples=103, n_features=4, n_informative=3,
                               n_redundant=0, n_classes=3, random_state=1)
    X = X.astype(np.float32)
    init = _init(_models.Classifier, n_features_in=4, n_classes=3)
    est = SyncEpochAveragingClassifier(
        module=init, n_workers=3, shuffle="none", n_epochs=2,
        batch_size=10, lr=0.1, optimizer=torch.optim.Adam)
    est.fit(X, y)
    parts = ref.split_like_blocks(torch.from_numpy(X), torch.from_numpy(y),
                                  3)
    expected = ref.epoch_averaging(
        init, parts, torch.nn.CrossEntropyLoss(), epochs=2, batch_size=10,
        lr=0.1, optimizer=torch.optim.Adam)
    _assert_same_model(est.module_, expected)
    assert est.module_.norm.num_batches_tracked.item() == 2 * 4


def test_sync_every_and_outer_momentum_match_the_reference():
    X, y = _regression(n=64)
    init = _init(_models.MLP, n_features_in=4, n_outputs=1)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=5, sync_every=2,
        batch_size=16, lr=0.05, outer_lr=0.7, outer_momentum=0.5)
    est.fit(X, y)
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], 2)
    expected = ref.epoch_averaging(
        init, parts, torch.nn.MSELoss(), epochs=5, batch_size=16, lr=0.05,
        sync_every=2, outer_lr=0.7, outer_momentum=0.5)
    _assert_same_model(est.module_, expected)
    assert [h["merged"] for h in est.history_] == [False, True, False,
                                                   True, True]
    assert [h["valid_loss"] for h in est.history_] == [None] * 5


def _halve(epoch):
    return 0.5 ** epoch


@pytest.mark.parametrize("schedule, kwargs, lrs", [
    (_halve, {}, [0.1, 0.05, 0.025]),
    (torch.optim.lr_scheduler.StepLR, {"lr_schedule__step_size": 2,
                                       "lr_schedule__gamma": 0.1},
     [0.1, 0.1, 0.01]),
])
def test_lr_schedule_reaches_every_worker(schedule, kwargs, lrs):
    X, y = _regression(n=60)
    init = _init(_models.MLP, n_features_in=4, n_outputs=1)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=3, batch_size=16,
        lr=0.1, lr_schedule=schedule, **kwargs)
    est.fit(X, y)
    assert [h["lr"] for h in est.history_] == pytest.approx(lrs)
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], 2)
    expected = ref.epoch_averaging(
        init, parts, torch.nn.MSELoss(), epochs=3, batch_size=16, lr=0.1,
        lrs=lrs)
    _assert_same_model(est.module_, expected)


@pytest.mark.parametrize("shuffle", ["none", "global", "local"])
def test_partial_fit_continues_like_more_epochs(shuffle):
    X, y = _regression(n=60)
    init = _init(_models.MLP, n_features_in=4, n_outputs=1)
    kwargs = dict(module=init, n_workers=2, shuffle=shuffle, batch_size=16,
                  lr=0.05, optimizer__momentum=0.9, random_state=3)
    full = SyncEpochAveragingRegressor(n_epochs=3, **kwargs).fit(X, y)
    step = SyncEpochAveragingRegressor(**kwargs)
    for _ in range(3):
        step.partial_fit(X, y)
    assert step.n_epochs_ == 3 and len(step.history_) == 3
    _assert_same_model(step.module_, full.module_)
    warm = SyncEpochAveragingRegressor(n_epochs=1, warm_start=True,
                                       **kwargs)
    for _ in range(3):
        warm.fit(X, y)
    _assert_same_model(warm.module_, full.module_)
