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


def run_compss(app, *args, timeout=900):
    """Run ``apps/APP`` under the emulated ``runcompss``; its JSON report.

    Like ``runcompss --pythonpath=$PWD``, from the app's folder, with two
    executors (the two CPUs of the emulated node).
    """
    env = _clean_env()
    done = subprocess.run(
        [sys.executable, EMULATOR, "--executors=2", app, *args],
        cwd=APPS, env=env, capture_output=True, text=True, timeout=timeout)
    return _report(done, f"runcompss {app}")


def run_compss_failing(app, *args, timeout=900):
    """Run an app expected to fail: its exit code and standard error."""
    done = subprocess.run(
        [sys.executable, EMULATOR, "--executors=2", app, *args],
        cwd=APPS, env=_clean_env(), capture_output=True, text=True,
        timeout=timeout)
    return done.returncode, done.stderr


def run_python(app, *args, timeout=900):
    """Run ``apps/APP`` with plain ``python`` (the local backend)."""
    done = subprocess.run(
        [sys.executable, app, *args], cwd=APPS, env=_clean_env(),
        capture_output=True, text=True, timeout=timeout)
    return _report(done, f"python {app}")


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
