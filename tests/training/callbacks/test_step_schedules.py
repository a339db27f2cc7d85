"""Per-step learning-rate schedules (``LRScheduler(step_every="batch")``).

Compared with plain single-process PyTorch with one scheduler stepped
after every optimizer step: one replica is that loop; P replicas merged
after every step are single-process SGD with batch P * b at the same
per-step rates; replicas merged twice an epoch, averaged by hand, follow
the same global clock; ``partial_fit`` continues it.

The callback reaches the estimators through their ``callbacks=``
parameter.
"""

import copy
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from dislib_nn import (AsyncEpochAveragingRegressor,
                       SyncEpochAveragingRegressor)
from dislib_nn.callbacks import LRScheduler
from tests.training import _models, _reference as ref
from tests.training._paths import ROOT

ATOL = 1e-5         # on the weights
SCHED = torch.optim.lr_scheduler


def warm_then_constant(step):
    """A warm-up over 4 steps, then the epoch's rate (module level, so
    it pickles by reference)."""
    return min(1.0, (step + 1) / 4)


def _with(callback, cls=SyncEpochAveragingRegressor):
    """The estimator class, with ``callback`` in ``callbacks``."""
    def build(**params):
        return cls(callbacks=[callback], **params)
    return build


_data = ref.regression_rows
_init = ref.small_mlp


def _tensors(X, y):
    return torch.from_numpy(X), torch.from_numpy(y)[:, None]


def _plain_torch(module, x, y, batch_size, epochs, lr, make_scheduler,
                 **opt_kwargs):
    """One process, rows in order, the scheduler stepped after every
    optimizer step."""
    model = copy.deepcopy(module)
    opt = torch.optim.SGD(model.parameters(), lr=lr, **opt_kwargs)
    scheduler = make_scheduler(opt)
    criterion = torch.nn.MSELoss()
    model.train()
    for _ in range(epochs):
        for start in range(0, len(x), batch_size):
            opt.zero_grad()
            criterion(model(x[start:start + batch_size]),
                      y[start:start + batch_size]).backward()
            opt.step()
            scheduler.step()
    return model


def _rates(lr, make_scheduler, n_steps):
    """The rate of each global step, from a scheduler on its own."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = make_scheduler(opt)
    rates = []
    for _ in range(n_steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
def test_one_worker_follows_one_cycle_like_plain_torch(backend, cls):
    # 50 rows in batches of 8: 7 steps an epoch, 21 in all.
    X, y = _data(50)
    init = _init()
    est = _with(LRScheduler(SCHED.OneCycleLR, step_every="batch",
                            max_lr=0.1), cls=cls)(
        module=init, n_workers=1, shuffle="none", n_epochs=3,
        batch_size=8, lr=0.1)
    est.fit(X, y)
    x, t = _tensors(X, y)
    # total_steps not given: n_epochs * steps per epoch; OneCycleLR
    # cycles SGD's momentum too, carried in the optimizer state.
    expected = _plain_torch(
        init, x, t, 8, 3, 0.1,
        lambda opt: SCHED.OneCycleLR(opt, max_lr=0.1, total_steps=21))
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-5)
    # The history keeps the epoch's rate; the steps' rates are the task's.
    assert [h["lr"] for h in est.history_] == [0.1] * 3


def test_the_scheduler_steps_once_per_accumulated_step():
    # Batches of 4 accumulated by 2 are plain SGD's batches of 8 (equal
    # sizes): 5 optimizer steps an epoch, one scheduler step each.
    X, y = _data(40)
    init = _init()

    def make(opt):
        return SCHED.LinearLR(opt, start_factor=0.1, total_iters=8)
    est = _with(LRScheduler(SCHED.LinearLR, step_every="batch",
                            start_factor=0.1, total_iters=8))(
        module=init, n_workers=1, shuffle="none", n_epochs=2, batch_size=4,
        accumulate_grad_batches=2, lr=0.2)
    est.fit(X, y)
    expected = _plain_torch(init, *_tensors(X, y), 8, 2, 0.2, make)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-5)


def _large_batch(init, X, y, n_workers, b, steps, epochs, lr, make):
    """Single process, batch P * b: batch j holds every replica's j-th."""
    parts = ref.split_like_blocks(*_tensors(X, y), n_workers)
    x = torch.cat([torch.cat([px[j * b:(j + 1) * b] for px, _ in parts])
                   for j in range(steps)])
    t = torch.cat([torch.cat([py[j * b:(j + 1) * b] for _, py in parts])
                   for j in range(steps)])
    return _plain_torch(init, x, t, n_workers * b, epochs, lr, make)


