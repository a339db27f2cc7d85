"""Saved models and checkpoints are written whole or not at all.

A process killed while it writes leaves the previous file and no
temporary beside it; a full file system raises ``OSError`` with its
errno, naming the path. The full-disk tests mount a small tmpfs, which
needs root; elsewhere they skip, saying so.
"""

import errno
import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
import torch

from dislib_nn import SyncEpochAveragingRegressor
from tests.training._models import MLP
from tests.training._paths import ROOT

_KILLED_SAVER = """
import sys
import numpy as np
from dislib_nn import SyncEpochAveragingRegressor, runtime
from tests.training._models import MLP
runtime.set_backend("sequential")
x = np.random.RandomState(0).randn(8, 4).astype("float32")
est = SyncEpochAveragingRegressor(module=MLP, module__hidden=600_000,
                                  n_epochs=1, n_workers=1)
est.fit(x, x[:, :1])                            # 14 MB of weights
print("saving", flush=True)
while True:
    est.save(sys.argv[1])
"""


def _data():
    rng = np.random.RandomState(0)
    x = rng.randn(40, 4).astype("float32")
    return x, x @ rng.randn(4, 1).astype("float32")


@pytest.fixture
def full_folder(tmp_path):
    """A folder on a 512 KiB file system, unmounted afterwards."""
    folder = tmp_path / f"dnnfull-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k",
                           "dnnfull", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): "
                    f"{done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_save_killed_mid_write_leaves_the_old_file_and_no_other(
        fresh_python, tmp_path):
    path = tmp_path / "model.pt"
    env = dict(os.environ, PYTHONPATH=ROOT)
    for delay in (0.05, 0.6, 1.6):
        proc = subprocess.Popen([sys.executable, "-c", _KILLED_SAVER,
                                 str(path)], stdout=subprocess.PIPE,
                                text=True, env=env, cwd=ROOT)
        try:
            assert proc.stdout.readline().strip() == "saving"
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        assert sorted(os.listdir(tmp_path)) in ([], ["model.pt"])
        if path.exists():
            loaded = SyncEpochAveragingRegressor(
                module=MLP, module__hidden=600_000).load(path)
            assert loaded.module_.body[0].weight.shape == (600_000, 4)
    assert path.exists(), "no write finished in 1.6 s: make the kills later"


def test_save_on_a_full_disk_names_the_path_and_keeps_the_old_file(
        sequential, full_folder):
    x, y = _data()
    small = SyncEpochAveragingRegressor(module=MLP, module__hidden=4,
                                        n_epochs=1, n_workers=2).fit(x, y)
    path = full_folder / "model.pt"
    small.save(path)
    before = path.read_bytes()
    big = SyncEpochAveragingRegressor(module=MLP, module__hidden=40_000,
                                      n_epochs=1, n_workers=2).fit(x, y)
    with pytest.raises(OSError, match=r"No space left on device: could "
                       r"not write the SyncEpochAveragingRegressor model "
                       r"to .*model\.pt") as info:
        big.save(path)
    assert info.value.errno == errno.ENOSPC
    assert info.value.filename == str(path)
    assert os.listdir(full_folder) == ["model.pt"]
    assert path.read_bytes() == before


def test_a_checkpoint_on_a_full_disk_names_the_path(sequential,
                                                    full_folder):
    x, y = _data()
    est = SyncEpochAveragingRegressor(module=MLP, module__hidden=40_000,
                                      n_epochs=1, n_workers=2,
                                      checkpoint_dir=full_folder)
    with pytest.raises(OSError, match=r"could not write the checkpoint "
                       r"to .*checkpoint\.pt") as info:
        est.fit(x, y)
    assert info.value.errno == errno.ENOSPC
    assert not hasattr(est, "module_")
    assert [n for n in os.listdir(full_folder) if not n.startswith(
        ".dislib_nn.lock")] == []
