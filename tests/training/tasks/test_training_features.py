"""Gradient clipping, gradient accumulation and mixed precision.

Each is compared with a plain single-process PyTorch loop doing the same
(written here, independently of dislib_nn's loop), on both local
backends: one worker (same module instance, ``shuffle="none"``) is that
loop; two workers are that loop on each part, averaged by hand after
every epoch. A check that the feature changes the model at all keeps
each comparison from passing by doing nothing.
"""

import copy

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.datasets import make_regression

from dislib_nn import (AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training.tasks._precision import amp_plan
from tests.training import _models, _reference as ref

ATOL = 2e-5
CUDA = torch.cuda.is_available()


def _data(n=90, features=4):
    X, y = make_regression(n_samples=n, n_features=features, noise=1.0,
                           random_state=0)
    return X.astype(np.float32), (y / 100).astype(np.float32)


def _init(seed=0):
    torch.manual_seed(seed)
    return _models.MLP(n_features_in=4, n_outputs=1, hidden=8)


def _tensors(X, y):
    return torch.from_numpy(X), torch.from_numpy(y)[:, None]


def _assert_same(model, expected, atol=ATOL):
    got, want = model.state_dict(), expected.state_dict()
    assert list(got) == list(want)
    for key in got:
        torch.testing.assert_close(got[key], want[key], atol=atol,
                                   rtol=1e-4, msg=key)


def _differ(a, b, atol=ATOL):
    return any(not torch.allclose(a.state_dict()[k], b.state_dict()[k],
                                  atol=atol, rtol=1e-4)
               for k in a.state_dict())


# ------------------------------------------------------- plain PyTorch
def _train(model, opt, criterion, x, y, batch_size, clip_norm=None,
           clip_value=None, accumulate=1, autocast=None, scaler=None,
           device="cpu"):
    """One epoch of a plain loop, Lightning's way: each batch's loss over
    ``accumulate``, a step every ``accumulate`` batches and after the
    last, clipping before each step."""
    model.train()
    n_batches = -(-len(x) // batch_size)
    opt.zero_grad()
    for j in range(n_batches):
        xb = x[j * batch_size:(j + 1) * batch_size].to(device)
        yb = y[j * batch_size:(j + 1) * batch_size].to(device)
        if autocast is None:
            loss = criterion(model(xb), yb)
        else:
            with torch.autocast(device_type=torch.device(device).type,
                                dtype=autocast):
                loss = criterion(model(xb), yb)
        loss = loss / accumulate
        if scaler is None:
            loss.backward()
        else:
            scaler.scale(loss).backward()
        if (j + 1) % accumulate and j != n_batches - 1:
            continue
        if scaler is not None:
            scaler.unscale_(opt)
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        if clip_value is not None:
            torch.nn.utils.clip_grad_value_(model.parameters(), clip_value)
        if scaler is None:
            opt.step()
        else:
            scaler.step(opt)
            scaler.update()
        opt.zero_grad()


def _plain(module, x, y, epochs, batch_size, lr, optimizer=torch.optim.SGD,
           opt_kwargs=None, **loop):
    model = copy.deepcopy(module)
    opt = optimizer(model.parameters(), lr=lr, **(opt_kwargs or {}))
    for _ in range(epochs):
        _train(model, opt, torch.nn.MSELoss(), x, y, batch_size, **loop)
    return model


def _averaged(module, parts, epochs, batch_size, lr,
              optimizer=torch.optim.SGD, opt_kwargs=None, **loop):
    """Replicas trained by ``_train`` on fixed parts, averaged by sample
    count after every epoch, optimizer states kept per replica."""
    replicas = [copy.deepcopy(module) for _ in parts]
    opts = [optimizer(r.parameters(), lr=lr, **(opt_kwargs or {}))
            for r in replicas]
    for _ in range(epochs):
        for r, opt, (x, y) in zip(replicas, opts, parts):
            _train(r, opt, torch.nn.MSELoss(), x, y, batch_size, **loop)
        avg = ref.average([r.state_dict() for r in replicas],
                          [len(x) for x, _ in parts])
        for r in replicas:
            r.load_state_dict(avg)
    return replicas[0]


def _reference(init, X, y, n_workers, epochs, batch_size, lr, **kwargs):
    x, t = _tensors(X, y)
    if n_workers == 1:
        return _plain(init, x, t, epochs, batch_size, lr, **kwargs)
    return _averaged(init, ref.split_like_blocks(x, t, n_workers), epochs,
                     batch_size, lr, **kwargs)


# ---------------------------------------------------- gradient clipping
@pytest.mark.parametrize("n_workers", [1, 2])
@pytest.mark.parametrize("params, loop", [
    ({"grad_clip_norm": 0.05}, {"clip_norm": 0.05}),
    ({"grad_clip_value": 0.01}, {"clip_value": 0.01}),
    ({"grad_clip_norm": 0.05, "grad_clip_value": 0.01},
     {"clip_norm": 0.05, "clip_value": 0.01}),
])
def test_gradient_clipping_is_plain_pytorch_clipping(backend, n_workers,
                                                     params, loop):
    X, y = _data()
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=n_workers, shuffle="none", n_epochs=2,
        batch_size=16, lr=0.1, optimizer__momentum=0.9, **params)
    est.fit(X, y)
    kwargs = dict(epochs=2, batch_size=16, lr=0.1,
                  opt_kwargs={"momentum": 0.9})
    expected = _reference(init, X, y, n_workers, **kwargs, **loop)
    _assert_same(est.module_, expected)
    # The clipping bites: without it the model is another one.
    assert _differ(expected, _reference(init, X, y, n_workers, **kwargs))


# ------------------------------------------------ gradient accumulation
@pytest.mark.parametrize("n_workers", [1, 2])
@pytest.mark.parametrize("optimizer, opt_kwargs", [
    (torch.optim.SGD, {"momentum": 0.9}),
    (torch.optim.Adam, {}),
])
def test_accumulation_is_plain_pytorch_accumulation(backend, n_workers,
                                                    optimizer, opt_kwargs):
    # 90 rows in batches of 8 (45 per worker with two): 12 or 6 batches,
    # groups of 5: a last incomplete group of 2 or 1 batches still steps.
    X, y = _data(90)
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=n_workers, shuffle="none", n_epochs=2,
        batch_size=8, lr=0.05, optimizer=optimizer,
        accumulate_grad_batches=5, grad_clip_norm=0.5,
        **{f"optimizer__{k}": v for k, v in opt_kwargs.items()})
    est.fit(X, y)
    kwargs = dict(epochs=2, batch_size=8, lr=0.05, optimizer=optimizer,
                  opt_kwargs=opt_kwargs, clip_norm=0.5)
    expected = _reference(init, X, y, n_workers, accumulate=5, **kwargs)
    _assert_same(est.module_, expected)
    assert _differ(expected, _reference(init, X, y, n_workers, **kwargs))


