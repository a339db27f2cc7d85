"""PyTorch DDP (gloo) across a testbed's nodes: one rank, and its driver.

One rank, started on a node by the caller::

    ip netns exec dnt-n1 python benchmarks/_ddp.py --rank 1 --world 2 \\
        --master 10.213.0.2:29500 --iface eth0 --model mlp4m --epochs 3

sets ``GLOO_SOCKET_IFNAME`` (in a namespace the host name resolves to an
address the namespace does not have), joins the process group through
``tcp://MASTER``, builds the model named from :data:`MODELS` with one
torch thread, and trains it on ``make_classification`` rows (a fixed
seed): each epoch a permutation of the training rows shared by every
rank, rank r taking rows r::P of it, batch b per rank, SGD at
``lr x P`` (or ``x sqrt(P)``, ``--lr-scaling``), warmed up linearly over
the first epoch. Global batch k is then rows [kPb, (k+1)Pb) of the
permutation, so one process training on batches of Pb rows at the same
rates follows the same weights (up to float rounding).

Before each epoch the same steps run once under ``ddp.no_sync()`` (no
communication) from the same weights, which are then restored: the
compute-only baseline, measured in the same processes as the epoch it
precedes. Rank 0 prints one JSON line per epoch (wall seconds after a
barrier, the no-sync seconds, the accuracy on held-out rows) and writes
them all with ``--json``.

The driver, :func:`run_ddp`, launches the P ranks on a
:class:`testbed.Testbed`'s nodes and returns rank 0's report with the
bytes each node sent. Without ``--rank`` this file is that driver::

    python benchmarks/_ddp.py --world 2 --rate 100mbit --epochs 1

Not a test; never imported by the package.
"""

import argparse
import copy
import datetime
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))

# The MLPs, name: (inputs, hidden widths, classes), trained on
# make_classification rows.
MLPS = {
    # 1024-2048-1024-10: 4,207,626 parameters, 16.8 MB in float32
    "mlp4m": (1024, (2048, 1024), 10),
    # 32-64-4 (2,372 parameters): the scaling benchmark's MLP
    # (bench_scaling.SmallMLP); the smoke test's
    "tiny": (32, (64,), 4),
}
#: Every model by name: the MLPs and ``cnn``, the accuracy benchmark's
#: CNN (``_common.CNN``: 26,154 parameters, 105 KB) on its synthetic
#: 3x32x32 images (``_common.pattern_images``).
MODELS = sorted(list(MLPS) + ["cnn"])


def build_model(name, seed):
    """The model ``name`` of :data:`MODELS`, initialised from ``seed``."""
    torch.manual_seed(seed)
    if name == "cnn":
        from _common import CNN
        return CNN()
    n_in, hidden, n_out = MLPS[name]
    layers, width = [], n_in
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, n_out))


