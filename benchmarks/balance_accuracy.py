"""Test accuracy of ``balance=True`` over seeds: is a loss systematic?

The workload of ``benchmarks/async_training.py`` (``make_classification``
60 000 x 128, 10 classes, 10 000 test rows; MLP 128-512-512-10; SGD lr
0.05 momentum 0.9; batch 64; 10 epochs; 2 workers on the local
backend), fitted once per seed (``random_state``; the data set is drawn
once, with seed 0) in these configurations:

``sync``            synchronous, ``balance=False`` (the reference);
``sync_even16``     synchronous, ``balance=[1, 1]``: the 8 blocks per
                    worker that balancing splits arrays into, without an
                    uneven deal;
``sync_31``         synchronous, ``balance=[3, 1]``: dealt 3:1 from the
                    first epoch (37 500 / 12 500 rows, the deal balancing
                    settles at when worker 1 is twice as slow);
``async_bal_slow``  asynchronous, ``balance=True``, worker 1 twice as
                    slow (``async_training.py``'s hook, ``HookedMLP`` in
                    ``_common.py``): the deal comes
                    from measured throughput, as in the benchmark.

The fixed deals give the rates instead of measuring them. Wall
times are printed but mean nothing here (no quiet machine needed):
accuracy does not depend on the machine's load, except for the
asynchronous configuration, whose merge order follows timings.

Prints each fit as a JSON line, then per configuration the accuracies,
their mean and standard deviation, and the mean and range of the paired
differences with ``sync`` (same seed), in points.

Run from the repository root::

    python benchmarks/balance_accuracy.py                    # 5 seeds
    python benchmarks/balance_accuracy.py --seeds 0 1 --configs sync sync_31

Not a test; never imported by the package.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

# benchmarks/ is on sys.path: async_training.py's workload and hook.
from _common import (add_mlp_arguments, classification_split,  # noqa: E402
                     hooked_estimator)
from _machine import describe  # noqa: E402

# name: (strategy, slow-down hook, estimator parameters); a list of
# rates deals by them from the first epoch (balance=[3, 1]).
CONFIGS = {
    "sync": ("sync", "none", {}),
    "sync_even16": ("sync", "none", {"balance": [1, 1]}),
    "sync_31": ("sync", "none", {"balance": [3, 1]}),
    "async_bal_slow": ("async", "slow", {"balance": True}),
}


def fit_one(name, seed, data, args):
    kind, mode, extra = CONFIGS[name]
    est = hooked_estimator(kind, mode, args, args.epochs, seed, **extra)
    t0 = time.perf_counter()
    est.fit(data[0], data[2])
    fit_s = time.perf_counter() - t0
    return {"seed": seed, "config": name,
            "acc": float(est.score(data[1], data[3])),
            "rows": est.history_[-1]["worker_samples"],
            "fit_s": round(fit_s, 1)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--configs", nargs="+", choices=sorted(CONFIGS),
                   default=["sync", "sync_31", "async_bal_slow",
                            "sync_even16"])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--n-samples", type=int, default=60_000)
    p.add_argument("--test-size", type=int, default=10_000)
    a = p.parse_args(argv)
    # The workload's other options at async_training.py's defaults.
    workload = argparse.ArgumentParser()
    add_mlp_arguments(workload)
    args = workload.parse_args(["--n-samples", str(a.n_samples),
                                "--test-size", str(a.test_size)])
    args.epochs, args.seed = a.epochs, 0
    torch.set_num_threads(1)
    print("balance_accuracy:", " ".join(sys.argv[1:]) or "(defaults)")
    print("Machine:", describe())
    print("Load average before:", " ".join(f"{v:.2f}"
                                           for v in os.getloadavg()))
    data = classification_split(args.n_samples, args.n_features,
                                args.test_size, args.seed)
    from dislib_nn.runtime import set_backend
    set_backend("local", n_workers=args.workers, threads_per_worker=1)
    acc = {}
    for seed in a.seeds:
        for name in a.configs:
            r = fit_one(name, seed, data, args)
            acc.setdefault(name, []).append(r["acc"])
            print(json.dumps(r), flush=True)
    print(f"\nTest accuracy over seeds {a.seeds}:")
    for name, values in acc.items():
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        line = (f"  {name:15s} " + ", ".join(f"{v:.4f}" for v in values)
                + f"  mean {statistics.mean(values):.4f} sd {sd:.4f}")
        if name != "sync" and "sync" in acc:
            diffs = [100 * (v - s) for v, s in zip(values, acc["sync"])]
            line += (f"  vs sync: mean {statistics.mean(diffs):+.2f} "
                     f"points (from {min(diffs):+.2f} to "
                     f"{max(diffs):+.2f})")
        print(line)
    print("Load average after:", " ".join(f"{v:.2f}"
                                          for v in os.getloadavg()))


if __name__ == "__main__":
    main()
