"""Running an app the way ``runcompss`` does, through PyCOMPSs's own code.

The COMPSs runtime cannot be installed here, but its Python binding can
run: ``shared/compss-emulator`` (beside this repository) starts the app
with PyCOMPSs's real ``launch.py``, master-side task decorator, object
tracker and serializer, and runs every task in a real PyCOMPSs piper
worker's forked executor; only the Java engine and its C extension are
replaced. What passes here has met COMPSs's own rules: objects tracked
by ``id()``, futures ended by ``wait_on``, workers that import only the
task's module, arguments through files, Python run with ``-O``.

Tests skip, saying why, where the emulator is absent.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SHARED = os.environ.get("DISLIB_NN_SHARED",
                        os.path.join(os.path.dirname(ROOT), "shared"))
EMULATOR = os.path.join(SHARED, "compss-emulator", "run.py")
REFERENCE = os.path.join(SHARED, "pycompss-reference")
APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps")

needs_emulator = pytest.mark.skipif(
    not (os.path.isfile(EMULATOR) and os.path.isdir(REFERENCE)),
    reason=f"the COMPSs emulator and the PyCOMPSs sources are not beside "
           f"the repository ({EMULATOR}, {REFERENCE}); set "
           f"DISLIB_NN_SHARED to the folder that holds them")


def compss_command(app, *args, pythonpath=None):
    """The command line that runs ``app`` under the emulated ``runcompss``
    (with two executors: the two CPUs of the emulated node), after
    :func:`warm_bytecode`."""
    warm_bytecode()
    extra = [f"--pythonpath={pythonpath}"] if pythonpath else []
    return [sys.executable, EMULATOR, "--executors=2", *extra, app, *args]


def start_compss(app, *args):
    """Start ``apps/APP`` under the emulated ``runcompss``.

    Like ``runcompss --pythonpath=$PWD``, from the app's folder. Returns a
    handle for :func:`report`; runs started together overlap (each
    emulated run executes its tasks one at a time).
    """
    return _start(compss_command(app, *args), f"runcompss {app}")


def start_python(app, *args):
    """Start ``apps/APP`` with plain ``python`` (the local backend)."""
    return _start([sys.executable, app, *args], f"python {app}")


# The runs tests/compss checks. They take minutes of CPU and none of the
# suite's other tests needs them, so they start with the session, beside
# the rest of the suite, and their tests run last (tests/conftest.py).
# The emulator runs one task at a time: fit_app's two halves side by
# side finish sooner than one run of both.
AHEAD = {("data_app.py", "python"): ("python", "data_app.py"),
         ("data_app.py", "compss"): ("compss", "data_app.py"),
         ("fit_app.py", "python"): ("python", "fit_app.py"),
         ("fit_app.py", "compss-sync"): ("compss", "fit_app.py", "sync"),
         ("fit_app.py", "compss-async"): ("compss", "fit_app.py", "async"),
         ("raise_app.py", "compss"): ("compss", "raise_app.py")}
_ahead = {"lock": threading.Lock(), "thread": None, "handles": {},
          "stopped": False}


def start_ahead():
    """Start every run of :data:`AHEAD` in the background (once)."""
    with _ahead["lock"]:
        if _ahead["thread"] is None:
            _ahead["thread"] = threading.Thread(target=_start_ahead,
                                                daemon=True)
            _ahead["thread"].start()


def ahead(key):
    """The handle of the run ``key`` of :data:`AHEAD` (started if need be):
    for :func:`report` or :func:`failed_run`."""
    start_ahead()
    _ahead["thread"].join()
    if key not in _ahead["handles"]:
        raise AssertionError(f"the run {key} did not start: "
                             f"{_ahead.get('error', 'the session ended')}")
    return _ahead["handles"][key]


def stop_ahead():
    """Kill what still runs of :data:`AHEAD` (the session is ending)."""
    with _ahead["lock"]:
        _ahead["stopped"] = True
        thread = _ahead["thread"]
    if thread is not None:
        thread.join()
    handles = list(_ahead["handles"].values())
    for proc, _, _, _ in handles:
        if proc.poll() is None:
            proc.terminate()
    for proc, out, err, _ in handles:
        _end(proc)
        out.close()
        err.close()


def _end(proc):
    """End a run and every process it started. The emulator ends its
    run's processes on SIGTERM (its executors live in sessions of their
    own, out of reach of a kill of the run's group)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)     # what is left of the group
    except ProcessLookupError:
        pass
    proc.wait()


def _start_ahead():
    try:
        warm_bytecode()
        for key, (how, app, *args) in AHEAD.items():
            with _ahead["lock"]:
                if _ahead["stopped"]:
                    return
                _ahead["handles"][key] = (start_compss if how == "compss"
                                          else start_python)(app, *args)
    except Exception as exc:  # noqa: BLE001 - ahead() reports it
        _ahead["error"] = repr(exc)


def report(handle, timeout=1800):
    """The JSON report a started app printed last (it must succeed)."""
    done, what = _finish(handle, timeout)
    return _report(done, what)


def failed_run(handle, timeout=900):
    """A started app expected to fail: its exit code and standard error."""
    done, _ = _finish(handle, timeout)
    return done.returncode, done.stderr


def _start(cmd, what):
    # Files, not pipes: runs started together are read one after the
    # other, and a full pipe would stall the others.
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    # A session of its own: stop_ahead() kills the run's whole tree.
    proc = subprocess.Popen(cmd, cwd=APPS, env=clean_env(), stdout=out,
                            stderr=err, text=True, start_new_session=True)
    return proc, out, err, what


def _finish(handle, timeout):
    proc, out, err, what = handle
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end(proc)
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(f.read())
    return subprocess.CompletedProcess(proc.args, proc.returncode,
                                       *texts), what


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


def _report(done, what):
    if done.returncode != 0:
        raise AssertionError(
            f"{what} exited with {done.returncode}.\n--- stdout (tail)\n"
            f"{done.stdout[-3000:]}\n--- stderr (tail)\n"
            f"{done.stderr[-6000:]}")
    lines = [line for line in done.stdout.splitlines()
             if line.startswith("{")]
    if not lines:
        raise AssertionError(f"{what} printed no report:\n{done.stdout}")
    return json.loads(lines[-1])
