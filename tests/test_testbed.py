"""benchmarks/testbed.py and benchmarks/_ddp.py, run small.

Building a testbed needs root and network namespaces; those tests skip
with the testbed's own reason where it cannot run. Each test uses a
prefix of its own, so parallel runs never meet, and removes whatever
that prefix left, even when it fails. No time or speed is asserted.
"""

import functools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid

import pytest

from tests._modules import BENCHMARKS, load_file

# Every test here starts new Python processes: `make test-fast` leaves
# them out (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_python")

SCRIPT = os.path.join(BENCHMARKS, "testbed.py")


def _load(name):
    return load_file(os.path.join(BENCHMARKS, f"{name}.py"),
                     f"_benchmarks_{name}")


testbed = _load("testbed")


@functools.lru_cache(maxsize=None)
def _reason():
    return testbed.unavailable_reason()


@pytest.fixture
def prefix():
    reason = _reason()
    if reason:
        pytest.skip(f"no testbed here: {reason}")
    name = "t" + uuid.uuid4().hex[:7]
    yield name
    testbed.cleanup(name)               # whatever the test left


def _run(prefix, *options, command=(), timeout=120):
    argv = [sys.executable, SCRIPT, "--prefix", prefix, *options]
    if command:
        argv += ["--", *command]
    return subprocess.run(argv, capture_output=True, text=True,
                          timeout=timeout)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _started_pids(stderr):
    return [int(p) for p in re.findall(r"\(pid (\d+)\)", stderr)]


def _assert_nothing_left(prefix, pids=()):
    assert testbed.namespaces_with_prefix(prefix) == []
    assert [p for p in pids if _alive(p)] == []


_CHECK_DASK = r"""
import json, os, sys
from distributed import Client, get_worker
nodes = os.environ["TESTBED_NODES"].split(",")
with Client(os.environ["DISLIB_NN_DASK_ADDRESS"], timeout=30) as client:
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:
        info = client.scheduler_info()
    hosts = sorted(w["host"] for w in info["workers"].values())
    doubled, where = client.submit(
        lambda x: (2 * x, get_worker().address), 21).result(timeout=30)
print(json.dumps({"hosts": hosts, "nodes": nodes, "doubled": doubled,
                  "where": where,
                  "backend": os.environ["DISLIB_NN_BACKEND"]}))
sys.exit(0 if hosts == sorted(nodes) and doubled == 42 else 1)
"""


def test_dask_workers_on_the_nodes_run_a_task(prefix):
    pytest.importorskip("distributed")
    done = _run(prefix, "--nodes", "2", "--dask", "--no-measure",
                command=[sys.executable, "-c", _CHECK_DASK])
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.splitlines()[0])
    assert seen["hosts"] == ["10.213.0.2", "10.213.0.3"] == seen["nodes"]
    assert seen["doubled"] == 42 and seen["backend"] == "dask"
    assert seen["where"].split("//")[1].split(":")[0] in seen["nodes"]
    pids = _started_pids(done.stderr)
    assert len(pids) == 3               # the scheduler and two workers
    _assert_nothing_left(prefix, pids)


def test_a_failing_command_exit_code_propagates(prefix):
    done = _run(prefix, "--nodes", "1", "--no-measure",
                command=[sys.executable, "-c", "import sys; sys.exit(5)"])
    assert done.returncode == 5, done.stderr
    assert "the command exited 5" in done.stdout
    _assert_nothing_left(prefix)


def _pids_in_namespaces(prefix):
    return [p for ns in testbed.namespaces_with_prefix(prefix)
            for p in map(int, subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True,
                text=True).stdout.split())]


def test_sigterm_while_the_command_runs_removes_everything(prefix, tmp_path):
    pytest.importorskip("distributed")
    started = tmp_path / "started"
    command = [sys.executable, "-c",
               "import os, sys, time; open(sys.argv[1], 'w').write("
               "str(os.getpid())); time.sleep(300)", str(started)]
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, "--prefix", prefix, "--nodes", "2",
         "--dask", "--no-measure", "--", *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not (started.exists() and started.read_text()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.1)
        inside = _pids_in_namespaces(prefix)     # workers' children too
        assert int(started.read_text()) in inside
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    pids = _started_pids(err)
    assert len(pids) == 3
    _assert_nothing_left(prefix, pids + inside)


@pytest.mark.parametrize("option, value", [
    ("--nodes", "0"), ("--nodes", "two"), ("--rate", "fast"),
    ("--burst", "1k"), ("--prefix", "Bad-One"), ("--queue", "0ms")])