def make_data(name, n_train, n_test, seed):
    """(X, y, X_test, y_test) for model ``name``: float32 and int64."""
    if name == "cnn":
        from _common import pattern_images
        X, X_test, y, y_test = pattern_images(n_train, n_test, seed)
        return tuple(torch.from_numpy(a) for a in (X, y, X_test, y_test))
    from sklearn.datasets import make_classification
    n_in, _, n_out = MLPS[name]
    X, y = make_classification(
        n_samples=n_train + n_test, n_features=n_in,
        n_informative=max(4, min(64, n_in // 4)), n_redundant=0,
        n_classes=n_out, random_state=seed)
    X, y = torch.from_numpy(X.astype(np.float32)), torch.from_numpy(y)
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def row_bytes(name):
    """Bytes of one training row of model ``name``'s data
    (:func:`make_data`): its float32 features and its int64 label."""
    features = 3 * 32 * 32 if name == "cnn" else MLPS[name][0]
    return 4 * features + 8


def epoch_order(n_train, epoch, seed):
    """The permutation of the training rows for ``epoch``, on every rank."""
    return torch.from_numpy(
        np.random.default_rng([seed, epoch]).permutation(n_train))


def learning_rate(step, steps_per_epoch, lr, world, scaling):
    """``lr`` scaled by P (``"linear"``) or sqrt(P) (``"sqrt"``), warmed
    up linearly over the first epoch (``step`` counts from 0)."""
    target = lr * (world if scaling == "linear" else math.sqrt(world))
    return target * min(1.0, (step + 1) / steps_per_epoch)


def accuracy(model, X, y):
    model.eval()
    with torch.no_grad():
        right = (model(X).argmax(1) == y).sum().item()
    model.train()
    return right / len(y)


def _rank_epoch(ddp, opt, X, y, rows, batch, first_step, steps_per_epoch,
                args):
    """The rank's steps of one epoch; returns seconds (after a barrier)."""
    import torch.distributed as dist
    loss_fn = nn.CrossEntropyLoss()
    dist.barrier()
    start = time.perf_counter()
    for k in range(steps_per_epoch):
        for group in opt.param_groups:
            group["lr"] = learning_rate(first_step + k, steps_per_epoch,
                                        args.lr, args.world, args.lr_scaling)
        part = rows[k * batch:(k + 1) * batch]
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(X[part]), y[part]).backward()
        opt.step()
    dist.barrier()
    return time.perf_counter() - start


def train_rank(args):
    """One rank's training (``--rank`` given); rank 0 reports."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    if args.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = args.iface
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://{args.master}", rank=args.rank,
        world_size=args.world,
        timeout=datetime.timedelta(seconds=args.timeout))
    try:
        X, y, X_test, y_test = make_data(args.model, args.n_train,
                                         args.n_test, args.seed)
        model = build_model(args.model, args.seed)
        ddp = DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr,
                              momentum=args.momentum)
        steps = args.n_train // (args.world * args.batch)
        if steps < 1:
            raise ValueError(f"--n-train {args.n_train} is less than one "
                             f"global batch ({args.world} x {args.batch})")
        n_params = sum(p.numel() for p in model.parameters())
        report = {"model": args.model, "parameters": n_params,
                  "model_bytes": 4 * n_params, "world": args.world,
                  "batch": args.batch, "global_batch": args.world * args.batch,
                  "steps_per_epoch": steps, "lr": args.lr,
                  "lr_scaling": args.lr_scaling, "momentum": args.momentum,
                  "n_train": args.n_train, "n_test": args.n_test,
                  "seed": args.seed, "torch": torch.__version__,
                  "epochs": []}
        for epoch in range(args.epochs):
            rows = epoch_order(args.n_train, epoch, args.seed)[
                args.rank::args.world]
            nosync = None
            if not args.no_baseline:
                saved = (copy.deepcopy(model.state_dict()),
                         copy.deepcopy(opt.state_dict()))
                with ddp.no_sync():
                    nosync = _rank_epoch(ddp, opt, X, y, rows, args.batch,
                                         epoch * steps, steps, args)
                model.load_state_dict(saved[0])
                opt.load_state_dict(saved[1])
            seconds = _rank_epoch(ddp, opt, X, y, rows, args.batch,
                                  epoch * steps, steps, args)
            if args.rank == 0:
                row = {"epoch": epoch + 1, "seconds": seconds,
                       "step_seconds": seconds / steps,
                       "nosync_seconds": nosync,
                       "nosync_step_seconds": None if nosync is None
                       else nosync / steps,
                       "test_accuracy": accuracy(model, X_test, y_test),
                       "lr": opt.param_groups[0]["lr"]}
                report["epochs"].append(row)
                print(json.dumps(row), flush=True)
        if args.save_weights:
            torch.save(model.state_dict(),
                       f"{args.save_weights}.rank{args.rank}.pt")
        if args.rank == 0 and args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
        dist.barrier()          # without it a rank once aborted at exit
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------ the driver
def run_ddp(testbed, world, *, model="mlp4m", epochs=1, batch=64, lr=0.05,
            lr_scaling="linear", momentum=0.0, n_train=4096, n_test=1024,
            seed=0, port=29500, baseline=True, save_weights=None,
            timeout=900, python=None):
    """Train with DDP on nodes 0..world-1 of a started ``testbed``.

    Rank r runs on node r; rank 0's node is the process group's master.
    Returns rank 0's report (see the module docstring) with ``bytes``:
    what each node's interface sent and received meanwhile, and
    ``ranks_seconds``, the ranks' wall time from launch. Raises
    RuntimeError (with the ranks' output) if a rank fails or ``timeout``
    seconds pass.
    """
    if not 1 <= world <= testbed.n_nodes:
        raise ValueError(f"world must be in [1, {testbed.n_nodes}] (the "
                         f"testbed's nodes); got {world!r}")
    python = python or sys.executable
    tmp = tempfile.mkdtemp(prefix="ddp-")
    out = os.path.join(tmp, "rank0.json")
    master = f"{testbed.addresses[0]}:{port}"
    common = ["--world", world, "--master", master, "--iface", "eth0",
              "--model", model, "--epochs", epochs, "--batch", batch,
              "--lr", lr, "--lr-scaling", lr_scaling, "--momentum", momentum,
              "--n-train", n_train, "--n-test", n_test, "--seed", seed,
              "--timeout", timeout]
    if not baseline:
        common.append("--no-baseline")
    if save_weights:
        common += ["--save-weights", save_weights]
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    before, start = testbed.counters(), time.perf_counter()
    ranks, logs = [], []
    try:
        for r in range(world):
            logs.append(os.path.join(tmp, f"rank{r}.log"))
            with open(logs[-1], "w") as f:
                ranks.append(testbed.run(
                    [python, os.path.join(HERE, "_ddp.py"), "--rank", r,
                     *common, *(["--json", out] if r == 0 else [])],
                    node=r, env=env, background=True, stdout=f,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        deadline = start + timeout
        while any(p.poll() is None for p in ranks):
            failed = [p for p in ranks if p.poll() not in (None, 0)]
            if failed or time.perf_counter() > deadline:
                testbed.stop(*ranks)
                break
            time.sleep(0.1)
        seconds = time.perf_counter() - start
        codes = [p.poll() for p in ranks]
        if any(c != 0 for c in codes):
            tails = "".join(f"--- rank {r} (exit {c}):\n{_tail(log)}"
                            for r, (c, log) in enumerate(zip(codes, logs)))
            raise RuntimeError(f"DDP failed or passed {timeout} s:\n{tails}")
        after = testbed.counters()
        with open(out) as f:
            report = json.load(f)
    finally:
        testbed.stop(*ranks)
        shutil.rmtree(tmp, ignore_errors=True)
    report["ranks_seconds"] = seconds
    report["bytes"] = {ns: {"tx_bytes": after[ns]["tx_bytes"]
                            - before[ns]["tx_bytes"],
                            "rx_bytes": after[ns]["rx_bytes"]
                            - before[ns]["rx_bytes"]} for ns in after}
    return report


def _tail(path, n=20):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


def _drive(args):
    """Build a testbed of ``--world`` nodes, measure it, run DDP on it."""
    sys.path.insert(0, HERE)
    from _machine import print_header
    from testbed import Testbed, unavailable_reason
    reason = unavailable_reason()
    if reason:
        print(f"_ddp.py: cannot build a testbed: {reason}", file=sys.stderr)
        return 2
    tb = Testbed(args.world, rate=args.rate, prefix=args.prefix)
    try:
        tb.validate()
    except ValueError as e:
        print(f"_ddp.py: {e}", file=sys.stderr)
        return 2
    print_header("_ddp.py")
    with tb:
        link = tb.measure_throughput(dst="master" if args.world == 1
                                     else 1)
        print(f"link: {link['mbit_per_s']:.1f} Mbit/s measured "
              f"(asked {args.rate}); idle round trip {link['rtt_ms']:.3f} ms")
        report = run_ddp(
            tb, args.world, model=args.model, epochs=args.epochs,
            batch=args.batch, lr=args.lr, lr_scaling=args.lr_scaling,
            momentum=args.momentum, n_train=args.n_train,
            n_test=args.n_test, seed=args.seed, baseline=not args.no_baseline,
            timeout=args.timeout)
    P, size = report["world"], report["model_bytes"]
    ring = 2 * (P - 1) / P * size * 8 / (link["mbit_per_s"] * 1e6)
    print(f"{report['model']}: {report['parameters']} parameters "
          f"({size / 1e6:.1f} MB), P = {P}, batch {report['batch']} per "
          f"rank, {report['steps_per_epoch']} steps per epoch")
    for row in report["epochs"]:
        comm = "" if row["nosync_seconds"] is None else (
            f"; no-sync step {row['nosync_step_seconds'] * 1e3:.0f} ms, so "
            "communication "
            f"{(row['step_seconds'] - row['nosync_step_seconds']) * 1e3:.0f}"
            " ms per step (ring formula at the measured rate: "
            f"{ring * 1e3:.0f} ms)")
        print(f"epoch {row['epoch']}: {row['seconds']:.2f} s, step "
              f"{row['step_seconds'] * 1e3:.0f} ms{comm}; test accuracy "
              f"{row['test_accuracy']:.4f}")
    for ns, b in report["bytes"].items():
        print(f"bytes {ns}: sent {b['tx_bytes']}, received {b['rx_bytes']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"link": link, **report}, f, indent=1)
    return 0


def _parser():
    parser = argparse.ArgumentParser(
        description="One DDP rank (with --rank), or the driver that runs "
                    "--world ranks on a testbed (without).")
    parser.add_argument("--rank", type=int,
                        help="this rank (rank mode); absent: the driver")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--master", help="ADDR:PORT of rank 0 (rank mode)")
    parser.add_argument("--iface", default="eth0",
                        help="GLOO_SOCKET_IFNAME (rank mode)")
    parser.add_argument("--model", choices=MODELS, default="mlp4m")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64,
                        help="rows per rank per step")
    parser.add_argument("--lr", type=float, default=0.05,
                        help="the single-process rate, scaled by P")
    parser.add_argument("--lr-scaling", choices=("linear", "sqrt"),
                        default="linear")
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--n-train", type=int, default=4096)
    parser.add_argument("--n-test", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the no-sync epochs")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds for the process group (and driver)")
    parser.add_argument("--json", help="rank 0 (or the driver) writes here")
    parser.add_argument("--save-weights", metavar="PREFIX",
                        help="each rank saves PREFIX.rankR.pt at the end")
    parser.add_argument("--rate", default="none",
                        help="the testbed's rate (driver mode)")
    parser.add_argument("--prefix", default="dnd",
                        help="the testbed's prefix (driver mode)")
    return parser


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    for name in ("world", "epochs", "batch", "n_train", "n_test"):
        if getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be at "
                         f"least 1; got {getattr(args, name)}")
    if args.rank is None:
        return _drive(args)
    if not 0 <= args.rank < args.world or not args.master:
        parser.error(f"rank mode needs --rank in [0, {args.world}) and "
                     f"--master ADDR:PORT; got --rank {args.rank}, "
                     f"--master {args.master}")
    train_rank(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