def test_the_asynchronous_estimator_trains_the_same_way(backend):
    X, y = _data(90)
    init = _init()
    est = AsyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=2, batch_size=8,
        lr=0.05, max_lag=0, accumulate_grad_batches=2,
        grad_clip_value=0.02, precision="bf16", device="cpu")
    est.fit(X, y)
    expected = _reference(init, X, y, 2, epochs=2, batch_size=8, lr=0.05,
                          accumulate=2, clip_value=0.02,
                          autocast=torch.bfloat16)
    _assert_same(est.module_, expected, atol=1e-4)


@pytest.mark.parametrize("n_workers", [1, 2])
def test_accumulating_k_batches_of_b_is_sgd_with_batches_of_k_times_b(
        backend, n_workers):
    b, k = 6, 3
    X, y = _data(n_workers * b * k * 4)      # 4 steps per worker and epoch
    init = _init()
    kwargs = dict(module=init, n_workers=n_workers, shuffle="none",
                  n_epochs=2, lr=0.1)
    small = SyncEpochAveragingRegressor(
        batch_size=b, accumulate_grad_batches=k, **kwargs).fit(X, y)
    large = SyncEpochAveragingRegressor(batch_size=k * b,
                                        **kwargs).fit(X, y)
    _assert_same(small.module_, large.module_, atol=1e-5)
    expected = _reference(init, X, y, n_workers, epochs=2,
                          batch_size=k * b, lr=0.1)
    _assert_same(small.module_, expected, atol=1e-5)