@pytest.mark.parametrize("n_workers", [2, 4])
@pytest.mark.parametrize("policy", ["linear", "function"])
def test_a_merge_every_step_is_large_batch_sgd_at_the_same_rates(
        backend, n_workers, policy):
    b, epochs, steps = 4, 2, 5
    X, y = _data(n_workers * b * steps)
    init = _init()
    if policy == "linear":
        callback = LRScheduler(SCHED.LinearLR, step_every="batch",
                               start_factor=0.1, total_iters=7)

        def make(opt):
            return SCHED.LinearLR(opt, start_factor=0.1, total_iters=7)
    else:
        callback = LRScheduler(warm_then_constant, step_every="batch")

        def make(opt):
            return SCHED.LambdaLR(opt, warm_then_constant)
    est = _with(callback)(
        module=init, n_workers=n_workers, shuffle="none", n_epochs=epochs,
        batch_size=b, lr=0.2, sync_every="step")
    est.fit(X, y)
    assert [h["n_merges"] for h in est.history_] == [steps] * epochs
    expected = _large_batch(init, X, y, n_workers, b, steps, epochs, 0.2,
                            make)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-5)


_MAIN_SCRIPT = """
import json

import numpy as np
import torch
from sklearn.datasets import make_regression

from dislib_nn import SyncEpochAveragingRegressor, runtime
from dislib_nn.callbacks import LRScheduler
from tests.training import _models


def warm_up(step):          # defined in __main__: must travel by value
    return min(1.0, (step + 1) / 6)


if __name__ == "__main__":
    runtime.set_backend("local", n_workers=2, threads_per_worker=1)
    X, y = make_regression(n_samples=40, n_features=4, noise=1.0,
                           random_state=0)
    torch.manual_seed(0)
    init = _models.MLP(n_features_in=4, n_outputs=1, hidden=8)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=2, batch_size=4,
        lr=0.2, sync_every="step",
        callbacks=[LRScheduler(warm_up, step_every="batch")])
    est.fit(X.astype(np.float32), (y / 100).astype(np.float32))
    print(json.dumps({k: v.tolist()
                      for k, v in est.module_.state_dict().items()}))
"""


def _warm_up_over_6(step):
    return min(1.0, (step + 1) / 6)


