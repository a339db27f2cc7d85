"""One fit per checkpoint folder: a second process's fit on a folder in
use is refused at once, naming the folder and the holder; the lock goes
with the fit (returned, raised, or its process killed). Checkpoints get
the mode of any new file."""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dislib_nn import SyncEpochAveragingRegressor
from dislib_nn.exceptions import CheckpointInUseError, ShapeError
from dislib_nn.runtime import barrier
from tests.training import _checkpoint_run as run
from tests.training._paths import ROOT


def test_a_fit_in_another_process_holds_the_folder(
        fresh_python, sequential, tmp_path):
    folder, marker = tmp_path / "ckpt", tmp_path / "forwards"
    env = dict(os.environ, DISLIB_NN_BACKEND="sequential",
               DISLIB_NN_TEST_MARKER=str(marker), DISLIB_NN_TEST_SLEEP="0.2")
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    other = subprocess.Popen(
        [sys.executable, "-m", "tests.training._checkpoint_run",
         str(tmp_path / "other.pt"), str(folder), "0",
         "SyncEpochAveragingRegressor"], cwd=ROOT, env=env,
        start_new_session=True, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():      # it trains: it holds the folder
            assert other.poll() is None, other.stderr.read()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        est = SyncEpochAveragingRegressor(
            module=run.SlowMLP, n_epochs=1, n_workers=2,
            checkpoint_dir=folder)
        with pytest.raises(CheckpointInUseError, match=(
                rf"The checkpoint folder {re.escape(repr(str(folder)))} is "
                rf"in use by another fit \(process {other.pid} on .+\): "
                rf"two fits on one folder")):
            est.fit(*run.data())
        assert not hasattr(est, "module_")
        barrier()
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait()
    # Killed, the holder left the lock file, not the lock.
    assert (folder / ".dislib_nn.lock").exists()
    est.fit(*run.data())
    assert est.n_epochs_ == 1


def test_the_folder_is_free_after_a_fit_returns_or_raises(sequential,
                                                           tmp_path):
    x, y = run.data()
    params = dict(module=run.SlowMLP, n_epochs=1, n_workers=2,
                  checkpoint_dir=tmp_path, random_state=0)
    SyncEpochAveragingRegressor(**params).fit(x, y)
    with pytest.raises(ShapeError):
        SyncEpochAveragingRegressor(**params).fit(x, y[:-3])
    est = SyncEpochAveragingRegressor(**dict(params, n_epochs=2))
    est.fit(x, y, resume=True)
    assert [h["epoch"] for h in est.history_] == [1, 2]
    # partial_fit holds it too, and lets it go.
    est.partial_fit(x, y)
    est.partial_fit(x, y)
    assert est.n_epochs_ == 4


def test_checkpoints_and_saved_files_get_the_mode_of_any_new_file(
        sequential, tmp_path):
    x, y = run.data()
    est = SyncEpochAveragingRegressor(module=run.SlowMLP, n_epochs=1,
                                      n_workers=2, checkpoint_dir=tmp_path)
    old = os.umask(0o027)
    try:
        est.fit(x, y)
        est.save(tmp_path / "model.pt")
        (tmp_path / "plain").write_text("x")
    finally:
        os.umask(old)
    mode = (tmp_path / "plain").stat().st_mode & 0o777
    assert mode == 0o640
    assert (tmp_path / "checkpoint.pt").stat().st_mode & 0o777 == mode
    assert (tmp_path / "model.pt").stat().st_mode & 0o777 == mode
