"""Scripts the workers cannot import (stdin, ``python -c``) on the local
backend: an estimator whose module the script defines trains exactly as
from a file; a task the script defines is refused when it is called."""

import os
import subprocess
import sys

import pytest

# Every test here starts new Python processes: `make test-fast` leaves
# them out (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_python")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

FIT = '''import sys

import numpy as np
from torch import nn

import dislib_nn as dnn


class Tiny(nn.Module):
    def __init__(self, n_features_in=4, n_classes=3, hidden=6):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_features_in, hidden),
                                  nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.body(x)


if __name__ == "__main__":
    rng = np.random.RandomState(0)
    x = rng.randn(48, 4).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0.5)
    est = dnn.SyncEpochAveragingClassifier(
        module=Tiny, n_epochs=3, lr=0.1, batch_size=8, n_workers=2,
        random_state=0)
    est.fit(x, y)
    print(est.predict(x).tolist())
    print(est.predict_proba(x).tolist())
    print("main file:", globals().get("__file__"), file=sys.stderr)
'''

TASK = '''from dislib_nn.runtime import task, wait_on


@task(returns=1)
def inc(x):
    open("ran", "w").close()
    return x + 1


if __name__ == "__main__":
    print(wait_on(inc(1)))
'''


def _run(args, cwd, stdin=None):
    env = dict(os.environ, PYTHONPATH=ROOT, DISLIB_NN_WORKERS="2")
    for var in ("DISLIB_NN_BACKEND", "DISLIB_NN_START_METHOD"):
        env.pop(var, None)
    return subprocess.run([sys.executable] + args, input=stdin, cwd=cwd,
                          capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture(scope="module")
def from_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("file")
    (folder / "train.py").write_text(FIT)
    done = _run(["train.py"], folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("how", ["stdin", "-c"])
def test_script_not_in_a_file_fits_as_from_a_file(from_file, tmp_path, how):
    if how == "stdin":
        done = _run(["-"], tmp_path, stdin=FIT)
    else:
        done = _run(["-c", FIT], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == from_file
    assert len(from_file.splitlines()) == 2
    # __main__.__file__, hidden while the workers started, is back.
    expected = "<stdin>" if how == "stdin" else "None"
    assert f"main file: {expected}" in done.stderr


@pytest.mark.parametrize("how, where", [
    ("stdin", "('<stdin>')"),
    ("-c", "(the code given with python -c)"),
])
def test_task_defined_in_a_script_not_in_a_file_is_refused(tmp_path, how,
                                                           where):
    if how == "stdin":
        done = _run(["-"], tmp_path, stdin=TASK)
    else:
        done = _run(["-c", TASK], tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "dislib_nn.exceptions.BackendError: the local backend's workers "
        "import the script that started the program to find the tasks it "
        f"defines, as COMPSs workers do, and this one {where} is not a "
        f"file they can import: task inc() is defined in it."), last
    assert "they travel by value" in last
    # Refused at the call: the task never ran.
    assert not (tmp_path / "ran").exists()
