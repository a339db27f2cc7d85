"""Pools stop cleanly at exit, in joblib worker processes too."""

import os
import subprocess
import sys

import pytest

# Every test here starts new Python processes: `make test-fast` leaves
# them out (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_python")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")


def test_grid_search_with_joblib_workers_exits_without_thread_errors():
    # Each joblib (loky) worker starts a pool; multiprocessing's exit
    # handler in that worker used to kill the pool's workers under a
    # running receiver thread ("Invalid file descriptor: -1").
    # One worker per pool: what is checked is each pool's exit, and two
    # joblib workers with two pool workers each start six torch
    # processes on this machine's cores.
    env = dict(os.environ, PYTHONPATH=ROOT, DISLIB_NN_WORKERS="1")
    env.pop("DISLIB_NN_BACKEND", None)
    done = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "joblib_app.py")],
        capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "['lr']"
    assert "Exception in thread" not in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
