"""A cost model of an epoch: epoch averaging against DDP, 1 to 64 nodes.

A 2-core machine cannot show scaling to 64 GPUs, so this script projects
it. It measures three figures here, states the cluster's, and computes
the epoch time of both methods for 1..64 nodes.

Measured on this machine (``measure``):

- ``compute``: training time per sample of the benchmark workloads
  (``bench_strategies.py``'s MLP and CNN), one thread, batch 64;
- ``merge``: seconds per byte of a sample-weighted merge of two state
  dicts (what one merge task computes);
- ``task``: the local backend's cost of one task round trip.

Stated (the paper's setting, MareNostrum 5's accelerated partition;
every one is an option): 4 GPUs per node; the workload (CINIC-10's
90 000 training images at 64x64, a CNN of ``--model-mb`` MB of weights,
batch 128 per GPU); GPU throughput ``--gpu-images-per-s`` for that CNN;
NCCL's inter-node bandwidth per GPU and latency (InfiniBand NDR200:
25 GB/s), the bandwidth inside a node (NVLink); the bandwidth of COMPSs's transfers between nodes (TCP over the
same fabric, lower); COMPSs's overhead per task.

Epoch averaging with P = 4 x nodes replicas, depth d = ceil(log2 P):

    T = (N / P) t_gpu                      every replica trains its share
      + (d + 1) h                          a chain of train + d merge tasks
      + d (L + M / B_compss + M c_merge)   a merge tree, one level at a time
      + (nodes - 1) M / B_compss           the merged model reaches every node,
                                           all copies sent by one node; or
                                           ceil(log2 nodes) M / B_compss if
                                           nodes pass it on (a tree)

DDP, per step of b samples per GPU (N / (P b) steps per epoch):

    t_step = b t_gpu + (1 - overlap) t_comm,  t_comm = 2 (P-1)/P M / B_nccl
                                                       + 2 log2(P) L

(on one node, both use the bandwidth inside the node instead)

``overlap`` 0 (no overlap of the all-reduce with the backward pass) and 1
(full overlap: t_step = max(b t_gpu, t_comm)) bound it.

On this machine it also predicts the 2-worker epoch of
``bench_strategies.py`` (``--check results.json``) from the measured
figures, to show how far the model is from a measurement.

    python benchmarks/cost_model.py --plot docs/img/cost_model.png \
        --check bench_strategies.json

Not a test; never imported by the package.
"""

import argparse
import json
import os

import numpy as np

# benchmarks/ is on sys.path: the measurements and formulas live in
# _cost.py, shared with scaling_accuracy.py.
from _cost import (cluster, ddp, epoch_averaging,  # noqa: E402,F401
                   measure_compute, measure_merge, measure_task)