def test_a_factor_defined_in_main_reaches_the_workers(fresh_python, tmp_path):
    # Worker processes of the local backend never import the script:
    # the function travels by value, as a module class does.
    script = tmp_path / "per_step.py"
    script.write_text(textwrap.dedent(_MAIN_SCRIPT))
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("DISLIB_NN_BACKEND", None)
    done = subprocess.run([sys.executable, str(script)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    X, y = _data(40)
    expected = _large_batch(
        _init(), X, y, 2, 4, 5, 2, 0.2,
        lambda opt: SCHED.LambdaLR(opt, _warm_up_over_6)).state_dict()
    assert list(got) == list(expected)
    for key, value in expected.items():
        torch.testing.assert_close(torch.tensor(got[key]), value,
                                   atol=ATOL, rtol=1e-5, msg=key)


def test_two_merges_an_epoch_follow_the_global_clock(backend):
    # 2 workers of 24 rows, batches of 4: 6 steps an epoch, 3 per half.
    b, epochs, lr = 4, 2, 0.2
    X, y = _data(48)
    init = _init()

    def make(opt):
        return SCHED.LinearLR(opt, start_factor=0.05, total_iters=9)
    est = _with(LRScheduler(SCHED.LinearLR, step_every="batch",
                            start_factor=0.05, total_iters=9))(
        module=init, n_workers=2, shuffle="none", n_epochs=epochs,
        batch_size=b, lr=lr, sync_every=0.5)
    est.fit(X, y)
    assert [h["n_merges"] for h in est.history_] == [2, 2]
    rates = _rates(lr, make, epochs * 6)
    parts = ref.split_like_blocks(*_tensors(X, y), 2)
    replicas = [copy.deepcopy(init) for _ in parts]
    opts = [torch.optim.SGD(r.parameters(), lr=lr) for r in replicas]
    criterion = torch.nn.MSELoss()
    for epoch in range(epochs):
        for half in range(2):
            for r, opt, (x, t) in zip(replicas, opts, parts):
                for j in range(3 * half, 3 * half + 3):
                    step = epoch * 6 + j
                    ref.train(r, opt, criterion, x[j * b:(j + 1) * b],
                              t[j * b:(j + 1) * b], b, rates[step])
            avg = ref.average([r.state_dict() for r in replicas], [12, 12])
            for r in replicas:
                r.load_state_dict(avg)
    ref.assert_same_model(est.module_, replicas[0], atol=ATOL, rtol=1e-5)


def test_partial_fit_continues_the_clock(backend):
    # 40 rows in batches of 8: 5 steps an epoch; the warm-up spans three
    # epochs, so each partial_fit must start where the last one ended.
    X, y = _data(40)
    init = _init()

    def make(opt):
        return SCHED.LinearLR(opt, start_factor=0.1, total_iters=13)
    est = _with(LRScheduler(SCHED.LinearLR, step_every="batch",
                            start_factor=0.1, total_iters=13))(
        module=init, n_workers=1, shuffle="none", batch_size=8, lr=0.1,
        optimizer__momentum=0.5)
    for _ in range(3):
        est.partial_fit(X, y)
    x, t = _tensors(X, y)
    expected = _plain_torch(init, x, t, 8, 3, 0.1, make, momentum=0.5)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-5)


def test_a_resumed_checkpoint_continues_the_clock(tmp_path):
    X, y = _data(40)
    init = _init()
    scheduled = _with(LRScheduler(SCHED.LinearLR, step_every="batch",
                                  start_factor=0.1, total_iters=13))
    params = dict(module=init, n_workers=1, shuffle="none", batch_size=8,
                  lr=0.1, optimizer__momentum=0.5, checkpoint_dir=tmp_path)
    scheduled(n_epochs=2, **params).fit(X, y)
    resumed = scheduled(n_epochs=4, **params).fit(X, y, resume=True)
    assert [h["epoch"] for h in resumed.history_] == [1, 2, 3, 4]

    def make(opt):
        return SCHED.LinearLR(opt, start_factor=0.1, total_iters=13)
    expected = _plain_torch(init, *_tensors(X, y), 8, 4, 0.1, make,
                            momentum=0.5)
    ref.assert_same_model(resumed.module_, expected, atol=ATOL, rtol=1e-5)


def test_a_per_step_factor_multiplies_the_epochs_rate():
    # lr_schedule halves the rate each epoch; the warm-up scales it.
    X, y = _data(40)
    init = _init()
    est = _with(LRScheduler(warm_then_constant, step_every="batch"))(
        module=init, n_workers=1, shuffle="none", n_epochs=2, batch_size=8,
        lr=0.2, lr_schedule=lambda epoch: 0.5 ** epoch)
    est.fit(X, y)
    x, t = _tensors(X, y)
    model = copy.deepcopy(init)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    for epoch in range(2):
        for j in range(5):
            rate = 0.2 * 0.5 ** epoch * warm_then_constant(epoch * 5 + j)
            ref.train(model, opt, torch.nn.MSELoss(), x[j * 8:(j + 1) * 8],
                      t[j * 8:(j + 1) * 8], 8, rate)
    ref.assert_same_model(est.module_, model, atol=ATOL, rtol=1e-5)


def test_step_every_epoch_is_lr_schedule():
    X, y = _data(40)
    init = _init()
    params = dict(module=init, n_workers=2, shuffle="none", n_epochs=3,
                  batch_size=8, lr=0.2)
    by_callback = _with(LRScheduler(SCHED.StepLR, step_size=1, gamma=0.5))(
        **params).fit(X, y)
    by_param = SyncEpochAveragingRegressor(
        lr_schedule=SCHED.StepLR, lr_schedule__step_size=1,
        lr_schedule__gamma=0.5, **params).fit(X, y)
    assert [h["lr"] for h in by_callback.history_] == [0.2, 0.1, 0.05]
    ref.assert_same_model(by_callback.module_, by_param.module_, atol=0,
                          rtol=0)


# ------------------------------------------------------------- bad input
def _fails_before_any_task(callback, error, match, **params):
    """``fit`` raises ``error`` and leaves the estimator unfitted."""
    X, y = _data(40)
    est = SyncEpochAveragingRegressor(module=_models.MLP, n_workers=1,
                                      n_epochs=1, callbacks=[callback],
                                      **params)
    with pytest.raises(error, match=match):
        est.fit(X, y)
    assert not hasattr(est, "module_")
    assert not hasattr(est, "history_")


def test_step_every_must_be_epoch_or_batch():
    _fails_before_any_task(
        LRScheduler(SCHED.OneCycleLR, step_every="bath", max_lr=0.1),
        ValueError, r"The 'step_every' argument of LRScheduler must be a "
                    r"str among \{'epoch', 'batch'\}\. Got 'bath' "
                    r"instead\.")


@pytest.mark.parametrize("step_every", ["batch", "epoch"])
def test_scheduler_arguments_the_class_rejects(step_every):
    _fails_before_any_task(
        LRScheduler(SCHED.OneCycleLR, step_every=step_every, max_lr=0.1,
                    warmup=3),
        TypeError, r"OneCycleLR could not be built with \{'max_lr': 0.1, "
                   r"'warmup': 3.*\}: .*warmup")


def test_reduce_on_plateau_cannot_step_per_batch():
    _fails_before_any_task(
        LRScheduler(SCHED.ReduceLROnPlateau, step_every="batch"),
        ValueError, "cannot step ReduceLROnPlateau per batch")


def test_a_callable_takes_no_scheduler_arguments():
    _fails_before_any_task(
        LRScheduler(warm_then_constant, step_every="batch", gamma=0.5),
        TypeError, r"scheduler arguments \(gamma\), but its policy is a "
                   r"callable")


def test_a_scheduler_that_cannot_drive_the_optimizer_fails_before_tasks():
    # OneCycleLR cycles momentum, which Adagrad has not.
    _fails_before_any_task(
        LRScheduler(SCHED.OneCycleLR, step_every="batch", max_lr=0.1),
        ValueError, r"LRScheduler could not build OneCycleLR with "
                    r"\{'max_lr': 0.1\} on the optimizer Adagrad: "
                    r".*momentum", optimizer=torch.optim.Adagrad)


def test_a_per_epoch_scheduler_beside_lr_schedule_is_refused():
    _fails_before_any_task(
        LRScheduler(SCHED.StepLR, step_size=1), ValueError,
        "both set each epoch's rate", lr_schedule=lambda epoch: 1.0)


def test_a_factor_must_be_a_number():
    _fails_before_any_task(
        LRScheduler(_not_a_factor, step_every="batch"), TypeError,
        r"LRScheduler's policy _not_a_factor must return a factor \(a "
        r"number\) for each step\. It returned 'fast' for step 0\.")


def test_one_per_batch_scheduler_a_fit():
    X, y = _data(40)
    est = SyncEpochAveragingRegressor(
        module=_models.MLP, n_workers=1, n_epochs=1, callbacks=[
            LRScheduler(warm_then_constant, step_every="batch"),
            LRScheduler(SCHED.LinearLR, step_every="batch")])
    with pytest.raises(ValueError, match="A fit takes one LRScheduler with "
                                         "step_every='batch'; got 2"):
        est.fit(X, y)
    assert not hasattr(est, "module_")


def _not_a_factor(step):
    return "fast"


def test_set_params_reaches_the_schedulers_arguments():
    X, y = _data(40)
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=1, shuffle="none", n_epochs=2, batch_size=8,
        lr=0.2, callbacks=[("warm_up", LRScheduler(
            SCHED.LinearLR, step_every="batch", start_factor=0.5,
            total_iters=4))])
    est.set_params(callbacks__warm_up__start_factor=0.1,
                   callbacks__warm_up__total_iters=7)
    est.fit(X, y)

    def make(opt):
        return SCHED.LinearLR(opt, start_factor=0.1, total_iters=7)
    expected = _plain_torch(init, *_tensors(X, y), 8, 2, 0.2, make)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-5)
