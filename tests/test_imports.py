"""What importing dislib_nn does: lazy public names, lean workers.

A worker (a local-backend process or a COMPSs executor) imports the
modules of the tasks it runs; none of them may pull in scikit-learn or
matplotlib, which only the master's estimators and plots need. Checked
in fresh processes, where nothing else imported them first.
"""

import json
import os
import subprocess
import sys

import pytest
import sklearn.exceptions

import dislib_nn
import dislib_nn.data
import dislib_nn.exceptions
import dislib_nn.training
from tests.training._models import MLP

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("sklearn", "matplotlib")

# The modules that define the tasks of a fit, and the local worker loop.
TASK_MODULES = [
    "dislib_nn.runtime._worker",
    "dislib_nn.training.tasks._train",
    "dislib_nn.training.tasks._torch_loop",
    "dislib_nn.training.tasks._blocks",
    "dislib_nn.training.tasks._batchnorm",
    "dislib_nn.training.strategies._sync",
    "dislib_nn.training.strategies._async",
    "dislib_nn.training.tasks._snapshot",
    "dislib_nn.data._tasks",
]


def _python(args, cwd=None, **env_vars):
    env = dict(os.environ, PYTHONPATH=ROOT, **env_vars)
    env.pop("DISLIB_NN_BACKEND", None)
    done = subprocess.run([sys.executable] + args, capture_output=True,
                          text=True, env=env, cwd=cwd or ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_public_names_are_those_of_the_subpackages():
    expected = (set(dislib_nn.data.__all__)
                | set(dislib_nn.training.__all__) | {"plot_history"})
    assert set(dislib_nn.__all__) == expected
    assert len(dislib_nn.__all__) == len(expected)
    for name in dislib_nn.__all__:
        owner = (dislib_nn.data if name in dislib_nn.data.__all__
                 else dislib_nn.training if name != "plot_history"
                 else dislib_nn.plot)
        assert getattr(dislib_nn, name) is getattr(owner, name), name
    assert set(dislib_nn.__all__) <= set(dir(dislib_nn))
    assert {"runtime", "data", "training", "exceptions", "__version__"} \
        <= set(dir(dislib_nn))


def test_from_import_and_star_import():
    from dislib_nn import DsTensor, SyncEpochAveragingClassifier
    assert SyncEpochAveragingClassifier.__module__ == \
        "dislib_nn.training._estimators"
    assert DsTensor is dislib_nn.data.DsTensor
    namespace = {}
    exec("from dislib_nn import *", namespace)
    assert set(dislib_nn.__all__) <= set(namespace)
    assert dislib_nn.runtime.set_backend is not None


@pytest.mark.parametrize("module", [dislib_nn, dislib_nn.training,
                                    dislib_nn.exceptions])
def test_unknown_attribute_is_an_attribute_error(module):
    with pytest.raises(AttributeError,
                       match=f"module '{module.__name__}' has no attribute "
                             f"'no_such_name'"):
        module.no_such_name


def test_not_fitted_error_is_scikit_learns():
    from dislib_nn.exceptions import NotFittedError
    assert NotFittedError is sklearn.exceptions.NotFittedError
    assert "NotFittedError" in dir(dislib_nn.exceptions)
    est = dislib_nn.SyncEpochAveragingClassifier(module=MLP)
    with pytest.raises(sklearn.exceptions.NotFittedError):
        est.predict([[0.0, 0.0, 0.0, 0.0]])


def test_import_has_no_side_effects(fresh_python):
    code = (
        "import json, os, sys, threading\n"
        "env, threads = dict(os.environ), threading.active_count()\n"
        "import dislib_nn\n"
        "import multiprocessing\n"
        "print(json.dumps({'env': dict(os.environ) == env,\n"
        "    'threads': threading.active_count() == threads,\n"
        "    'children': len(multiprocessing.active_children()),\n"
        f"    'heavy': [m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r}]}}))\n")
    assert _python(["-c", code]) == {"env": True, "threads": True,
                                     "children": 0, "heavy": []}


def test_task_modules_import_neither_sklearn_nor_matplotlib(fresh_python):
    # As a COMPSs executor does: a fresh process imports the task's
    # module, nothing else.
    code = (
        "import importlib, json, sys\n"
        "pulled = {}\n"
        f"for name in {TASK_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        f"    pulled[name] = [m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r}]\n"
        "print(json.dumps(pulled))\n")
    pulled = _python(["-c", code])
    assert pulled == {name: [] for name in TASK_MODULES}


FIT_AND_ASK = '''
import os
import sys
import time

import numpy as np
from torch import nn

import dislib_nn as dnn
from dislib_nn.runtime import task, wait_on


class Net(nn.Module):
    def __init__(self, n_features_in=4, n_outputs=2):
        super().__init__()
        self.lin = nn.Linear(n_features_in, n_outputs)

    def forward(self, x):
        return self.lin(x)


@task(returns=1)
def loaded(folder, n):
    # Waits until n of these run at once: on an n-worker pool, each on
    # its own worker. The deadline only keeps a broken pool from hanging.
    open(os.path.join(folder, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 300
    while len(os.listdir(folder)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return [os.getpid(), sorted(m for m in sys.modules
                                if m.split(".")[0] in ("sklearn",
                                                       "matplotlib"))]


if __name__ == "__main__":
    import json
    folder, n = sys.argv[1], int(sys.argv[2])
    rng = np.random.RandomState(0)
    x = rng.randn(32, 4).astype("float32")
    dnn.SyncEpochAveragingClassifier(
        module=Net, n_epochs=2, n_workers=n, batch_size=8,
        random_state=0).fit(x, (x[:, 0] > 0).astype("int64")).predict(x)
    dnn.AsyncEpochAveragingRegressor(
        module=Net, n_epochs=2, n_workers=n, batch_size=8,
        random_state=0).fit(x, x[:, :2]).predict(x)
    print(json.dumps({"master": "sklearn" in sys.modules,
                      "workers": wait_on([loaded(folder, n)
                                          for _ in range(n)])}))
'''


def test_workers_that_trained_and_merged_import_no_sklearn(
        fresh_python, tmp_path):
    script = tmp_path / "fit_and_ask.py"
    script.write_text(FIT_AND_ASK)
    folder = tmp_path / "probes"
    folder.mkdir()
    got = _python([str(script), str(folder), "2"], cwd=tmp_path,
                  DISLIB_NN_WORKERS="2")
    assert got["master"]        # the estimators did use scikit-learn
    pids = [pid for pid, _ in got["workers"]]
    assert len(set(pids)) == 2, got
    assert [heavy for _, heavy in got["workers"]] == [[], []]