def test_bad_arguments_exit_2_naming_the_argument(option, value):
    done = subprocess.run([sys.executable, SCRIPT, option, value],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"argument {option}: " in done.stderr and value in done.stderr


@pytest.mark.parametrize("param, value, message", [
    ("n_nodes", 0, r"The 'n_nodes' parameter of Testbed must be an int in "
                   r"the range \[1, 253\]; got 0"),
    ("rate", "fast", r"The 'rate' parameter of Testbed must be 'none' or "
                     r"a rate .*; got 'fast'")])
def test_bad_parameters_raise_naming_the_parameter(param, value, message):
    with pytest.raises(ValueError, match=message):
        testbed.Testbed(**{param: value}).start()


def test_without_root_says_why_and_exits_2():
    if os.geteuid() != 0:
        done = subprocess.run([sys.executable, SCRIPT], capture_output=True,
                              text=True, timeout=60)
    elif shutil.which("setpriv"):
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, SCRIPT], capture_output=True, text=True,
            timeout=60)
    else:
        pytest.skip("root, and no setpriv to drop it")
    assert done.returncode == 2
    assert done.stderr.startswith("testbed: cannot run: needs root")
    assert len(done.stderr.strip().splitlines()) == 1


_SEND_BETWEEN_NODES = r"""
import os, subprocess, sys
RECEIVE = '''
import socket, sys
srv = socket.create_server((sys.argv[1], 0))
print(srv.getsockname()[1], flush=True)
conn, got = srv.accept()[0], 0
while data := conn.recv(1 << 16):
    got += len(data)
print(got)
'''
SEND = '''
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as s:
    s.sendall(bytes(int(sys.argv[3])))
'''
ns, nodes, n = (os.environ["TESTBED_NETNS"].split(","),
                os.environ["TESTBED_NODES"].split(","), int(sys.argv[1]))
receiver = subprocess.Popen(["ip", "netns", "exec", ns[1], sys.executable,
                             "-c", RECEIVE, nodes[1]],
                            stdout=subprocess.PIPE, text=True)
port = receiver.stdout.readline().strip()
subprocess.run(["ip", "netns", "exec", ns[0], sys.executable, "-c", SEND,
                nodes[1], port, str(n)], check=True)
print("received", receiver.communicate()[0].strip())
"""


def test_byte_counters_count_what_nodes_send(prefix, tmp_path):
    n = 2 * 2**20
    report = tmp_path / "report.json"
    done = _run(prefix, "--nodes", "2", "--rate", "300mbit", "--json",
                str(report), command=[sys.executable, "-c",
                                      _SEND_BETWEEN_NODES, str(n)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"received {n}" in done.stdout
    assert re.search(r"testbed: throughput \S+ -> \S+: [\d.]+ Mbit/s",
                     done.stdout)
    with open(report) as f:
        report = json.load(f)
    assert report["rate"] == "300mbit"
    assert report["rate_bits_per_s"] == 300_000_000
    assert report["addresses"] == ["10.213.0.2", "10.213.0.3"]
    assert report["throughput"]["bytes"] > 0 and report["exit_code"] == 0
    moved = {row["namespace"]: row for row in report["bytes"]}
    sender, receiver = report["namespaces"]
    assert moved[sender]["tx_bytes"] >= n
    assert moved[receiver]["rx_bytes"] >= n
    assert moved[report["master_namespace"]]["tx_bytes"] < n
    _assert_nothing_left(prefix)


def test_ddp_two_ranks_follow_one_process_on_the_global_batch(prefix,
                                                               tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    ddp = _load("_ddp")
    P, b, n_train, n_test, lr = 2, 8, 256, 128, 0.05
    with testbed.Testbed(2, prefix=prefix, verbose=False) as tb:
        report = ddp.run_ddp(tb, P, model="tiny", epochs=1, batch=b, lr=lr,
                             n_train=n_train, n_test=n_test,
                             save_weights=str(tmp_path / "w"), timeout=120)
    _assert_nothing_left(prefix)
    (row,) = report["epochs"]
    assert set(row) >= {"epoch", "seconds", "nosync_seconds",
                        "test_accuracy"}
    ranks = [torch.load(tmp_path / f"w.rank{r}.pt") for r in range(P)]
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), name

    # One process, batches of P x b rows of the same permutation, the same
    # rates: the same steps DDP took.
    X, y, X_test, y_test = ddp.make_data("tiny", n_train, n_test, 0)
    model = ddp.build_model("tiny", 0)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    order, steps = ddp.epoch_order(n_train, 0, 0), n_train // (P * b)
    for k in range(steps):
        opt.param_groups[0]["lr"] = ddp.learning_rate(k, steps, lr, P,
                                                      "linear")
        rows = order[k * P * b:(k + 1) * P * b]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X[rows]), y[rows]).backward()
        opt.step()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(ranks[0][name], value, rtol=1e-5,
                                   atol=1e-6)
    assert row["test_accuracy"] == ddp.accuracy(model, X_test, y_test)
    assert sum(v["tx_bytes"] for v in report["bytes"].values()) > 0


