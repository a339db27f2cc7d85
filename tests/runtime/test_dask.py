"""What the dask backend adds to the contract suite: how it finds its
cluster, where data stays, GPUs, and the errors.

The contract suite itself (dataflow, rules, failures) runs on dask
through the ``backend`` fixture; these tests need a cluster of their own.
"""

import os
import subprocess
import sys
import time

import pytest

from dislib_nn import runtime
from dislib_nn.exceptions import BackendError, WorkerDiedError
from dislib_nn.runtime import wait_on
from dislib_nn.runtime._dask import task_key
from tests.conftest import use_backend
from tests.runtime import tasks

# Every test here starts new Python processes: `make test-fast` leaves
# them out (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_python")

distributed = pytest.importorskip("distributed")
import dask  # noqa: E402 - installed with distributed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def cluster():
    """A cluster the tests name by its address, as a user's would be."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True,
        dashboard_address=None)
    client = distributed.Client(cluster, set_as_default=False)
    yield cluster, client
    use_backend("local")
    client.close()
    cluster.close()


def _worker_pids(client):
    return set(client.run(os.getpid).values())


def test_tasks_run_on_the_scheduler_named_by_address(cluster):
    cluster, client = cluster
    runtime.set_backend("dask", address=cluster.scheduler_address)
    try:
        assert runtime.backend_name() == "dask"
        assert runtime.n_workers() == 2
        pids = wait_on([tasks.worker_pid() for _ in range(4)])
        assert set(pids) <= _worker_pids(client)
        assert os.getpid() not in pids
    finally:
        use_backend("local")


def test_blocks_stay_on_the_workers_that_made_them(cluster):
    # Two chains over 16 MB blocks: each step runs where its block is,
    # and the master fetches only the small results it waits on.
    cluster, client = cluster
    runtime.set_backend("dask", address=cluster.scheduler_address)
    try:
        def sent():
            return sum(client.run(
                lambda dask_worker: dask_worker.transfer_outgoing_bytes_total
            ).values())
        before = sent()
        sizes = []
        for i in range(2):
            block = tasks.full(4_000_000, i)
            for _ in range(3):
                block = tasks.add(block, 1)
            sizes.append(tasks.nbytes(block))
        assert wait_on(sizes) == [16_000_000, 16_000_000]
        assert sent() - before < 1_000_000
    finally:
        use_backend("local")


def test_placed_tasks_run_on_the_worker_they_name(cluster):
    # Node k is the k-th worker by address, k modulo the workers; given
    # in the opposite order to dask's own first choice.
    cluster, client = cluster
    runtime.set_backend("dask", address=cluster.scheduler_address)
    try:
        pids = []
        for k in (1, 0, 3, 2):
            with runtime.placed(k):
                pids.append(tasks.worker_pid())
        pids = wait_on(pids)
        by_address = client.run(os.getpid)
        first, second = (by_address[a] for a in sorted(by_address))
        assert pids == [second, first, second, first]
    finally:
        use_backend("local")


def _records_of_a_fit(client, n_workers, **params):
    """The task stream of a synchronous fit of ``n_workers`` replicas on
    ``client``'s cluster (3 epochs): name -> its records, in submission
    order (the dask keys count submissions)."""
    import numpy as np
    import torch

    import dislib_nn
    rng = np.random.default_rng(0)
    X = rng.normal(size=(256, 8)).astype("float32")
    y = (X[:, 0] > 0).astype(int)
    runtime.set_backend("dask", client=client)
    try:
        with distributed.get_task_stream(client=client) as stream:
            dislib_nn.SyncEpochAveragingClassifier(
                module=torch.nn.Linear(8, 2), n_workers=n_workers,
                n_epochs=3, batch_size=32, random_state=0,
                **params).fit(X, y)
    finally:
        use_backend("local")
    return _by_task(stream.data, lambda r: r)


def _by_task(records, pick):
    """``pick(record)`` of the task stream's ``records`` of the backend's
    own tasks (not their output parts), by task name, in the order the
    tasks became ready (their keys' numbers)."""
    numbered = {}
    for r in records:
        key = task_key(r["key"])
        if key is not None:
            numbered.setdefault(key.name, []).append((key.number, pick(r)))
    return {name: [v for _, v in sorted(pairs, key=lambda p: p[0])]
            for name, pairs in numbered.items()}


def test_each_replica_trains_on_its_own_worker_every_round(cluster):
    # Replica j's training tasks are placed on the j-th worker: the
    # training tasks a round submits, in their order, run on the workers
    # in address order.
    _, client = cluster
    ran = [r["worker"] for r in _records_of_a_fit(client, 2)["_train_epoch"]]
    workers = sorted(client.run(os.getpid))
    # The first round's may be swapped: while the tasks' durations are
    # unknown, dask's work stealing may move a task whose worker is busy
    # (the placement is a preference, so that a lost worker loses no
    # task); from then on each replica's state is where it is placed.
    assert sorted(ran[:2]) == workers
    assert ran[2:] == workers * 2


def _fetched(client, since=0.0):
    """The tasks whose outputs each worker fetched from another since
    ``since`` (``time.time()``), by worker (a task's outputs are parts
    keyed "<task key>-part<i>")."""
    return {w: {key.rpartition("-part")[0] or key
                for t in log if t["start"] >= since for key in t["keys"]}
            for w, log in client.run(lambda dask_worker: list(
                dask_worker.transfer_incoming_log)).items()}


def test_blocks_are_made_on_the_worker_of_their_index(cluster, tmp_path):
    # Block i of n is made where replica i of n trains: loaded, cut
    # from an array and shuffled there.
    import numpy as np

    import dislib_nn as dnn
    _, client = cluster
    path = str(tmp_path / "x.npy")
    np.save(path, np.arange(4000, dtype=np.float32).reshape(1000, 4))
    runtime.set_backend("dask", client=client)
    try:
        with distributed.get_task_stream(client=client) as stream:
            loaded = dnn.load_npy(path, n_blocks=4)
            cut = dnn.from_array(np.ones((1000, 4), np.float32), n_blocks=2)
            shuffled = dnn.shuffle(loaded, random_state=0)
            for x in (loaded, cut, shuffled):
                wait_on([tasks.nbytes(b) for b in x.blocks])
    finally:
        use_backend("local")
    first, second = sorted(client.run(os.getpid))
    where = _by_task(stream.data, lambda r: r["worker"])
    assert where["_read_npy_rows"] == [first, first, second, second]
    assert where["_to_block"] == [first, second]
    assert where["_merge"] == [first, first, second, second]


def test_a_small_model_trains_where_its_rows_are(cluster):
    # shuffle="local" deals the blocks to the replicas anew every epoch;
    # rows that outweigh the model stay where they were made and the
    # replica goes to them: no block crosses between the workers.
    import numpy as np
    import torch

    import dislib_nn
    _, client = cluster
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2048, 64)).astype("float32")
    y = (X[:, 0] > 0).astype(int)
    runtime.set_backend("dask", client=client)
    since = time.time()
    try:
        with distributed.get_task_stream(client=client) as stream:
            x = dislib_nn.from_array(X, n_blocks=2)
            yd = dislib_nn.from_array(y, n_blocks=2)
            dislib_nn.SyncEpochAveragingClassifier(
                module=torch.nn.Linear(64, 2), n_workers=2, n_epochs=6,
                batch_size=256, random_state=0, shuffle="local").fit(x, yd)
        fetched = _fetched(client, since)
    finally:
        use_backend("local")
    keys = _by_task(stream.data, lambda r: r["key"])
    blocks, trained = set(keys["_to_block"]), keys["_train_epoch"]
    assert len(blocks) == 4 and len(trained) == 2 * 6
    assert not blocks & set().union(*fetched.values())


