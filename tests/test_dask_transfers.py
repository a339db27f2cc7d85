"""benchmarks/dask_transfers.py on a LocalCluster of two worker processes
with the tiny model, as its runs on the testbed count: the fits with the
Active Memory Manager on and off, sharded and by the tree (four replicas
on the two workers), and what each reports about itself. No time is
asserted."""

import json
import os
import subprocess
import sys

import pytest

from tests._modules import BENCHMARKS

# It starts new Python processes: `make test-fast` leaves it out.
pytestmark = pytest.mark.usefixtures("fresh_python")


@pytest.mark.parametrize("merge, replicas", [("sharded", 2), ("tree", 4)])
def test_the_amm_changes_no_result_and_every_training_task_is_counted(
        tmp_path, fresh_python, merge, replicas):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "transfers.json"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        env = dict(fresh_python,
                   DISLIB_NN_DASK_ADDRESS=cluster.scheduler_address)
        done = subprocess.run(
            [sys.executable, os.path.join(BENCHMARKS, "dask_transfers.py"),
             "--runs", "1", "--epochs", "2", "--workers", str(replicas),
             "--merge", merge, "--model", "tiny", "--json", str(out)],
            env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["setting"]["merge"] == merge
    runs = report["runs"]
    assert [run["amm"] for run in runs] == [True, False]
    on, off = runs
    # A synchronous fit of one seed is the same model wherever its
    # tasks ran and whatever copies the AMM dropped.
    assert on["accuracy"] == off["accuracy"]
    # Well above chance (0.25 for the tiny model's 4 classes): it learns.
    assert len(on["accuracy"]) == 2 and on["accuracy"][-1] > 0.5
    for run in runs:
        # One training task per replica a round, one round an epoch.
        assert sum(run["training_tasks_per_worker"]) == replicas * 2
        assert len(run["epoch_seconds"]) == 2
        assert 0 <= run["fetched_again_bytes"] <= run["fetched_bytes"]
        assert run["fetched_bytes"] > 0
        assert sum(run["fetched_again_for"].values()) \
            >= run["fetched_again_bytes"]
    assert "AMM on : later epochs" in done.stdout
