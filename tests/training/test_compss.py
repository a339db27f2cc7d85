"""The estimators under the pycompss API (the test double, tasks inline)."""

import json
import os
import subprocess
import sys

from tests.conftest import DOUBLE_PATH

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "compss_fit.py")


def test_fit_predict_score_through_the_pycompss_api():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, DOUBLE_PATH]),
               PYCOMPSS_DOUBLE_IN_RUNTIME="1")
    env.pop("DISLIB_NN_BACKEND", None)
    done = subprocess.run([sys.executable, SCRIPT], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["backend"] == "compss"
    assert report["epochs"] == 2 and report["finite"]
    assert report["tracked"] > 0
    assert 0 <= report["score"] <= 1
    assert report["ds_score"] == report["score"]
    assert report["ds_predict"] == [80]
    expected = {"_train_epoch": 4, "_train_epoch_gpu": 4, "_merge_pair": 1,
                "_merge_pair_with_optims": 2, "_outer_step": 2,
                "_predict_block": 1, "_score_block": 1}
    assert {k: report["returns"].get(k) for k in expected} == expected
    assert report["cpu"] == {"computing_units": "${ComputingUnits}"}
    assert report["gpu"] == {"processors": [
        {"processorType": "CPU", "computingUnits": "${ComputingUnits}"},
        {"processorType": "GPU", "computingUnits": "${ComputingUnitsGPUs}"}]}