def _cluster_without_stealing(threads_per_worker):
    """A 2-worker LocalCluster whose scheduler steals no work, as the
    backend's own, and a client of it: ``(cluster, client)``."""
    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=threads_per_worker,
            processes=True, dashboard_address=":0")
    return cluster, distributed.Client(cluster, set_as_default=False)


def test_blocks_are_scored_and_predicted_where_they_are():
    # Each block's score and prediction run on the worker holding the
    # block, and the model goes to them, even while the second block's
    # worker is busy and the first idle: on a scheduler that steals no
    # work, as the backend's LocalCluster (docs/hpc.md, "Work
    # stealing"), a queued task waits for the worker holding its inputs.
    import numpy as np
    import torch

    import dislib_nn
    cluster, client = _cluster_without_stealing(threads_per_worker=1)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(256, 8)).astype("float32")
    y = (X[:, 0] > 0).astype(int)
    runtime.set_backend("dask", client=client)
    try:
        clf = dislib_nn.SyncEpochAveragingClassifier(
            module=torch.nn.Linear(8, 2), n_workers=2, n_epochs=1,
            batch_size=32, random_state=0).fit(X, y)
        x = dislib_nn.from_array(X, n_blocks=2)
        yd = dislib_nn.from_array(y, n_blocks=2)
        wait_on([tasks.nbytes(b) for b in x.blocks + yd.blocks])
        first, second = sorted(client.run(os.getpid))
        with distributed.get_task_stream(client=client) as stream:
            with runtime.placed(1, of=2):
                busy = tasks.after(0, 1.5)
            score = clf.score(x, yd)
            labels = clf.predict(x).collect()
            wait_on(busy)
        # The same model on the same rows, given as arrays.
        same = (clf.score(X, y), clf.predict(X))
    finally:
        use_backend("local")
        client.close()
        cluster.close()
    where = _by_task(stream.data, lambda r: r["worker"])
    assert where["_score_block"] == [first, second]
    assert where["_predict_block"] == [first, second]
    assert score == same[0]
    np.testing.assert_array_equal(labels, same[1])


