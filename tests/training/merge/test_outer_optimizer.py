"""The outer optimizer on the averaged update, against plain PyTorch.

The global model is computed by hand in the tests: replicas trained with
the reference loop, averaged by hand, and a ``torch.optim`` optimizer
stepping on a copy of the global parameters with the pseudo-gradient
``previous - average`` as their gradient.
"""

import copy
import os

import numpy as np
import pytest
import torch
from sklearn.datasets import make_regression

import dislib_nn as dnn
from dislib_nn import (AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn import runtime
from dislib_nn.runtime import barrier
from dislib_nn.training.merge import _outer
from tests.conftest import use_backend
from tests.training import _models, _reference as ref
from tests.training._faults import Recorder

ATOL = 2e-5
DILOCO = {"outer_optimizer": torch.optim.SGD, "outer_optimizer__lr": 0.7,
          "outer_optimizer__momentum": 0.9,
          "outer_optimizer__nesterov": True}


@pytest.fixture(scope="module", autouse=True)
def _local():
    use_backend("local")


def _regression(n=64, features=4):
    X, y = make_regression(n_samples=n, n_features=features, noise=1.0,
                           random_state=0)
    return X.astype(np.float32), (y / 100).astype(np.float32)


def _init(seed=0):
    torch.manual_seed(seed)
    return _models.MLP(n_features_in=4, n_outputs=1)


def _same(a, b, atol=ATOL):
    ref.assert_same_model(a, b, atol=atol, rtol=1e-4)


def _outer_by_hand(init, parts, epochs, batch_size, lr, outer_lr,
                   outer_momentum, nesterov, inner_momentum=0.0):
    """Replicas trained and averaged by hand; the global parameters
    stepped by ``torch.optim.SGD`` on the pseudo-gradient."""
    global_model = copy.deepcopy(init)
    replicas = [copy.deepcopy(init) for _ in parts]
    inner = [torch.optim.SGD(r.parameters(), lr=lr, momentum=inner_momentum)
             for r in replicas]
    outer_params = [p.detach().clone().requires_grad_(True)
                    for p in global_model.parameters()]
    outer = torch.optim.SGD(outer_params, lr=outer_lr,
                            momentum=outer_momentum, nesterov=nesterov)
    names = [n for n, _ in global_model.named_parameters()]
    weights = [len(x) for x, _ in parts]
    criterion = torch.nn.MSELoss()
    for _ in range(epochs):
        for replica, opt, (x, y) in zip(replicas, inner, parts):
            replica.load_state_dict(global_model.state_dict())
            ref.train(replica, opt, criterion, x, y, batch_size, lr)
        avg = ref.average([r.state_dict() for r in replicas], weights)
        ref.outer_step(outer, outer_params, names, avg)
        global_model.load_state_dict(avg)
    return global_model


def _parts(X, y, n):
    return ref.split_like_blocks(torch.from_numpy(X),
                                 torch.from_numpy(y)[:, None], n)


def test_one_worker_with_an_identity_outer_sgd_is_plain_training():
    X, y = _regression()
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=1, shuffle="none", n_epochs=3, batch_size=16,
        lr=0.05, optimizer__momentum=0.9, outer_optimizer=torch.optim.SGD,
        outer_optimizer__lr=1.0, outer_optimizer__momentum=0.0).fit(X, y)
    expected = ref.single_process(
        init, torch.from_numpy(X), torch.from_numpy(y)[:, None],
        torch.nn.MSELoss(), epochs=3, batch_size=16, lr=0.05, momentum=0.9)
    _same(est.module_, expected)


@pytest.mark.parametrize("n_workers, nesterov, inner_momentum", [
    (2, True, 0.0), (3, True, 0.9), (2, False, 0.0)])
