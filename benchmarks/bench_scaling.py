"""Replicas from 1 to 64 on the local backend: what the master does.

A small model (MLP 32-64-4 on 256 rows per replica) trained with
``SyncEpochAveragingClassifier(n_workers=P)`` for P = 1, 2, 4, ..., 64,
one block per replica, on the local backend (a pool of one process per
core: many replicas share each core, so epoch time is not the point;
the master's work is). For each P it measures, per epoch:

- tasks submitted, by kind (training, merging, moving data, other);
- the depth of the merge tree: the longest chain of merge tasks from a
  replica to the merged model, read from the task graph as it is
  submitted (within each epoch: the root merge also reads the previous
  epoch's model, which would otherwise chain the epochs' trees);
- the master's CPU time (``time.process_time``: every thread of the
  master process, its task-submission and receiver threads included);
- the epoch's wall time.

It fits a power law to master CPU per epoch against P (slope 1 means it
grows as fast as the number of replicas) and compares the merge depth
with log2 P.

    python benchmarks/bench_scaling.py --plot docs/img/bench_scaling.png

To see the task graph it wraps the runtime engine's ``submit`` (a
private method, which a benchmark may use and a test may not). Not a
test; never imported by the package.
"""

import argparse
import importlib
import math
import os
import time

import numpy as np
import torch
from torch import nn

from _machine import print_header  # noqa: E402 - benchmarks/ is on sys.path

import dislib_nn as dnn

# The module (dislib_nn.runtime also has a variable named _engine).
_engine = importlib.import_module("dislib_nn.runtime._engine")


class SmallMLP(nn.Module):
    def __init__(self, n_features_in=32, n_classes=4, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_features_in, hidden),
                                  nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.body(x)


class TaskGraphProbe:
    """Counts submitted tasks by name and tracks merge-chain depths."""

    def __init__(self):
        self.counts = {}
        # id(future) -> (merge tasks above it, the future). The future is
        # kept so that its id is not reused by a later object.
        self.depth = {}
        self.max_depth = 0
        self._original = _engine.Engine.submit

    def __enter__(self):
        probe = self

        def submit(engine, task_fn, args, kwargs):
            returned = probe._original(engine, task_fn, args, kwargs)
            probe.record(task_fn.__qualname__, (args, kwargs), returned)
            return returned

        _engine.Engine.submit = submit
        return self

    def __exit__(self, *exc):
        _engine.Engine.submit = self._original

    def reset(self):
        self.counts, self.depth, self.max_depth = {}, {}, 0

    def record(self, name, arguments, returned):
        self.counts[name] = self.counts.get(name, 0) + 1
        if "train" in name:
            # The epoch's replicas: the merges before them are an earlier
            # epoch's tree, which the next root reads as its previous
            # model only (its fallback and outer step), not as a replica.
            self.depth.clear()
            return
        if "merge" not in name:
            return
        depth = 1 + max([self.depth.get(id(f), (0, None))[0]
                         for f in _walk(arguments)], default=0)
        for future in _walk(returned):
            self.depth[id(future)] = (depth, future)
        self.max_depth = max(self.max_depth, depth)


