"""Ctrl-C during fit, and a master killed mid-fit: no estimator change, no
process left behind (Linux: processes are read from /proc)."""

import glob
import json
import os
import signal
import subprocess
import sys

import pytest

from tests._procs import alive, descendants, wait_for, wait_until_gone
from tests.training._paths import ROOT, SCRIPTS

SCRIPT = os.path.join(SCRIPTS, "interrupt_fit.py")

# Every test here starts new Python processes: `make test-fast` leaves
# them out (tests/conftest.py).
pytestmark = [pytest.mark.usefixtures("fresh_python"),
              pytest.mark.skipif(not os.path.isdir("/proc/self"),
                                 reason="reads processes from /proc")]


def _sigint_as_a_terminal_sends_it():
    """Ctrl-C's default in the child: a job started in the background by
    a shell without job control (a CI step run with ``&``) inherits
    SIGINT ignored, and Python then installs no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(folder, backend, case, start_method="forkserver"):
    env = dict(os.environ, PYTHONPATH=ROOT,
               DISLIB_NN_START_METHOD=start_method)
    env.pop("DISLIB_NN_BACKEND", None)
    process = subprocess.Popen(
        [sys.executable, SCRIPT, str(folder), backend, case],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=_sigint_as_a_terminal_sends_it)
    started = lambda: glob.glob(os.path.join(folder, "started-*"))  # noqa
    try:
        wait_for(lambda: started() or process.poll() is not None, 240,
                 "a training task to start")
    except AssertionError:
        process.kill()
        raise
    assert process.poll() is None, process.communicate()[1][-3000:]
    pids = {int(p.rsplit("-", 1)[1]) for p in started()}
    return process, pids


@pytest.mark.parametrize("backend, case", [
    ("local", "first"), ("local", "warm"), ("local", "partial"),
    ("sequential", "first"), ("sequential", "warm")])
def test_ctrl_c_stops_fit_and_leaves_the_estimator_as_it_was(
        tmp_path, backend, case):
    process, task_pids = _start(tmp_path, backend, case)
    pool = descendants(process.pid)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-3000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["interrupted"] and report["usable"]
    assert report["before"] == report["after"]
    if case == "first":
        assert report["after"]["attributes"] == []
    # The tasks that were running were stopped (their worker killed),
    # and nothing of the pool outlives the program.
    if backend == "local":
        assert task_pids and task_pids <= set(pool)
    assert wait_until_gone(pool, 60) == []


@pytest.mark.parametrize("start_method", ["forkserver", "fork", "spawn"])
def test_master_killed_mid_fit_leaves_no_worker(tmp_path, start_method):
    process, task_pids = _start(tmp_path, "local", "first", start_method)
    pool = descendants(process.pid)
    assert task_pids <= set(pool)
    process.kill()
    process.communicate(timeout=60)
    assert wait_until_gone(pool, 60) == []


def _fork_server(master):
    """The pid of ``master``'s fork server (multiprocessing's)."""
    found = []
    for pid in descendants(master):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read()
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == master and b"multiprocessing.forkserver" in line:
            found.append(pid)
    assert len(found) == 1, found
    return found[0]


def test_a_fork_server_that_cannot_run_still_goes_with_the_master(tmp_path):
    """The fork server is killed from outside when the master dies: even
    stopped (as it is in effect while torch's extension loads, holding
    its interpreter), it does not outlive the master, nor do the
    processes that wait for it."""
    process, _ = _start(tmp_path, "local", "first")
    pool = descendants(process.pid)
    os.kill(_fork_server(process.pid), signal.SIGSTOP)
    try:
        process.kill()
        process.communicate(timeout=60)
        assert wait_until_gone(pool, 20) == []
    finally:
        for pid in alive(pool):
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_in_wait_on_cancels_running_and_queued_tasks(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("DISLIB_NN_BACKEND", None)
    script = os.path.join(ROOT, "tests", "runtime", "scripts",
                          "interrupt_wait.py")
    process = subprocess.Popen(
        [sys.executable, script, str(tmp_path), "local"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=_sigint_as_a_terminal_sends_it)
    started = lambda: glob.glob(os.path.join(tmp_path, "started-*"))  # noqa
    wait_for(lambda: len(started()) == 2 or process.poll() is not None,
             240, "two tasks to start")
    assert process.poll() is None, process.communicate()[1][-3000:]
    workers = {int(p.split("-")[-2]) for p in started()}
    pool = descendants(process.pid)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-3000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"cancelled": [True, True, True], "left": [],
                      "usable": True}
    assert workers <= set(pool)
    assert wait_until_gone(pool, 60) == []