def test_outer_sgd_matches_a_hand_computation(n_workers, nesterov,
                                              inner_momentum):
    X, y = _regression(n=61)
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=n_workers, shuffle="none", n_epochs=3,
        batch_size=8, lr=0.05, optimizer__momentum=inner_momentum,
        outer_optimizer=torch.optim.SGD, outer_optimizer__lr=0.7,
        outer_optimizer__momentum=0.9,
        outer_optimizer__nesterov=nesterov).fit(X, y)
    expected = _outer_by_hand(init, _parts(X, y, n_workers), 3, 8, 0.05,
                              0.7, 0.9, nesterov, inner_momentum)
    _same(est.module_, expected)
    # The outer step changed the model: plain averaging differs.
    plain = ref.epoch_averaging(init, _parts(X, y, n_workers),
                                torch.nn.MSELoss(), epochs=3, batch_size=8,
                                lr=0.05, momentum=inner_momentum)
    assert not torch.allclose(est.module_.body[0].weight,
                              plain.body[0].weight, atol=1e-3)


def test_outer_sgd_with_the_fedavgm_settings_is_outer_momentum():
    X, y = _regression()
    init = _init()
    common = dict(module=init, n_workers=2, shuffle="none", n_epochs=3,
                  batch_size=16, lr=0.05)
    fedavgm = SyncEpochAveragingRegressor(
        outer_lr=0.7, outer_momentum=0.5, **common).fit(X, y)
    optimizer = SyncEpochAveragingRegressor(
        outer_optimizer=torch.optim.SGD, outer_optimizer__lr=0.7,
        outer_optimizer__momentum=0.5, **common).fit(X, y)
    _same(optimizer.module_, fedavgm.module_, atol=1e-6)


def _estimator(cls=SyncEpochAveragingRegressor, **kwargs):
    params = dict(module=_models.MLP, n_workers=2, batch_size=8, lr=0.05,
                  random_state=0, optimizer__momentum=0.9, **DILOCO)
    if cls is AsyncEpochAveragingRegressor:
        params["max_lag"] = 0       # a model that timings do not change
    params.update(kwargs)
    return cls(**params)


CLASSES = [SyncEpochAveragingRegressor, AsyncEpochAveragingRegressor]


@pytest.mark.parametrize("cls", CLASSES)
def test_warm_start_continues_the_outer_optimizer(cls):
    X, y = _regression()
    whole = _estimator(cls, n_epochs=4).fit(X, y)
    halves = _estimator(cls, n_epochs=2).fit(X, y)
    halves.set_params(warm_start=True, n_epochs=2).fit(X, y)
    _same(halves.module_, whole.module_, atol=1e-6)
    # partial_fit continues it too.
    steps = _estimator(cls, n_epochs=2).fit(X, y)
    steps.partial_fit(X, y)
    steps.partial_fit(X, y)
    _same(steps.module_, whole.module_, atol=1e-6)


@pytest.mark.parametrize("cls", CLASSES)
def test_resume_from_a_checkpoint_continues_the_outer_optimizer(
        cls, tmp_path):
    X, y = _regression()
    whole = _estimator(cls, n_epochs=4).fit(X, y)
    _estimator(cls, n_epochs=2, checkpoint_dir=tmp_path).fit(X, y)
    resumed = _estimator(cls, n_epochs=4, checkpoint_dir=tmp_path).fit(
        X, y, resume=True)
    assert [r["epoch"] for r in resumed.history_] == [1, 2, 3, 4]
    _same(resumed.module_, whole.module_, atol=1e-6)


@pytest.mark.parametrize("cls", CLASSES)
def test_save_and_load_keep_the_outer_optimizer(cls, tmp_path):
    X, y = _regression()
    original = _estimator(cls, n_epochs=2).fit(X, y)
    original.save(tmp_path / "model.pt")
    loaded = cls().load(tmp_path / "model.pt")
    original.partial_fit(X, y)
    loaded.partial_fit(X, y)
    _same(loaded.module_, original.module_, atol=1e-6)


@pytest.mark.parametrize("n_workers", [2, 3])
@pytest.mark.parametrize("outer", [
    DILOCO,
    {"outer_optimizer": torch.optim.SGD, "outer_optimizer__lr": 0.5,
     "outer_optimizer__momentum": 0.8},
    {"outer_optimizer": torch.optim.Adam, "outer_optimizer__lr": 0.01}])
