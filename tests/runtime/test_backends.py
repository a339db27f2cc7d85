"""Choosing a backend, the compss adapter, and a script's own tasks."""

import json
import os
import subprocess
import sys

import pytest

from dislib_nn import runtime
from dislib_nn.exceptions import BackendError
from tests._compss_sources import PYCOMPSS, needs_sources
from tests.conftest import use_backend
from tests.runtime import tasks

SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _run(script, *args, env=None):
    full_env = dict(os.environ)
    full_env.pop("DISLIB_NN_BACKEND", None)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + ([env.pop("PYTHONPATH")] if env and "PYTHONPATH" in env
                  else []))
    full_env.update(env or {})
    done = subprocess.run([sys.executable, os.path.join(SCRIPTS, script),
                           *args], capture_output=True, text=True,
                          env=full_env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_script_tasks_in_main_give_the_same_results_on_both_backends(
        fresh_python):
    local = _run("graph_app.py", "local")
    sequential = _run("graph_app.py", "sequential")
    assert local == sequential
    assert local["acc"]["n"] == 5
    assert local["tree"] == pytest.approx(sum(range(5)) * 49_999 * 50_000
                                          / 2)


def test_script_classes_reach_tasks_only_by_value(fresh_python):
    local = _run("main_globals.py", "local")
    sequential = _run("main_globals.py", "sequential")
    for report in (local, sequential):
        assert "the class Doubler, defined in the script being run " \
               "(__main__)" in report["by_reference"]
        assert "by_value(fn)" in report["by_reference"]
        assert report["by_value"] == 6 and report["lambda_by_value"] == 4
        # The estimators send the script's module class by value.
        assert report["fitted"] == 2
    assert local["weights"] == pytest.approx(sequential["weights"],
                                             rel=1e-6)
    assert local["score"] == sequential["score"]


@needs_sources
def test_pycompss_installed_but_outside_the_runtime_means_local(fresh_python):
    # The real binding importable, but no runcompss: the local backend.
    report = _run("outside_compss.py",
                  env={"PYTHONPATH": PYCOMPSS})
    assert report["backend"] == "local"
    assert report["pycompss"].startswith(PYCOMPSS)


@pytest.mark.parametrize("value", ["mpi", "LOCALL"])
def test_bad_backend_environment_variable(fresh_python, value):
    env = dict(os.environ, DISLIB_NN_BACKEND=value)
    done = subprocess.run([sys.executable, "-c", "import dislib_nn.runtime"],
                          capture_output=True, text=True, env=env)
    assert done.returncode != 0
    assert "DISLIB_NN_BACKEND must be one of local, sequential, compss, dask" \
        in done.stderr


def test_compss_environment_variable_outside_compss(fresh_python):
    env = dict(os.environ, DISLIB_NN_BACKEND="compss")
    done = subprocess.run([sys.executable, "-c", "import dislib_nn.runtime"],
                          capture_output=True, text=True, env=env)
    assert "not running inside the COMPSs runtime" in done.stderr


def test_workers_environment_variable(fresh_python):
    env = dict(os.environ, DISLIB_NN_WORKERS="3", DISLIB_NN_BACKEND="local")
    done = subprocess.run(
        [sys.executable, "-c",
         "from dislib_nn import runtime; print(runtime.n_workers())"],
        capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "3"


def test_importing_starts_no_process(fresh_python):
    code = ("import multiprocessing, dislib_nn;"
            "print(len(multiprocessing.active_children()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True)
    assert done.stdout.strip() == "0"


@pytest.mark.parametrize("kwargs, match", [
    ({"name": "gpu"}, "backend must be one of local, sequential, compss, dask. "
                      "Got 'gpu'"),
    ({"name": "local", "n_workers": 0}, "n_workers must be an int >= 1. "
                                        "Got 0"),
    ({"name": "local", "threads_per_worker": 1.5},
     "threads_per_worker must be an int >= 1. Got 1.5"),
    ({"name": "local", "start_method": "thread"},
     "start_method must be one of forkserver, fork, spawn. Got 'thread'"),
    ({"name": "compss"}, "cannot switch from the local backend to compss"),
])
def test_set_backend_errors(kwargs, match):
    use_backend("local")
    with pytest.raises(BackendError, match=match):
        runtime.set_backend(**kwargs)
    assert runtime.backend_name() == "local"


def test_backend_name_and_workers():
    use_backend("sequential")
    assert runtime.backend_name() == "sequential"
    assert runtime.n_workers() == 1
    use_backend("local")
    assert runtime.backend_name() == "local"
    assert runtime.n_workers() == 2


def test_futures_keep_their_backend():
    use_backend("local")
    fut = tasks.add(1, 2)
    use_backend("sequential")
    with pytest.raises(BackendError, match="belongs to the local backend"):
        tasks.add(fut, 1)
    # Waiting still works: the future's own pool is still there.
    assert runtime.wait_on(fut) == 3
    use_backend("local")


def test_shutdown_stops_the_pool_and_the_next_task_starts_one():
    use_backend("local")
    assert runtime.wait_on(tasks.add(1, 2)) == 3
    assert runtime.started()
    runtime.shutdown()
    assert not runtime.started()
    assert runtime.backend_name() == "local"
    assert runtime.wait_on(tasks.add(2, 2)) == 4
    assert runtime.started()