from _machine import print_header  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus-per-node", type=int, default=4)
    p.add_argument("--n-train", type=int, default=90000)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--model-mb", type=float, default=45.0,
                   help="bytes of weights, in MB (45: about 11M float32 "
                        "parameters, a ResNet-18-sized CNN)")
    p.add_argument("--gpu-images-per-s", type=float, default=5000.0,
                   help="training throughput of one GPU on the workload")
    p.add_argument("--bw-nccl-gbs", type=float, default=25.0,
                   help="NCCL bandwidth between nodes per GPU (GB/s)")
    p.add_argument("--bw-compss-gbs", type=float, default=2.0,
                   help="COMPSs transfer bandwidth between nodes (GB/s)")
    p.add_argument("--bw-intra-gbs", type=float, default=100.0,
                   help="bandwidth between the GPUs of one node (GB/s; "
                        "NVLink, or local copies for COMPSs)")
    p.add_argument("--latency-us", type=float, default=5.0)
    p.add_argument("--compss-task-ms", type=float, default=20.0,
                   help="COMPSs's overhead per task (scheduling, "
                        "serialisation, start)")
    p.add_argument("--max-nodes", type=int, default=64)
    p.add_argument("--check", default=None,
                   help="bench_strategies.py --json output to compare the "
                        "model with, on this machine")
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)

    print_header("cost_model")
    measured = {}
    for workload in ("mlp", "cnn"):
        measured[workload] = measure_compute(workload)
    merge_s_per_b = measure_merge()
    task_many, task_one = measure_task()
    print("\nMeasured here:")
    for workload, (t, size) in measured.items():
        print(f"  compute, {workload}: {t * 1e6:.1f} us per sample "
              f"(1 thread, batch 64); state {size:,} B")
    print(f"  merge: {merge_s_per_b * 1e9:.3f} ns per byte "
          f"({1 / merge_s_per_b / 1e9:.2f} GB/s of state)")
    print(f"  task: {task_many * 1e3:.3f} ms per task with many in flight, "
          f"{task_one * 1e3:.3f} ms one at a time (local backend)")

    if args.check:
        check(args.check, measured, merge_s_per_b, task_one)

    c = cluster(merge_s_per_b, args.gpus_per_node, args.n_train,
                args.batch, args.model_mb, args.gpu_images_per_s,
                args.bw_nccl_gbs, args.bw_compss_gbs, args.bw_intra_gbs,
                args.latency_us, args.compss_task_ms)
    nodes = [1, 2, 4, 8, 16, 32, 64]
    nodes = [n for n in nodes if n <= args.max_nodes]
    single = c["n_train"] * c["t_gpu"]
    print(f"\nProjection: {args.n_train:,} images per epoch, "
          f"{args.model_mb:g} MB of weights, {args.gpu_images_per_s:g} "
          f"images/s per GPU, batch {args.batch} per GPU, "
          f"{args.gpus_per_node} GPUs per node; NCCL {args.bw_nccl_gbs:g} "
          f"GB/s per GPU, COMPSs {args.bw_compss_gbs:g} GB/s, latency "
          f"{args.latency_us:g} us, COMPSs task {args.compss_task_ms:g} ms")
    print(f"  one GPU: {single:.1f} s per epoch")
    print(f"{'nodes':>6}{'GPUs':>6}{'epoch avg (s)':>15}{'(tree)':>8}"
          f"{'DDP (s)':>16}{'avg / DDP':>18}{'avg vs 1 GPU':>14}")
    rows = []
    for n in nodes:
        ea, tree = epoch_averaging(n, c), epoch_averaging(n, c, tree=True)
        lo, hi = ddp(n, c, overlap=True), ddp(n, c, overlap=False)
        rows.append((n, ea, lo, hi, tree))
        print(f"{n:>6}{n * args.gpus_per_node:>6}{ea:>15.2f}{tree:>8.2f}"
              f"{lo:>9.2f}-{hi:<6.2f}{ea / hi:>9.2f}-{ea / lo:<8.2f}"
              f"{100 * (1 - ea / single):>13.1f}%")
    print(f"Load average after: {os.getloadavg()}")
    if args.plot:
        plot(rows, single, args)


def check(path, measured, merge_s_per_b, task_s):
    """Predict the 2-worker epochs of bench_strategies on this machine."""
    with open(path) as f:
        results = json.load(f)
    print("\nThe model against bench_strategies.py on this machine (2 "
          "workers, 1 thread each; median epoch, s):")
    for workload, contenders in results.items():
        n_train = {"mlp": 20000, "cnn": 6000}[workload]
        t, size = measured[workload]
        P = 2
        # Epoch averaging: half the data each, 2 train + 1 merge tasks
        # on a chain, plus the same test evaluation the benchmark does
        # (forward only: about a third of a training step per sample).
        predicted = {"dislib_nn sync": n_train / P * t + 2 * task_s
                     + size * merge_s_per_b + n_train / 5 / P * t / 3}
        for name, out in contenders.items():
            times = [pt[0] for pt in out["points"]]
            median = float(np.median(np.diff([0.0] + times)))
            guess = predicted.get(name)
            if name == "single":
                guess = n_train * t
            text = f"{guess:.2f}" if guess is not None else "-"
            print(f"  {workload} {name:<18} measured {median:.2f}, "
                  f"model {text}")


def plot(rows, single, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    nodes = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.loglog(nodes, [r[1] for r in rows], "-o",
              label="epoch averaging (model sent by one node)")
    ax.loglog(nodes, [r[4] for r in rows], "--o", color="C0",
              label="epoch averaging (model passed on in a tree)")
    ax.fill_between(nodes, [r[2] for r in rows], [r[3] for r in rows],
                    alpha=0.3, color="C1",
                    label="DDP (full overlap .. no overlap)")
    ax.loglog(nodes, [single / (n * args.gpus_per_node) for n in nodes],
              "k:", label="perfect scaling from one GPU")
    ax.set_xlabel(f"nodes ({args.gpus_per_node} GPUs each)")
    ax.set_ylabel("projected epoch time (s)")
    ax.set_title(f"{args.model_mb:g} MB model, {args.n_train:,} images, "
                 f"{args.gpu_images_per_s:g} img/s per GPU; NCCL "
                 f"{args.bw_nccl_gbs:g} GB/s, COMPSs {args.bw_compss_gbs:g} "
                 f"GB/s", fontsize="small")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=100)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
