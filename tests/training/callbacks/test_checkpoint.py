"""Checkpoint and resume: a fit killed mid-epoch resumes to the model of
an uninterrupted fit; checkpoints of other estimators are refused."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from dislib_nn import (AsyncEpochAveragingRegressor,
                       SyncEpochAveragingRegressor, callbacks)
from dislib_nn.exceptions import (CheckpointMismatchError,
                                  InvalidParameterError)
from tests.conftest import BACKENDS
from tests.training import _checkpoint_run as run
from tests.training._models import MLP
from tests.training._paths import ROOT

KILL_EPOCH = 2          # 0-based: killed half-way through the third epoch


def _env(backend, marker, sleep):
    env = dict(os.environ, DISLIB_NN_BACKEND=backend, DISLIB_NN_WORKERS="2",
               DISLIB_NN_TEST_MARKER=str(marker),
               DISLIB_NN_TEST_SLEEP=str(sleep))
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _command(out, checkpoint_dir, resume, name):
    return [sys.executable, "-m", "tests.training._checkpoint_run",
            str(out), str(checkpoint_dir), str(int(resume)), name]


def _start_to_end(tmp_path, tag, backend, checkpoint_dir, resume, name):
    """Start a fit that runs to its end; call the result to wait for it:
    ``(its saved state, its training forward calls)``."""
    out, marker = tmp_path / f"{tag}.pt", tmp_path / f"{tag}.marker"
    err = tmp_path / f"{tag}.err"       # a file: nobody reads a pipe yet
    with open(err, "w") as stderr:
        proc = subprocess.Popen(_command(out, checkpoint_dir, resume, name),
                                cwd=ROOT, env=_env(backend, marker, 0),
                                stderr=stderr)

    def finish():
        proc.wait(timeout=300)
        assert proc.returncode == 0, err.read_text()[-3000:]
        calls = marker.stat().st_size if marker.exists() else 0
        return torch.load(out), calls
    return finish


def _epochs_checkpointed(checkpoint_dir):
    path = os.path.join(checkpoint_dir, "checkpoint.pt")
    if not os.path.exists(path):
        return 0
    return int(torch.load(path, weights_only=True)["n_epochs_"])


def _run_and_kill(tmp_path, backend, checkpoint_dir, name):
    """Kill the fit half-way through epoch KILL_EPOCH (0-based), once the
    checkpoint of the epoch before it has landed.

    The master writes a checkpoint as soon as the merged epoch's copy
    reaches it, while the next epoch trains: a kill in the moment before
    that would repeat the epoch before too (docs/estimators.md). Each
    forward sleeps 0.25 s, so an epoch lasts about a second, far more
    than that moment takes on a loaded machine.
    """
    marker = tmp_path / "killed.marker"
    proc = subprocess.Popen(
        _command(tmp_path / "killed.pt", checkpoint_dir, False, name),
        cwd=ROOT, env=_env(backend, marker, 0.25), start_new_session=True)
    target = run.CALLS_PER_EPOCH * KILL_EPOCH + run.CALLS_PER_EPOCH // 2
    deadline = time.monotonic() + 300
    try:
        while not (marker.exists() and marker.stat().st_size >= target
                   and _epochs_checkpointed(checkpoint_dir) >= KILL_EPOCH):
            assert proc.poll() is None, "the fit ended before the kill"
            assert time.monotonic() < deadline, "the fit never got there"
            time.sleep(0.01)
    finally:
        # The whole session: the master and its local worker processes.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed.pt").exists()
    # Killed in the middle of epoch KILL_EPOCH, as the test means to be.
    assert marker.stat().st_size < run.CALLS_PER_EPOCH * (KILL_EPOCH + 1)


# Not on dask: there a checkpoint can land an epoch later than this test's
# kill expects (docs/hpc.md, "Checkpoints on dask"), so the kill would
# come after the next epoch; resuming on dask is tested below.
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "dask"])
def test_killed_fit_resumes_to_the_uninterrupted_model(
        fresh_python, tmp_path, backend):
    name = "SyncEpochAveragingRegressor"
    # The uninterrupted fit runs beside the one that is killed (whose
    # forwards mostly sleep).
    reference = _start_to_end(tmp_path, "reference", backend, "-", False,
                              name)
    checkpoint_dir = tmp_path / "checkpoints"
    _run_and_kill(tmp_path, backend, checkpoint_dir, name)
    reference, full_calls = reference()
    resumed, calls = _start_to_end(tmp_path, "resumed", backend,
                                   checkpoint_dir, True, name)()
    assert full_calls == run.CALLS_PER_EPOCH * run.N_EPOCHS
    # Epochs before KILL_EPOCH were done; at most the one killed is run
    # again, on both backends.
    assert 0 < calls <= run.CALLS_PER_EPOCH * (run.N_EPOCHS - KILL_EPOCH)
    assert resumed["epochs"] == list(range(1, run.N_EPOCHS + 1))
    assert resumed["n_epochs_"] == run.N_EPOCHS
    for key, value in reference["state"].items():
        torch.testing.assert_close(resumed["state"][key], value, rtol=0,
                                   atol=1e-5)


def _data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    return x, x.sum(axis=1).astype(np.float32)


def _regressor(cls=SyncEpochAveragingRegressor, **kwargs):
    params = dict(module=MLP, n_epochs=3, batch_size=8, n_workers=2,
                  random_state=0, optimizer__momentum=0.9)
    params.update(kwargs)
    return cls(**params)


def _assert_same_model(a, b):
    for key, value in a.module_.state_dict().items():
        torch.testing.assert_close(b.module_.state_dict()[key], value,
                                   rtol=0, atol=1e-6)


@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
def test_resume_without_checkpoint_starts_afresh(local, tmp_path, cls):
    x, y = _data()
    # max_lag=0: the asynchronous model does not depend on timings.
    extra = {"max_lag": 0} if cls is AsyncEpochAveragingRegressor else {}
    plain = _regressor(cls, **extra).fit(x, y)
    resumed = _regressor(cls, checkpoint_dir=tmp_path, **extra).fit(
        x, y, resume=True)
    _assert_same_model(plain, resumed)
    assert (tmp_path / "checkpoint.pt").exists()


@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
def test_resume_continues_a_shorter_fit_exactly(backend, tmp_path, cls):
    x, y = _data()
    extra = {"max_lag": 0} if cls is AsyncEpochAveragingRegressor else {}
    plain = _regressor(cls, n_epochs=4, **extra).fit(x, y)
    _regressor(cls, n_epochs=2, checkpoint_dir=tmp_path, **extra).fit(x, y)
    resumed = _regressor(cls, n_epochs=4, checkpoint_dir=tmp_path,
                         **extra).fit(x, y, resume=True)
    assert [r["epoch"] for r in resumed.history_] == [1, 2, 3, 4]
    _assert_same_model(plain, resumed)


def test_resume_of_a_finished_fit_runs_no_epoch(local, tmp_path):
    x, y = _data()
    done = _regressor(checkpoint_dir=tmp_path).fit(x, y)
    again = _regressor(checkpoint_dir=tmp_path).fit(x, y, resume=True)
    assert again.history_ == done.history_
    _assert_same_model(done, again)


def test_checkpoint_of_other_parameters_is_refused(local, tmp_path):
    x, y = _data()
    _regressor(checkpoint_dir=tmp_path).fit(x, y)
    other = _regressor(checkpoint_dir=tmp_path, lr=0.1)
    with pytest.raises(CheckpointMismatchError,
                       match=r"lr: checkpoint 0\.01, estimator 0\.1"):
        other.fit(x, y, resume=True)
    assert not hasattr(other, "module_")


def test_resume_accepts_other_loggers_and_progress_bars(local, tmp_path):
    # A requeued job that only adds, drops or reconfigures callbacks that
    # observe resumes; one that changes training still must match.
    x, y = _data()
    plain = _regressor(n_epochs=4).fit(x, y)
    _regressor(n_epochs=2, checkpoint_dir=tmp_path, callbacks=[
        ("log", callbacks.CSVLogger(tmp_path / "a.csv"))]).fit(x, y)
    observed = [("log", callbacks.CSVLogger(tmp_path / "b.csv")),
                callbacks.ProgressBar(leave=False),
                callbacks.TensorBoardLogger(tmp_path / "tb")]
    resumed = _regressor(
        n_epochs=4, checkpoint_dir=tmp_path, callbacks=observed,
        callbacks__ProgressBar__leave=True).fit(x, y, resume=True)
    assert [r["epoch"] for r in resumed.history_] == [1, 2, 3, 4]
    _assert_same_model(plain, resumed)
    changed = _regressor(n_epochs=5, checkpoint_dir=tmp_path, callbacks=[
        callbacks.LRScheduler(torch.optim.lr_scheduler.StepLR,
                              step_size=1)])
    with pytest.raises(CheckpointMismatchError, match=(
            r"callbacks: checkpoint \(\), estimator \(a "
            r"dislib_nn\..*LRScheduler\)")):
        changed.fit(x, y, resume=True)


def test_checkpoint_of_another_module_is_refused(local, tmp_path):
    x, y = _data()
    _regressor(checkpoint_dir=tmp_path).fit(x, y)
    wider = _regressor(checkpoint_dir=tmp_path, module__hidden=16)
    with pytest.raises(CheckpointMismatchError, match="module__hidden"):
        wider.fit(x, y, resume=True)
    with pytest.raises(CheckpointMismatchError,
                       match="AsyncEpochAveragingRegressor"):
        _regressor(AsyncEpochAveragingRegressor,
                   checkpoint_dir=tmp_path).fit(x, y, resume=True)


def test_checkpoint_of_other_worker_count_is_refused(local, tmp_path):
    x, y = _data()
    _regressor(checkpoint_dir=tmp_path).fit(x, y)
    with pytest.raises(CheckpointMismatchError, match="n_workers"):
        _regressor(checkpoint_dir=tmp_path, n_workers=3).fit(
            x, y, resume=True)


def test_resume_needs_a_checkpoint_dir(local):
    x, y = _data()
    with pytest.raises(InvalidParameterError, match="checkpoint_dir"):
        _regressor().fit(x, y, resume=True)
    with pytest.raises(InvalidParameterError, match="'resume'"):
        _regressor().fit(x, y, resume="yes")
    with pytest.raises(InvalidParameterError, match="checkpoint_dir"):
        _regressor(checkpoint_dir="").fit(x, y)
