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
import subprocess
import sys
import tempfile

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


def start_compss(app, *args):
    """Start ``apps/APP`` under the emulated ``runcompss``.

    Like ``runcompss --pythonpath=$PWD``, from the app's folder, with two
    executors (the two CPUs of the emulated node). Returns a handle for
    :func:`report`; runs started together overlap (each emulated run
    executes its tasks one at a time).
    """
    return _start([sys.executable, EMULATOR, "--executors=2", app, *args],
                  f"runcompss {app}")


def start_python(app, *args):
    """Start ``apps/APP`` with plain ``python`` (the local backend)."""
    return _start([sys.executable, app, *args], f"python {app}")


def report(handle, timeout=1800):
    """The JSON report a started app printed last (it must succeed)."""
    done, what = _finish(handle, timeout)
    return _report(done, what)


def run_compss_failing(app, *args, timeout=900):
    """Run an app expected to fail: its exit code and standard error."""
    done, _ = _finish(start_compss(app, *args), timeout)
    return done.returncode, done.stderr


def _start(cmd, what):
    # Files, not pipes: runs started together are read one after the
    # other, and a full pipe would stall the others.
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, cwd=APPS, env=_clean_env(), stdout=out,
                            stderr=err, text=True)
    return proc, out, err, what


def _finish(handle, timeout):
    proc, out, err, what = handle
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(f.read())
        f.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode,
                                       *texts), what


def _clean_env():
    env = dict(os.environ)
    for name in ("DISLIB_NN_BACKEND", "DISLIB_NN_WORKERS", "PYTHONPATH",
                 "ComputingUnits", "ComputingUnitsGPUs"):
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