def test_replicas_sharing_a_worker_merge_there_first():
    # 4 replicas on 2 workers of 2 threads (a node with two GPUs, say):
    # replicas 0 and 1 train on the first worker, 2 and 3 on the second,
    # and each pair merges where it trained, so one model a round
    # crosses to the tree's root. The placement is a preference, which
    # dask's work stealing may override to balance a loaded machine
    # (once in three CI runs here): this cluster steals nothing, so what
    # is checked is where the fit places its tasks.
    cluster, client = _cluster_without_stealing(threads_per_worker=2)
    try:
        ran = _records_of_a_fit(client, 4, sync_every=1)
        first, second = sorted(client.run(os.getpid))
        fetched = _fetched(client)
    finally:
        client.close()
        cluster.close()
    # Rounds 2 and 3 (the first's may be moved: see the test above).
    assert [r["worker"] for r in ran["_train_epoch"][4:]] == \
        [first, first, second, second] * 2
    # No replica of those rounds crossed: each pair, (0, 1) and (2, 3),
    # merged where both trained. The root ran where replica 0 trained
    # and the other pair's sum came to it (to the root, or to a part of
    # the pair's output run there).
    replicas = {r["key"] for r in ran["_train_epoch"][4:]}
    assert not replicas & (fetched[first] | fetched[second])
    # A task's key is numbered when it is ready to run, so a round's two
    # pairs come in either order, and its root after them.
    merges = ran["_merge_pair"][3:]
    for k in (0, 3):
        pairs, root = merges[k:k + 2], merges[k + 2]
        by_worker = {r["worker"]: r for r in pairs}
        assert set(by_worker) == {first, second}
        assert root["worker"] == first
        assert by_worker[second]["key"] in fetched[first]


def test_gpu_tasks_run_only_on_workers_that_advertise_a_gpu():
    scheduler = distributed.LocalCluster(n_workers=0, processes=True,
                                         dashboard_address=None)
    workers = [subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker",
         scheduler.scheduler_address, "--nthreads", "1", "--no-dashboard",
         "--no-nanny", *extra], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
        for extra in ([], ["--resources", "GPU=1"])]
    try:
        client = distributed.Client(scheduler, set_as_default=False)
        client.wait_for_workers(2, timeout=120)
        runtime.set_backend("dask", client=client)
        assert runtime.gpus_per_task() == 1
        assert runtime.tasks_see_gpus()
        pids = set(wait_on([tasks.gpu_worker_pid() for _ in range(4)]))
        assert pids == {workers[1].pid}
        # Tasks without a GPU declaration still run anywhere.
        assert set(wait_on([tasks.worker_pid() for _ in range(8)])) <= {
            w.pid for w in workers}
        client.close()
    finally:
        use_backend("local")
        for worker in workers:
            worker.kill()
            worker.wait()
        scheduler.close()


def test_a_killed_worker_fails_its_task_with_worker_died_error():
    use_backend("dask")
    try:
        with pytest.warns(Warning, match="attempt 2 of 2"):
            fut = tasks.die()
            with pytest.raises(WorkerDiedError, match=r"task die\(\)"):
                wait_on(fut)
        # The cluster replaced the worker and keeps working.
        assert wait_on([tasks.add(i, 1) for i in range(4)]) == [1, 2, 3, 4]
    finally:
        use_backend("local")