def test_a_merge_every_step_waits_for_the_accumulated_batches(backend):
    # Two replicas merging after every optimizer step of k batches of b
    # are plain SGD with batches of 2 * k * b (same-sized batches).
    b, k, steps = 4, 2, 3
    X, y = _data(2 * b * k * steps)
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=2, batch_size=b,
        lr=0.1, sync_every="step", accumulate_grad_batches=k)
    est.fit(X, y)
    assert [h["n_merges"] for h in est.history_] == [steps] * 2
    (x0, y0), (x1, y1) = ref.split_like_blocks(*_tensors(X, y), 2)
    rows = b * k
    x = torch.cat([torch.cat([x0[s * rows:(s + 1) * rows],
                              x1[s * rows:(s + 1) * rows]])
                   for s in range(steps)])
    t = torch.cat([torch.cat([y0[s * rows:(s + 1) * rows],
                              y1[s * rows:(s + 1) * rows]])
                   for s in range(steps)])
    expected = ref.single_process(init, x, t, torch.nn.MSELoss(), epochs=2,
                                  batch_size=2 * rows, lr=0.1)
    _assert_same(est.module_, expected, atol=1e-5)


# ------------------------------------------------------------ precision
@pytest.mark.parametrize("n_workers", [1, 2])
def test_bf16_is_plain_pytorch_under_the_same_autocast(backend, n_workers):
    X, y = _data()
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=n_workers, shuffle="none", n_epochs=2,
        batch_size=16, lr=0.05, optimizer=torch.optim.Adam, device="cpu",
        precision="bf16")
    est.fit(X, y)
    kwargs = dict(epochs=2, batch_size=16, lr=0.05,
                  optimizer=torch.optim.Adam)
    expected = _reference(init, X, y, n_workers, autocast=torch.bfloat16,
                          **kwargs)
    _assert_same(est.module_, expected, atol=1e-4)
    # bfloat16 rounds: fp32 training gives another model.
    assert _differ(expected, _reference(init, X, y, n_workers, **kwargs),
                   atol=1e-4)
    # Weights and optimizer states stay float32.
    assert {v.dtype for v in est.module_.state_dict().values()} == {
        torch.float32}
    for optim in est.optimizer_states_:
        for entry in optim["state"].values():
            for name, value in entry.items():
                if name != "step":
                    assert value.dtype == torch.float32, name


@pytest.mark.parametrize("precision, device_type, expected", [
    ("fp32", "cpu", (None, False)),
    ("fp32", "cuda", (None, False)),
    ("bf16", "cpu", (torch.bfloat16, False)),
    ("bf16", "cuda", (torch.bfloat16, False)),
    ("fp16", "cuda", (torch.float16, True)),
])
def test_the_precision_picks_autocast_and_scaler(precision, device_type,
                                                 expected):
    assert amp_plan(precision, device_type) == expected


def test_fp16_on_a_cpu_task_is_refused_by_the_plan():
    with pytest.raises(InvalidParameterError,
                       match=r"precision='fp16' needs a CUDA device"):
        amp_plan("fp16", "cpu")