def test_async_with_max_lag_0_is_the_synchronous_outer_step(n_workers,
                                                            outer):
    X, y = _regression(n=61)
    init = _init()
    common = dict(module=init, n_workers=n_workers, shuffle="none",
                  n_epochs=3, batch_size=8, lr=0.05,
                  optimizer__momentum=0.9, **outer)
    sync = SyncEpochAveragingRegressor(**common).fit(X, y)
    asynchronous = AsyncEpochAveragingRegressor(max_lag=0, **common).fit(
        X, y)
    _same(asynchronous.module_, sync.module_, atol=1e-5)


def test_delayed_nesterov_is_the_papers_update():
    # Liu et al. (arXiv 2401.09135), delayed Nesterov with delay N: each
    # update g_t moves the parameters by -lr * g_t; every N updates the
    # momentum takes their mean and the parameters a Nesterov step of it.
    lr, beta, n = 0.7, 0.9, 3
    updates = [torch.tensor([0.3, -1.0]), torch.tensor([0.5, 0.2]),
               torch.tensor([-0.1, 0.4])] * 2
    shares = 1.0 / n        # the folds weigh each update by its share

    def build(params):
        return torch.optim.SGD(params, lr=lr, momentum=beta, nesterov=True)

    theta, pending, state = torch.tensor([1.0, 2.0]), torch.zeros(2), None
    expected, m, total = theta.clone(), torch.zeros(2), torch.zeros(2)
    for t, g in enumerate(updates, start=1):
        # The library: plain steps, then the optimizer's at the round's end.
        theta = theta + lr * (-shares * g)
        pending = pending + (-shares * g)
        # The paper's form, on the mean of the round's updates.
        total = total + g
        if t % n:
            expected = expected - lr * shares * g
        else:
            m = beta * m + total / n
            expected = expected - lr * shares * g - lr * beta * m
            total = torch.zeros(2)
            params, state = _outer.delayed_optimizer_step(
                {"w": theta}, {"w": pending}, lr, state, build)
            theta, pending = params["w"], torch.zeros(2)
        torch.testing.assert_close(theta, expected)


def _training_forwards(log):
    if not os.path.exists(log):
        return 0
    with open(log) as f:
        return f.read().count("forward")


@pytest.mark.parametrize("params, match", [
    (dict(DILOCO, outer_optimizer__nesterovv=True),
     r"Did you mean 'outer_optimizer__nesterov'\?"),
    ({"outer_optimizer__lr": 0.7}, "outer_optimizer is None"),
    (dict(DILOCO, outer_momentum=0.9), "not both"),
    ({"outer_optimzer__lr": 0.7},
     r"Did you mean 'outer_optimizer__lr'\?"),
])
def test_bad_outer_optimizer_arguments_are_named_before_any_task(
        params, match, tmp_path):
    log = tmp_path / "forwards.log"
    rng = np.random.RandomState(0)
    X = rng.randn(20, 4).astype("float32")
    y = (X[:, 0] > 0).astype(np.int64)
    est = SyncEpochAveragingClassifier(
        module=Recorder, module__log=str(log), n_epochs=1, n_workers=2,
        batch_size=4, random_state=0, **params)
    before = dict(vars(est))
    with pytest.raises(InvalidParameterError, match=match):
        est.fit(dnn.from_array(X, block_size=5), y)
    barrier()
    assert _training_forwards(log) == 0
    assert vars(est).keys() == before.keys()


@pytest.mark.parametrize("outer", [
    dict(outer_lr=0.7, outer_momentum=0.5),
    DILOCO,
    dict(DILOCO, optimizer_state="average")], ids=["momentum", "optimizer",
                                                  "averaged-optimizers"])
def test_the_merge_trees_root_takes_the_outer_step(outer):
    """One task a round fewer: the root of the tree takes the outer step
    (the tests above compare the model it gives with one computed by
    hand)."""
    X, y = _regression()
    use_backend("sequential")
    try:
        with runtime.count_tasks() as calls:
            SyncEpochAveragingRegressor(
                module=_init(), n_workers=3, shuffle="none", n_epochs=3,
                batch_size=16, lr=0.05, **outer).fit(X, y)
    finally:
        use_backend("local")
    # 3 replicas: one pair below the root, then the root, each round.
    assert calls["_merge_root_stepped"] == 3
    assert calls["_merge_pair"] + calls["_merge_pair_with_optims"] == 3
    assert calls["_momentum_step"] == calls["_optimizer_step"] == 0