_MERGE_FIT = r"""
import json, os, subprocess, sys
import distributed, numpy as np, torch
import dislib_nn as dnn
from dislib_nn import runtime


class Wide(torch.nn.Module):
    # About 4.2 MB of float32 weights: bytes, not queues, place tasks.
    def __init__(self, n_features_in=8, n_classes=2):
        super().__init__()
        self.a = torch.nn.Linear(n_features_in, 1024)
        self.b = torch.nn.Linear(1024, 1024)
        self.c = torch.nn.Linear(1024, n_classes)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def sent():
    # Bytes each node has sent so far.
    stats = "/sys/class/net/eth0/statistics/tx_bytes"
    return [int(subprocess.run(["ip", "netns", "exec", ns, "cat", stats],
                               capture_output=True, text=True,
                               check=True).stdout)
            for ns in os.environ["TESTBED_NETNS"].split(",")]


SAMPLES = []


class Sent(dnn.callbacks.Callback):
    def on_epoch_end(self, state, record, handle):
        SAMPLES.append(sent())


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    X = rng.normal(size=(96, 8)).astype("float32")
    y = (X[:, 0] > 0).astype(int)
    with distributed.Client(os.environ["DISLIB_NN_DASK_ADDRESS"]) as client:
        runtime.set_backend("dask", client=client)
        with distributed.get_task_stream(client=client) as stream:
            dnn.SyncEpochAveragingClassifier(
                module=Wide, n_workers=3, n_epochs=8, batch_size=32,
                random_state=0, shuffle="local", merge=sys.argv[1],
                callbacks=[("sent", Sent())]).fit(X, y)
    print(json.dumps({
        "sent": SAMPLES,
        "tasks": sorted((r["startstops"][0]["start"],
                         r["key"].rsplit("-", 1)[0], r["worker"])
                        for r in stream.data)}))
"""


def test_a_sharded_merge_runs_on_every_node_and_each_sends_its_share(
        prefix, tmp_path):
    # The tree's root receives every replica and sends the merged model
    # to every other node; sharded, each node merges one shard, where its
    # replica was trained, and sends (P - 1) / P of a model twice a round.
    # Bytes are counted at each epoch's end by a callback.
    pytest.importorskip("distributed")
    script = tmp_path / "merge_fit.py"
    script.write_text(_MERGE_FIT)
    with testbed.Testbed(3, rate="200mbit", dask=True, prefix=prefix,
                         verbose=False) as tb:
        done = tb.run([sys.executable, script, "sharded"],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                      text=True, timeout=300)
    _assert_nothing_left(prefix)
    assert done.returncode == 0, done.stdout[-3000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    merges = [w for _, name, w in run["tasks"] if name == "_merge_shard"]
    assert len(merges) == 8 * 3
    # Placement is dask's estimate (a task where its inputs cost least to
    # move, against the workers' queues): under CPU load it has put one
    # merge of a round beside another. Most rounds merge on every node.
    spread = [len(set(merges[3 * epoch:3 * epoch + 3])) for epoch in range(8)]
    assert spread.count(3) >= 6, merges
    assert set(merges) == {w for _, name, w in run["tasks"]
                           if name == "_train_epoch"}
    # Past the first rounds (the starting model fanned out), before the
    # last (the fitted model fetched): 2 x 2/3 of the 4.2 MB model per
    # node and round.
    samples = run["sent"][2:-1]
    rounds = len(samples) - 1
    per_node = [b - a for a, b in zip(samples[0], samples[-1])]
    expected = rounds * 2 * 2 / 3 * 4.2e6
    for sent in per_node:
        assert 0.75 * expected < sent < 1.3 * expected, (per_node,
                                                          expected)
