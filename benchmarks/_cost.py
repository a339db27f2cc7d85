"""The cost model's measurements and formulas, shared by the benchmarks.

``cost_model.py`` projects epoch times with these; ``scaling_accuracy.py``
multiplies them by the epochs a contender needs to reach an accuracy.
The model itself is described in ``cost_model.py``'s docstring and in
docs/benchmarks.md ("A cost model to 64 nodes").

Not a test; never imported by the package.
"""

import math
import time

import torch

from _common import (classification_rows, cnn_workload,  # noqa: E402
                     mlp_workload, pattern_images, state_bytes, train_epoch)

# name: the workload and its data maker, as in bench_strategies.py
WORKLOADS = {"mlp": (mlp_workload(), classification_rows),
             "cnn": (cnn_workload(), pattern_images)}


# ------------------------------------------------------------ measuring
def measure_compute(workload, batch=64, steps=20):
    """Seconds per training sample, one thread."""
    work, make_data = WORKLOADS[workload]
    torch.set_num_threads(1)
    X, _, y, _ = make_data(batch * steps, 8, 0)
    model = work.new_model(0)
    opt = work.new_optimizer(model)
    X, y = torch.from_numpy(X), torch.from_numpy(y)
    order = torch.arange(len(X))
    train_epoch(model, opt, X[:batch * 2], y[:batch * 2], order[:batch * 2],
                batch)                           # warm-up
    t0 = time.perf_counter()
    train_epoch(model, opt, X, y, order, batch)
    return (time.perf_counter() - t0) / len(X), state_bytes(model.state_dict())


def measure_merge(n_bytes=64 * 2**20, repeats=5):
    """Seconds per byte of state for a weighted sum of two state dicts."""
    a = {f"w{i}": torch.randn(n_bytes // 4 // 16) for i in range(16)}
    b = {k: torch.randn_like(v) for k, v in a.items()}
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        {k: a[k] * 0.25 + b[k] * 0.75 for k in a}
        best = min(best, time.perf_counter() - t0)
    return best / n_bytes


def measure_task(n=300):
    """Seconds per task round trip on the local backend."""
    import dislib_nn.runtime as rt
    from _cost_tasks import _noop
    rt.wait_on(_noop(0))                         # start the pool
    t0 = time.perf_counter()
    rt.wait_on([_noop(i) for i in range(n)])
    many = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for i in range(20):
        rt.wait_on(_noop(i))
    one = (time.perf_counter() - t0) / 20
    return many, one


# ---------------------------------------------------------- the cluster
def cluster(merge_s_per_b, gpus_per_node=4, n_train=90000, batch=128,
            model_mb=45.0, gpu_images_per_s=5000.0, bw_nccl_gbs=25.0,
            bw_compss_gbs=2.0, bw_intra_gbs=100.0, latency_us=5.0,
            compss_task_ms=20.0):
    """The constants ``c`` of the formulas, in seconds and bytes, from
    the figures in the units ``cost_model.py``'s options take (its
    defaults: the paper's setting on MareNostrum 5, InfiniBand);
    ``merge_s_per_b`` as :func:`measure_merge` gives it."""
    return {"gpus_per_node": gpus_per_node, "n_train": n_train,
            "batch": batch, "model_bytes": model_mb * 1e6,
            "t_gpu": 1 / gpu_images_per_s,
            "bw_nccl": bw_nccl_gbs * 1e9,
            "bw_compss": bw_compss_gbs * 1e9,
            "bw_intra": bw_intra_gbs * 1e9,
            "latency": latency_us * 1e-6,
            "task_s": compss_task_ms * 1e-3,
            "merge_s_per_b": merge_s_per_b}


# ------------------------------------------------------------ the model
def epoch_averaging(nodes, c, tree=False, merges=1):
    """Projected seconds of an epoch averaging epoch on ``nodes`` nodes;
    an epoch with ``merges`` merge rounds pays the task chain, the merge
    tree and the spread of the merged model that many times."""
    P = nodes * c["gpus_per_node"]
    d = math.ceil(math.log2(P)) if P > 1 else 0
    M = c["model_bytes"]
    compute = c["n_train"] / P * c["t_gpu"]
    tasks = (d + 1) * c["task_s"]
    # Within one node the tree's transfers are local copies.
    bw = c["bw_intra"] if nodes == 1 else c["bw_compss"]
    merge = d * (c["latency"] + M / bw + M * c["merge_s_per_b"])
    hops = math.ceil(math.log2(nodes)) if tree else nodes - 1
    spread = hops * M / c["bw_compss"]
    return compute + merges * (tasks + merge + spread)


def ddp(nodes, c, overlap):
    """Projected seconds of a DDP epoch; ``overlap`` True: the all-reduce
    fully hidden behind the backward pass, False: not at all."""
    P = nodes * c["gpus_per_node"]
    M, b = c["model_bytes"], c["batch"]
    steps = math.ceil(c["n_train"] / (P * b))
    compute = b * c["t_gpu"]
    if P == 1:
        return steps * compute
    bw = c["bw_intra"] if nodes == 1 else c["bw_nccl"]
    comm = 2 * (P - 1) / P * M / bw + 2 * math.log2(P) * c["latency"]
    if overlap:
        step = max(compute, comm)
    else:
        step = compute + comm
    return steps * step
