"""Each strategy of dislib_nn against single-process PyTorch and DDP.

Two workloads, trained for the same epochs by every contender:

``mlp``  the synchronous benchmark's MLP (128-512-512-10, SGD lr 0.05
         momentum 0.9, batch 64) on ``make_classification`` (128
         features, 10 classes; 32 informative, 2 clusters per class).
``cnn``  a small convolutional network on synthetic 3x32x32 images
         shaped like CIFAR/CINIC: each class has its own smooth random
         colour pattern, and each image is its class pattern, randomly
         shifted and scaled, plus noise, so that accuracy means something
         and is not 100 %. Adam lr 1e-3, batch 64.

Contenders: ``single`` (a plain PyTorch loop in one process), ``ddp``
(DistributedDataParallel, gloo on 127.0.0.1, one process per worker with
one thread each, gradients all-reduced after every batch, per-rank
batch as given) and each strategy in ``STRATEGIES`` (the library's
estimators, on the local backend, one thread per worker).

It prints, per workload, a table of wall time (training only: start-up
excluded; the library's includes its per-epoch test evaluation, done by
tasks, the others' exclude theirs), median epoch time, final test
accuracy and bytes moved for weights per epoch, and saves a plot of test
accuracy against wall time (``--plot``).

    python benchmarks/bench_strategies.py --plot docs/img/bench_strategies.png

Not a test; never imported by the package.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

# benchmarks/ is on sys.path: the synchronous benchmark's MLP, the CNN,
# their data, and the single-process and DDP contenders.
from _common import (accuracy, classification_rows,  # noqa: E402
                     cnn_workload, mlp_workload, pattern_images,
                     plain_pytorch, run_ddp as ddp_contender,
                     state_bytes as _state_bytes)
from _machine import print_header  # noqa: E402

import dislib_nn as dnn

# The library's contenders: a name, an estimator class and its own
# parameters. Each strategy is one line here.
STRATEGIES = {
    "dislib_nn sync": (dnn.SyncEpochAveragingClassifier, {}),
    "dislib_nn async": (dnn.AsyncEpochAveragingClassifier, {}),
}


# ------------------------------------------------------------ workloads
WORKLOADS = {"mlp": mlp_workload(), "cnn": cnn_workload()}
# name: the data maker, (n_train, n_test, seed) -> X_train, X_test,
# y_train, y_test
DATA = {"mlp": classification_rows, "cnn": pattern_images}


def make_data(workload, n_train, n_test, seed):
    return DATA[workload](n_train, n_test, seed)


def new_model(workload, seed):
    return WORKLOADS[workload].new_model(seed)


def state_bytes(module):
    return _state_bytes(module.state_dict())


# ----------------------------------------------------------- contenders
def run_single(workload, data, args):
    X_train, X_test, y_train, y_test = data
    work = WORKLOADS[workload]
    torch.set_num_threads(args.single_threads)
    try:
        model = work.new_model(args.seed)
        spans, scores = plain_pytorch(
            model, work.new_optimizer(model), X_train, y_train, args.epochs,
            work.batch_size, args.seed,
            after_epoch=lambda m: accuracy(m, X_test, y_test, 1024))
    finally:
        torch.set_num_threads(1)
    clocks = np.cumsum([b - a for a, b in spans]).tolist()
    return {"points": list(zip(clocks, scores)), "bytes_per_epoch": 0}


def run_ddp(workload, data, args):
    out = ddp_contender(WORKLOADS[workload], data, args.workers,
                        args.epochs, args.seed, evaluate_every_epoch=True,
                        eval_chunk=1024)
    clocks = np.cumsum([b - a for a, b in out["spans"]]).tolist()
    # A ring all-reduce sends 2(P-1)/P of the gradient from each of
    # the P ranks: 2(P-1) gradients' worth in all, per step.
    return {"points": list(zip(clocks, out["epoch_acc"])),
            "bytes_per_epoch": out["grad_bytes"] * out["steps"] * 2
            * (args.workers - 1)}


def run_strategy(name, workload, data, args):
    estimator, params = STRATEGIES[name]
    X_train, X_test, y_train, y_test = data
    work = WORKLOADS[workload]
    opt, kwargs, batch = work.optimizer, work.optimizer_kwargs, \
        work.batch_size
    prefixed = {f"optimizer__{k}": v for k, v in kwargs.items() if k != "lr"}
    x_test = dnn.from_array(X_test)
    t_test = dnn.from_array(y_test)

    def build(n_epochs):
        return estimator(module=new_model(workload, args.seed),
                         optimizer=opt, lr=kwargs["lr"], n_epochs=n_epochs,
                         batch_size=batch, n_workers=args.workers,
                         random_state=args.seed,
                         validation_data=(x_test, t_test), **prefixed,
                         **params)

    build(1).fit(X_train[:512], y_train[:512])   # start the pool: untimed
    est = build(args.epochs)
    t0 = time.perf_counter()
    est.fit(X_train, y_train)
    total = time.perf_counter() - t0
    durations = [float(r["dur_s"]) for r in est.history_]
    # dur_s runs from one epoch's scalars to the next; scale them so that
    # they add up to the fit's wall time (which includes the final fetch).
    scale = total / sum(durations)
    clock, points = 0.0, []
    for record, d in zip(est.history_, durations):
        clock += d * scale
        points.append((clock, float(record["valid_score"])))
    return {"points": points,
            "bytes_per_epoch": state_bytes(est.module_) * 2 * args.workers}


# --------------------------------------------------------------- report
def run_workload(workload, args):
    t0 = time.perf_counter()
    data = make_data(workload, args.n_train[workload],
                     args.n_test[workload], args.seed)
    model = new_model(workload, args.seed)
    print(f"\n== {workload}: {model.__class__.__name__} "
          f"({state_bytes(model):,} B of state), {len(data[0]):,} train / "
          f"{len(data[1]):,} test rows of {data[0].shape[1:]}, "
          f"{args.epochs} epochs, batch {WORKLOADS[workload].batch_size} "
          f"(data made in {time.perf_counter() - t0:.1f}s)", flush=True)
    results = {}
    contenders = ["single", "ddp"] + list(STRATEGIES)
    for name in contenders:
        if name not in args.only and args.only:
            continue
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        if name == "single":
            out = run_single(workload, data, args)
        elif name == "ddp":
            out = run_ddp(workload, data, args)
        else:
            out = run_strategy(name, workload, data, args)
        out["load"] = load
        results[name] = out
        print(f"  {name:<18} done in {time.perf_counter() - t0:.1f}s "
              f"(load average before: {load:.2f}); accuracy per epoch "
              + " ".join(f"{a:.3f}" for _, a in out["points"]), flush=True)
    print(f"\n  {'contender':<18}{'wall (s)':>10}{'epoch (s)':>11}"
          f"{'test acc':>10}{'weights moved per epoch':>26}")
    for name, out in results.items():
        times = [t for t, _ in out["points"]]
        epochs = np.diff([0.0] + times)
        print(f"  {name:<18}{times[-1]:>10.2f}"
              f"{statistics.median(epochs):>11.3f}"
              f"{out['points'][-1][1]:>10.4f}"
              f"{out['bytes_per_epoch'] / 1e6:>23.1f} MB")
    return results


def plot(all_results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(all_results),
                             figsize=(5.5 * len(all_results), 4))
    axes = np.atleast_1d(axes)
    for ax, (workload, results) in zip(axes, all_results.items()):
        for name, out in results.items():
            ax.plot(*zip(*out["points"]), "-o", markersize=3, label=name)
        ax.set_xlabel("wall time (s, training only)")
        ax.set_ylabel("test accuracy")
        ax.set_title(workload)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"\nplot: {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="mlp,cnn")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--mlp-rows", type=int, default=20000,
                   help="training rows of the MLP workload (+20%% test)")
    p.add_argument("--cnn-rows", type=int, default=6000,
                   help="training images of the CNN workload (+20%% test)")
    p.add_argument("--single-threads", type=int, default=os.cpu_count(),
                   help="torch threads of the single-process contender")
    p.add_argument("--only", default="",
                   help="comma-separated contenders to run (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None, help="PNG path for the plot")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    args.only = [c for c in args.only.split(",") if c]
    args.n_train = {"mlp": args.mlp_rows, "cnn": args.cnn_rows}
    args.n_test = {k: v // 5 for k, v in args.n_train.items()}
    torch.set_num_threads(1)
    dnn.runtime.set_backend("local", n_workers=args.workers)
    print_header("bench_strategies")
    all_results = {w: run_workload(w, args)
                   for w in args.workloads.split(",")}
    print(f"\nLoad average after: {os.getloadavg()}")
    if args.plot:
        plot(all_results, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_results, f, indent=1)


if __name__ == "__main__":
    main()