def test_the_local_cluster_s_workers_keep_glibc_s_malloc_thresholds():
    # dask's nannies set MALLOC_TRIM_THRESHOLD_ by default, which slows
    # training steps (docs/hpc.md, "Workers' malloc"): the LocalCluster
    # the backend starts leaves it out, even after another cluster's
    # nanny has set it in this process (the module's `cluster`).
    runtime.set_backend("dask", n_workers=1)
    try:
        assert wait_on(tasks.environment_variable(
            "MALLOC_TRIM_THRESHOLD_")) is None
        assert wait_on(tasks.environment_variable("OMP_NUM_THREADS")) == "1"
    finally:
        use_backend("local")


def test_the_local_cluster_s_scheduler_leaves_placed_tasks_in_place(
        cluster):
    # Work stealing would move a placed task from a busy worker to an
    # idle one, its rows with it (docs/hpc.md, "Work stealing"): the
    # LocalCluster the backend starts has none, while a cluster
    # started with dask's defaults (the module's `cluster`) steals.
    runtime.set_backend("dask", n_workers=1)
    try:
        ours = wait_on(tasks.dask_scheduler_extensions())
    finally:
        use_backend("local")
    assert "stealing" not in ours and "amm" in ours
    _, client = cluster
    assert "stealing" in client.run_on_scheduler(
        lambda dask_scheduler: list(dask_scheduler.extensions))


def test_the_current_client_is_used_when_no_backend_was_chosen():
    code = (
        "import os\n"
        "from distributed import Client, LocalCluster\n"
        "from dislib_nn import runtime\n"
        "from tests.runtime import tasks\n"
        "if __name__ == '__main__':\n"
        "    print(runtime.backend_name())\n"
        "    cluster = LocalCluster(n_workers=1, processes=True,\n"
        "                           dashboard_address=None)\n"
        "    with Client(cluster) as client:\n"
        "        print(runtime.backend_name())\n"
        "        pid = runtime.wait_on(tasks.worker_pid())\n"
        "        print(pid in client.run(os.getpid).values())\n"
        "    print(runtime.backend_name())\n"
        "    cluster.close()\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("DISLIB_NN_BACKEND", None)
    script = os.path.join(ROOT, ".pytest_dask_current.py")
    with open(script, "w") as f:
        f.write(code)
    try:
        done = subprocess.run([sys.executable, script], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["local", "dask", "True", "local"]


@pytest.mark.parametrize("kwargs, match", [
    ({"name": "local", "address": "tcp://h:8786"},
     "address is a setting of the dask backend, not of local. Got "
     "address='tcp://h:8786'"),
    ({"name": "dask", "address": "tcp://h:8786", "scheduler_file": "s.json"},
     "give the dask backend one of address, scheduler_file or client. Got "
     "address and scheduler_file"),
    ({"name": "dask", "address": ""},
     "address must be a non-empty str. Got '' instead"),
])
def test_set_backend_dask_errors(kwargs, match):
    use_backend("local")
    with pytest.raises(BackendError, match=match):
        runtime.set_backend(**kwargs)
    assert runtime.backend_name() == "local"


def test_a_scheduler_out_of_reach_is_an_error_naming_it():
    import dask
    address = "tcp://127.0.0.1:9"       # the discard port: nobody listens
    runtime.set_backend("dask", address=address)
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            with pytest.raises(BackendError,
                               match=f"could not reach the scheduler at "
                                     f"address='{address}'"):
                wait_on(tasks.add(1, 2))
    finally:
        use_backend("local")


def test_an_argument_the_workers_cannot_import_names_its_module(
        cluster, tmp_path, monkeypatch):
    # A class from a module beside the script, on the master's path but
    # not the workers', travels by reference: the task's error names the
    # module and says how to reach it.
    import importlib
    import uuid
    _, client = cluster
    name = "dnn_master_only_" + uuid.uuid4().hex[:8]
    (tmp_path / f"{name}.py").write_text("class Box:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    box = importlib.import_module(name).Box()
    runtime.set_backend("dask", client=client)
    try:
        with pytest.raises(ModuleNotFoundError) as info:
            wait_on(tasks.identity(box))
    finally:
        use_backend("local")
    message = str(info.value)
    assert f"task identity() hold an object of module '{name}'" in message
    assert "PYTHONPATH" in message