@pytest.mark.parametrize("device", ["cpu"] + ([] if CUDA else ["auto"]))
def test_fp16_without_cuda_is_refused_before_any_task(local, device):
    X, y = _data(40)
    est = SyncEpochAveragingRegressor(module=_init(), n_epochs=1,
                                      device=device, precision="fp16")
    with pytest.raises(InvalidParameterError,
                       match=r"precision='fp16' needs a CUDA device .*"
                             r"device='" + device + "'"):
        est.fit(X, y)
    assert not hasattr(est, "module_")
    # A fitted estimator is left as it was.
    fitted = SyncEpochAveragingRegressor(module=_init(), n_epochs=1,
                                         device=device).fit(X, y)
    before = copy.deepcopy(fitted.module_.state_dict())
    history = list(fitted.history_)
    fitted.set_params(precision="fp16", warm_start=True)
    with pytest.raises(InvalidParameterError, match="precision='fp16'"):
        fitted.fit(X, y)
    with pytest.raises(InvalidParameterError, match="precision='fp16'"):
        fitted.partial_fit(X, y)
    assert fitted.history_ == history
    for key, value in fitted.module_.state_dict().items():
        assert torch.equal(value, before[key])


@pytest.mark.skipif(CUDA, reason="checks a machine without CUDA")
def test_a_saved_fp16_estimator_loads_without_cuda(local, tmp_path):
    X, y = _data(40)
    est = SyncEpochAveragingRegressor(module=_models.MLP, n_epochs=1,
                                      random_state=0).fit(X, y)
    est.set_params(precision="fp16")     # as if fitted where CUDA was
    path = tmp_path / "model.pt"
    est.save(path)
    loaded = SyncEpochAveragingRegressor().load(path)
    assert loaded.precision == "fp16"
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
    with pytest.raises(InvalidParameterError, match="precision='fp16'"):
        loaded.partial_fit(X, y)


@pytest.mark.skipif(not CUDA, reason="fp16 autocast needs CUDA")
@pytest.mark.parametrize("n_workers", [1, 2])
def test_fp16_is_plain_pytorch_with_a_grad_scaler(local, n_workers):
    X, y = _data()
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=n_workers, shuffle="none", n_epochs=2,
        batch_size=16, lr=0.05, optimizer=torch.optim.Adam, device="cuda",
        precision="fp16", grad_clip_norm=1.0)
    est.fit(X, y)
    x, t = _tensors(X, y)
    parts = [(x, t)] if n_workers == 1 else ref.split_like_blocks(x, t, 2)
    replicas = [copy.deepcopy(init).cuda() for _ in parts]
    opts = [torch.optim.Adam(r.parameters(), lr=0.05) for r in replicas]
    for _ in range(2):
        for r, opt, (xp, tp) in zip(replicas, opts, parts):
            # One scaler per training task (epoch and worker).
            _train(r, opt, torch.nn.MSELoss(), xp, tp, 16, clip_norm=1.0,
                   autocast=torch.float16,
                   scaler=torch.amp.GradScaler("cuda"), device="cuda")
        avg = ref.average([r.state_dict() for r in replicas],
                          [len(p[0]) for p in parts])
        for r in replicas:
            r.load_state_dict(avg)
    _assert_same(est.module_, replicas[0].cpu(), atol=1e-4)


class _Overflowing(torch.nn.Module):
    """A criterion whose gradients overflow float16 at any loss scale."""

    def forward(self, out, target):
        return ((out - target) ** 2).mean() * 1e30


@pytest.mark.skipif(not CUDA, reason="fp16 autocast needs CUDA")
def test_fp16_steps_the_scaler_skips_leave_the_replica_finite(local):
    X, y = _data(64)
    init = _init()
    est = SyncEpochAveragingRegressor(
        module=init, criterion=_Overflowing, n_workers=2, shuffle="none",
        n_epochs=2, batch_size=16, lr=0.05, device="cuda",
        precision="fp16", on_failure="raise")
    est.fit(X, y)
    assert all(h["diverged"] == [] and h["skipped"] == []
               for h in est.history_)
    # Every step was skipped: the model is the one it started from.
    _assert_same(est.module_, init, atol=1e-6)