def _walk(obj):
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _walk(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _walk(item)
    else:
        yield obj


def kind(name):
    if "train" in name:
        return "train"
    if "merge" in name or "outer" in name:
        return "merge"
    if any(k in name for k in ("shuffle", "split", "gather", "assemble",
                               "part")):
        return "data"
    return "other"


def run(P, args, probe):
    rng = np.random.default_rng(args.seed)
    n = P * args.rows_per_replica
    X = rng.standard_normal((n, 32)).astype(np.float32)
    y = (X[:, :4].argmax(axis=1)).astype(np.int64)
    x = dnn.from_array(X, n_blocks=P)
    t = dnn.from_array(y, n_blocks=P)
    clf = dnn.SyncEpochAveragingClassifier(
        module=SmallMLP, lr=0.05, batch_size=64, n_epochs=1,
        n_workers=P, shuffle=args.shuffle, random_state=args.seed)
    clf.fit(x, t)                            # pool warm, data checked
    # Per epoch = (a fit of 1 + E epochs - a fit of 1 epoch) / E: what
    # every fit does once (checking the data, fetching the model) cancels.
    measured = []
    for n_epochs in (1, 1 + args.epochs):
        clf.set_params(warm_start=True, n_epochs=n_epochs)
        probe.reset()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        clf.fit(x, t)
        measured.append((time.process_time() - cpu0,
                         time.perf_counter() - wall0, dict(probe.counts),
                         probe.max_depth))
    (cpu1, wall1, counts1, _), (cpuE, wallE, countsE, depth) = measured
    per_kind = {}
    for name in countsE:
        extra = countsE[name] - counts1.get(name, 0)
        per_kind[kind(name)] = per_kind.get(kind(name), 0) + extra
    return {"P": P, "cpu": (cpuE - cpu1) / args.epochs,
            # Wall time differences are too noisy on a shared machine:
            # the whole (1 + E)-epoch fit per epoch, per-fit work included.
            "wall": wallE / (1 + args.epochs),
            "tasks": {k: v / args.epochs for k, v in per_kind.items()},
            "names": countsE, "depth": depth}


def slope(xs, ys):
    """Exponent b of the least-squares fit y = a * x ** b."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    Ps = [r["P"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.loglog(Ps, [r["cpu"] * 1e3 for r in rows], "-o",
                label="master CPU per epoch")
    left.loglog(Ps, [r["wall"] * 1e3 for r in rows], "-s",
                label="epoch wall time")
    ref = rows[0]["cpu"] * 1e3
    left.loglog(Ps, [ref * p for p in Ps], "k:", label="grows as P")
    left.set_xlabel("replicas P")
    left.set_ylabel("ms")
    left.legend(fontsize="small")
    right.plot(Ps, [r["depth"] for r in rows], "-o", label="merge depth")
    right.plot(Ps, [math.ceil(math.log2(p)) if p > 1 else 0 for p in Ps],
               "k:", label="ceil(log2 P)")
    right.set_xscale("log", base=2)
    right.set_xlabel("replicas P")
    right.set_ylabel("merge tasks on the longest chain")
    right.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-replicas", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--rows-per-replica", type=int, default=256)
    p.add_argument("--shuffle", default="global")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print_header("bench_scaling")
    Ps = [2 ** k for k in range(int(math.log2(args.max_replicas)) + 1)]
    rows = []
    with TaskGraphProbe() as probe:
        for P in Ps:
            rows.append(run(P, args, probe))
            r = rows[-1]
            print(f"  P={P:>3} done; tasks of a {1 + args.epochs}-epoch "
                  f"fit {r['names']}", flush=True)
    print(f"\nPer epoch (a fit of {1 + args.epochs} epochs minus a fit of "
          f"1, divided by {args.epochs}; shuffle="
          f"{args.shuffle!r}, {args.rows_per_replica} rows per replica):")
    print(f"{'P':>4}{'train':>7}{'merge':>7}{'data':>7}{'other':>7}"
          f"{'depth':>7}{'log2 P':>8}{'master CPU (ms)':>17}"
          f"{'per replica':>13}{'epoch (ms)':>12}")
    for r in rows:
        tasks = r["tasks"]
        print(f"{r['P']:>4}" + "".join(f"{tasks.get(k, 0):>7.0f}" for k in
                                       ("train", "merge", "data", "other"))
              + f"{r['depth']:>7}{math.log2(r['P']):>8.0f}"
              f"{r['cpu'] * 1e3:>17.1f}{r['cpu'] * 1e3 / r['P']:>13.2f}"
              f"{r['wall'] * 1e3:>12.1f}")
    big = [r for r in rows if r["P"] >= 4]
    print(f"\nmaster CPU per epoch grows as P^{slope([r['P'] for r in big], [r['cpu'] for r in big]):.2f} "
          f"(fit over P >= 4); epoch wall time as "
          f"P^{slope([r['P'] for r in big], [r['wall'] for r in big]):.2f}")
    depth_ok = all(r["depth"] == math.ceil(math.log2(r["P"]))
                   for r in rows)
    print(f"merge depth equals ceil(log2 P) for every P: {depth_ok}")
    print(f"Load average after: {os.getloadavg()}")
    if args.plot:
        plot(rows, args.plot)
    # The claim docs/benchmarks.md makes: a run that breaks it fails
    # (tests/test_benchmarks.py runs a small one).
    return 0 if depth_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
