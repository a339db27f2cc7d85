"""Running an app the way ``runcompss`` does, through PyCOMPSs's own code.

The COMPSs runtime cannot be installed here, but its Python binding can
run: ``shared/compss-emulator`` (beside this repository, running the
PyCOMPSs sources found as ``tests/_compss_sources`` says) starts the app
with PyCOMPSs's real ``launch.py``, master-side task decorator, object
tracker and serializer, and runs every task in a real PyCOMPSs piper
worker's forked executor; only the Java engine and its C extension are
replaced. What passes here has met COMPSs's own rules: objects tracked
by ``id()``, futures ended by ``wait_on``, workers that import only the
task's module, arguments through files, Python run with ``-O``.

Tests skip, saying why, where the emulator is absent.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

from tests._ahead import THREAD_PREFIX, RunAhead
from tests._compss_sources import EMULATOR, needs_emulator  # noqa: F401

APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TIME_OUT_APP = os.path.join(ROOT, "tests", "runtime", "scripts",
                            "time_out_app.py")


def compss_command(app, *args, pythonpath=None, concurrent=False):
    """The command line that runs ``app`` under the emulated ``runcompss``
    (with two executors: the two CPUs of the emulated node), after
    :func:`warm_bytecode`. ``concurrent`` runs ready tasks at the same
    time, as COMPSs does, and keeps the run's folder (its
    ``log/tasks.jsonl`` shows when each task ran: see :func:`task_log`);
    by default tasks run one at a time, in submission order."""
    warm_bytecode()
    extra = [f"--pythonpath={pythonpath}"] if pythonpath else []
    if concurrent:
        extra += ["--concurrent", "--keep"]
    return [sys.executable, EMULATOR, "--executors=2", *extra, app, *args]


def _command(how, app, *args):
    if how == "compss":     # like runcompss --pythonpath=$PWD
        return compss_command(app, *args)
    if how == "compss-root":    # an app whose tasks are the suite's
        return compss_command(app, *args, pythonpath=ROOT)
    if how == "compss-concurrent":
        return compss_command(app, *args, concurrent=True)
    return [sys.executable, app, *args]


# The runs tests/compss checks, from the apps' folder. They take minutes
# of CPU and none of the suite's other tests needs them, so they start
# with the session, beside the rest of the suite, and their tests run
# last (tests/conftest.py). fit_app's two halves side by side finish
# sooner than one run of both. The concurrent runs check what
# concurrency can change: the order of the asynchronous merges and of
# commutative updates, races between tasks (the synchronous results must
# not change). fit_app, the costly one, runs under the concurrent
# emulator only: a serial run orders its tasks in one of the ways a
# concurrent one may, and what it could catch alone (a result that
# depends on the order) the concurrent run's comparisons catch too.
# data_app runs in both modes.
AHEAD = {("fit_app.py", "compss-concurrent-sync"): (
             "compss-concurrent", "fit_app.py", "sync"),
         ("fit_app.py", "compss-concurrent-async"): (
             "compss-concurrent", "fit_app.py", "async"),
         ("data_app.py", "compss"): ("compss", "data_app.py"),
         ("data_app.py", "compss-concurrent"): (
             "compss-concurrent", "data_app.py"),
         ("fit_app.py", "python"): ("python", "fit_app.py"),
         ("data_app.py", "python"): ("python", "data_app.py"),
         ("raise_app.py", "compss"): ("compss", "raise_app.py"),
         # Integer ids and a file-reading Dataset of the script's own.
         ("inputs_app.py", "compss"): ("compss", "inputs_app.py"),
         ("inputs_app.py", "python"): ("python", "inputs_app.py"),
         # HDF5, Zarr and .npy/.pt shards read by the workers' tasks.
         ("loaders_app.py", "compss"): ("compss", "loaders_app.py"),
         ("loaders_app.py", "python"): ("python", "loaders_app.py"),
         # The user-written strategy of docs/writing_a_strategy.md.
         ("strategy_app.py", "compss"): ("compss", "strategy_app.py"),
         ("strategy_app.py", "sequential"): (
             "python", "strategy_app.py", "sequential"),
         # The SLURM example killed mid-fit and run again (a driver
         # script: it starts the emulated runs itself).
         ("resume_example.py", "python"): ("python", "resume_example.py"),
         # Time-outs against the real binding's (tests/runtime checks).
         ("time_out_app.py", "compss"): ("compss-root", TIME_OUT_APP)}
TIME_OUT_BACKENDS = ("local", "sequential") + (
    ("dask",) if importlib.util.find_spec("distributed") else ())
AHEAD.update({("time_out_app.py", name): ("python", TIME_OUT_APP, name)
              for name in TIME_OUT_BACKENDS})
# Runs at once: all of them would hold 30 torch processes in memory.
_JOBS = 6
_ahead = {"lock": threading.Lock(), "thread": None, "runs": None,
          "error": "the session ended first", "tmp": None, "done": {}}


def start_ahead():
    """Start every run of :data:`AHEAD` in the background (once)."""
    with _ahead["lock"]:
        if _ahead["thread"] is None:
            _ahead["runs"] = RunAhead(jobs=_JOBS, timeout=1800)
            # The kept folders of the concurrent runs, removed at the end.
            _ahead["tmp"] = tempfile.mkdtemp(prefix="dislib_nn_emulated_")
            _ahead["thread"] = threading.Thread(target=_start_ahead,
                                                name=f"{THREAD_PREFIX}-start",
                                                daemon=True)
            _ahead["thread"].start()


def _start_ahead():
    try:
        warm_bytecode()
        env = dict(clean_env(), TMPDIR=_ahead["tmp"])
        for key, run in AHEAD.items():
            _ahead["runs"].start(key, _command(*run), cwd=APPS, env=env)
    except Exception as exc:  # noqa: BLE001 - ahead() reports it
        _ahead["error"] = repr(exc)


def ahead(key):
    """The finished run ``key`` of :data:`AHEAD` (started if need be), a
    ``subprocess.CompletedProcess``."""
    start_ahead()
    _ahead["thread"].join()
    with _ahead["lock"]:
        if key not in _ahead["done"]:
            if not _ahead["runs"].started(key):
                raise AssertionError(f"the run {key} did not start: "
                                     f"{_ahead['error']}")
            _ahead["done"][key] = _ahead["runs"].result(key)
        return _ahead["done"][key]


def stop_ahead():
    """End what still runs of :data:`AHEAD` (the session is ending)."""
    with _ahead["lock"]:
        thread, runs = _ahead["thread"], _ahead["runs"]
    if thread is not None:
        thread.join()
        runs.close()
        shutil.rmtree(_ahead["tmp"], ignore_errors=True)


def task_log(done):
    """The emulator's ``log/tasks.jsonl`` of a finished run that kept its
    folder (a concurrent one), as a list of records."""
    kept = re.findall(r"tasks\.jsonl in (\S+)/log$", done.stderr, re.M)
    if not kept:
        raise AssertionError(f"the run kept no folder:\n{done.stderr[-2000:]}")
    with open(os.path.join(kept[-1], "log", "tasks.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def overlapping(records):
    """Pairs of tasks that ran at the same time on different executors,
    from :func:`task_log`'s records (each ``done`` record has the task's
    ``start``, ``end`` and ``executor``)."""
    ran = [r for r in records if r["event"] == "done"]
    return [(a["signature"], b["signature"])
            for i, a in enumerate(ran) for b in ran[i + 1:]
            if a["executor"] != b["executor"]
            and a["start"] < b["end"] and b["start"] < a["end"]]


def report(key):
    """The JSON report the run ``key`` printed last (it must succeed)."""
    done = ahead(key)
    if done.returncode != 0:
        raise AssertionError(
            f"{key} exited with {done.returncode}.\n--- stdout (tail)\n"
            f"{done.stdout[-3000:]}\n--- stderr (tail)\n"
            f"{done.stderr[-6000:]}")
    lines = [line for line in done.stdout.splitlines()
             if line.startswith("{")]
    if not lines:
        raise AssertionError(f"{key} printed no report:\n{done.stdout}")
    return json.loads(lines[-1])


_warmed = threading.Lock(), []

# What an emulated master and executor import (torch compiles its dynamo
# modules when the first optimizer is made).
_WARM_UP = ("import dislib_nn, sklearn.metrics, torch\n"
            "torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)\n")


def warm_bytecode():
    """Compile, once per test session, the bytecode ``python -O`` reads.

    runcompss runs Python with ``-O``, which loads ``.opt-1.pyc`` files:
    pip writes none, and where ``PYTHONDONTWRITEBYTECODE`` is set no run
    writes them either, so every emulated master and executor compiled
    torch from source again (8 s of CPU each, against 2 s for an import
    from bytecode). The emulated runs may write bytecode (see
    :func:`clean_env`), and this one process writes the bulk of it before
    they start side by side.
    """
    lock, done = _warmed
    with lock:
        if not done:
            try:
                subprocess.run([sys.executable, "-O", "-c", _WARM_UP],
                               env=clean_env(), cwd=APPS,
                               capture_output=True, timeout=600)
            except subprocess.TimeoutExpired:
                pass        # only a speed-up: the runs compile the rest
            done.append(True)


def clean_env():
    """The environment an emulated or plain app run gets: none of the
    suite's backend settings, and bytecode written (see
    :func:`warm_bytecode`)."""
    env = dict(os.environ)
    for name in ("DISLIB_NN_BACKEND", "DISLIB_NN_WORKERS", "PYTHONPATH",
                 "ComputingUnits", "ComputingUnitsGPUs",
                 "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    return env