# ------------------------------------------------ parameters, continuing
_NEW = {"grad_clip_norm": None, "grad_clip_value": None,
        "accumulate_grad_batches": 1, "precision": "fp32"}


@pytest.mark.parametrize("cls", [SyncEpochAveragingClassifier,
                                 AsyncEpochAveragingRegressor])
def test_the_parameters_are_plain_parameters(cls):
    est = cls()
    assert {k: est.get_params()[k] for k in _NEW} == _NEW
    given = {"grad_clip_norm": 1.5, "grad_clip_value": 0.1,
             "accumulate_grad_batches": 4, "precision": "bf16"}
    est.set_params(**given)
    copied = clone(est)
    assert {k: copied.get_params()[k] for k in given} == given
    assert {k: cls(**given).get_params()[k] for k in given} == given


@pytest.mark.parametrize("name, value, message", [
    ("grad_clip_norm", 0, r"'grad_clip_norm' parameter of "
     r"SyncEpochAveragingRegressor must be None or a float in the range "
     r"\(0, inf\)\. Got 0 instead"),
    ("grad_clip_value", -1.0, r"'grad_clip_value' parameter .* Got -1\.0"),
    ("grad_clip_norm", float("nan"), r"'grad_clip_norm' parameter"),
    ("accumulate_grad_batches", 0, r"'accumulate_grad_batches' parameter "
     r".* must be an int in the range \[1, inf\)\. Got 0 instead"),
    ("accumulate_grad_batches", 2.0, r"'accumulate_grad_batches' .* "
     r"Got 2\.0 instead"),
    ("precision", "fp64", r"'precision' parameter .* must be a str among "
     r"\{'fp32', 'bf16', 'fp16'\}\. Got 'fp64' instead"),
    ("precision", torch.bfloat16, r"'precision' parameter"),
])
def test_bad_values_are_refused_when_fit_starts(local, name, value,
                                                message):
    X, y = _data(40)
    est = SyncEpochAveragingRegressor(module=_init(), n_epochs=1,
                                      **{name: value})
    with pytest.raises(InvalidParameterError, match=message):
        est.fit(X, y)
    assert not hasattr(est, "module_")


_FEATURES = dict(grad_clip_norm=0.05, accumulate_grad_batches=2,
                 precision="bf16", device="cpu")


def test_partial_fit_with_the_features_continues_like_more_epochs(backend):
    X, y = _data(60)
    kwargs = dict(module=_init(), n_workers=2, shuffle="local",
                  batch_size=8, lr=0.05, optimizer__momentum=0.9,
                  random_state=3, **_FEATURES)
    full = SyncEpochAveragingRegressor(n_epochs=3, **kwargs).fit(X, y)
    step = SyncEpochAveragingRegressor(**kwargs)
    for _ in range(3):
        step.partial_fit(X, y)
    _assert_same(step.module_, full.module_, atol=1e-6)
    warm = SyncEpochAveragingRegressor(n_epochs=1, warm_start=True,
                                       **kwargs)
    for _ in range(3):
        warm.fit(X, y)
    _assert_same(warm.module_, full.module_, atol=1e-6)


def test_resume_with_the_features_gives_the_uninterrupted_model(local,
                                                               tmp_path):
    X, y = _data(60)
    kwargs = dict(module=_init(), n_workers=2, shuffle="global",
                  batch_size=8, lr=0.05, random_state=1,
                  checkpoint_dir=tmp_path, **_FEATURES)
    SyncEpochAveragingRegressor(n_epochs=2, **kwargs).fit(X, y)
    resumed = SyncEpochAveragingRegressor(n_epochs=3, **kwargs).fit(
        X, y, resume=True)
    assert resumed.n_epochs_ == 3 and len(resumed.history_) == 3
    kwargs.pop("checkpoint_dir")
    full = SyncEpochAveragingRegressor(n_epochs=3, **kwargs).fit(X, y)
    _assert_same(resumed.module_, full.module_, atol=1e-6)
