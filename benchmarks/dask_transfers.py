"""What crosses the links in a sharded fit on dask, with the Active Memory
Manager on and off.

Run in the testbed's master (``--dask``), from the repository root::

    python benchmarks/testbed.py --nodes 4 --rate 50mbit --dask -- \\
        python benchmarks/dask_transfers.py --runs 3

Each run fits the time-to-accuracy benchmark's sharded FedAvgM setting
(``mlp4m``, 16.8 MB; ``merge="sharded", outer_lr=0.8,
outer_momentum=0.5``) for ``--epochs`` epochs, the runs alternating
between the scheduler's Active Memory Manager on and off (``client.amm``)
on the same cluster. From every worker's own transfer log it counts the
bytes fetched, and those fetched again by a worker that had fetched
the same value before in the run (a copy the AMM dropped), with the
tasks that waited for them, and how many training tasks each worker ran
(both from the task stream). The epoch times are ``history_``'s.
``--merge tree`` fits the same setting merged by the tree instead; with
``--workers`` above the cluster's workers, replicas share workers.
"""

import argparse
import collections
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import distributed  # noqa: E402
import torch  # noqa: E402

import dislib_nn  # noqa: E402
from _ddp import build_model, make_data  # noqa: E402
from dislib_nn import runtime  # noqa: E402
from dislib_nn.runtime._dask import task_key  # noqa: E402

SETTING = {"lr_scaling": "linear", "sync_every": 1, "merge": "sharded",
           "outer_lr": 0.8, "outer_momentum": 0.5}
# --merge tree: the same fit merged by the tree (the default merge).
TREE = dict(SETTING, merge="tree")


def setting_of(args):
    """The estimator's parameters ``--merge`` chose."""
    return TREE if args.merge == "tree" else SETTING


def fit_once(client, args, data):
    """One fit; the task stream and the epochs' seconds."""
    X, y, X_test, y_test = data
    clf = dislib_nn.SyncEpochAveragingClassifier(
        module=build_model(args.model, args.seed),
        optimizer=torch.optim.SGD, optimizer__momentum=0.9, lr=0.01,
        batch_size=64, n_epochs=args.epochs, n_workers=args.workers,
        random_state=args.seed, validation_data=(X_test, y_test),
        **setting_of(args))
    with distributed.get_task_stream(client=client) as stream:
        clf.fit(X, y)
    return stream.data, [h["dur_s"] for h in clf.history_], \
        [h["valid_score"] for h in clf.history_]


def fetches(client, since):
    """``(worker, key, nbytes, start)`` of every fetch after ``since``."""
    logs = client.run(lambda dask_worker: [
        (t["start"], dict(t["keys"]))
        for t in dask_worker.transfer_incoming_log])
    return [(worker, key, nbytes, start)
            for worker, entries in logs.items()
            for start, keys in entries if start >= since
            for key, nbytes in keys.items()]


def _task_name(key):
    """The name of the task whose key, or whose output part's key, is
    ``key`` (the key itself for dask's own)."""
    parsed = task_key(key.rpartition("-part")[0] or key)
    return key if parsed is None else parsed.name


def readers(stream, worker, start):
    """The tasks on ``worker`` whose inputs were arriving at ``start``."""
    return sorted({_task_name(r["key"]) for r in stream
                   if r["worker"] == worker and any(
                       s["action"] == "transfer"
                       and s["start"] - 0.05 <= start <= s["stop"] + 0.05
                       for s in r["startstops"])})


def one_run(client, args, data, amm):
    (client.amm.start if amm else client.amm.stop)()
    since = time.time()
    stream, seconds, scores = fit_once(client, args, data)
    seen = collections.Counter()
    again, again_by = 0, collections.Counter()
    total = 0
    for worker, key, nbytes, start in sorted(fetches(client, since),
                                             key=lambda f: f[3]):
        total += nbytes
        seen[worker, key] += 1
        if seen[worker, key] > 1:
            again += nbytes
            for name in readers(stream, worker, start) or ["(no task)"]:
                again_by[name] += nbytes
    keys = [(task_key(r["key"]), r["worker"]) for r in stream]
    placed = collections.Counter(
        worker for key, worker in keys
        if key is not None and key.name == "_train_epoch")
    return {"amm": amm, "epoch_seconds": seconds, "accuracy": scores,
            "fetched_bytes": total, "fetched_again_bytes": again,
            "fetched_again_for": dict(again_by),
            "training_tasks_per_worker": sorted(placed.values())}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3,
                   help="runs with the AMM on, and as many with it off")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--model", default="mlp4m")
    p.add_argument("--merge", choices=("sharded", "tree"), default="sharded",
                   help="the sharded merge (the default), or the tree")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    X, y, X_test, y_test = make_data(args.model, 4096, 1024, args.seed)
    data = (X.numpy(), y.numpy(), X_test.numpy(), y_test.numpy())
    address = os.environ.get("DISLIB_NN_DASK_ADDRESS")
    if not address:
        p.error("run it in the testbed's master: testbed.py --dask -- ...")
    runs = []
    with distributed.Client(address) as client:
        runtime.set_backend("dask", client=client)
        for i in range(2 * args.runs):
            run = one_run(client, args, data, amm=i % 2 == 0)
            runs.append(run)
            later = run["epoch_seconds"][1:]
            print(f"AMM {'on ' if run['amm'] else 'off'}: epochs "
                  f"{' '.join(f'{s:.2f}' for s in run['epoch_seconds'])} s"
                  f" (later {sum(later) / len(later):.2f}); fetched "
                  f"{run['fetched_bytes'] / 1e6:.0f} MB, again "
                  f"{run['fetched_again_bytes'] / 1e6:.1f} MB "
                  f"{run['fetched_again_for'] or ''}; training tasks "
                  f"per worker {run['training_tasks_per_worker']}",
                  flush=True)
        client.amm.start()
    for amm in (True, False):
        mine = [r for r in runs if r["amm"] == amm]
        later = [s for r in mine for s in r["epoch_seconds"][1:]]
        again = ", ".join(f"{r['fetched_again_bytes'] / 1e6:.1f}"
                          for r in mine)
        print(f"AMM {'on ' if amm else 'off'}: later epochs "
              f"{min(later):.2f}-{max(later):.2f} s, mean "
              f"{sum(later) / len(later):.2f}; fetched again {again} MB "
              f"a run")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setting": setting_of(args), "args": vars(args),
                       "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
