"""Accuracy at equal epochs from 1 to 64 replicas, and the bytes it costs.

A first version of the scaling benchmark: the MLP workload of
``sync_training.py`` (``make_classification``, 128 features, 10 classes,
an MLP 128-512-512-10, SGD lr 0.05 momentum 0.9, batch 64), trained for
``--epochs`` epochs by:

``single``      plain PyTorch in one process (the reference);
``ddp``         what DDP computes with P workers of batch 64: one process,
                global batch 64 P, the learning rate scaled by P or by
                sqrt(P) after one epoch of linear warm-up (both are run;
                the better is reported);
``default``     ``SyncEpochAveragingClassifier(n_workers=P)``, everything
                else at its defaults but the workload's lr, momentum and
                batch;
settings        the same with other parameters, named on the command
                line as ``SYNC_EVERY[+sqrt|+lin]``: a merge every
                SYNC_EVERY epochs (a fraction merges within epochs), the
                inner learning rate scaled by sqrt(P) or P with a two-epoch
                warm-up (factor 1/2 in the first epoch).

For each P it prints the test accuracy after every epoch (the library's
from ``history_``'s ``valid_score``), the points against single-process
at the last epoch, the first epoch within 1 point of single-process's
last, and the bytes moved per epoch by merges and broadcasts: each merge
round reads the P replicas and P - 2 partial sums in merge tasks and
sends the merged model to P training tasks, (3P - 2) models; DDP's ring
all-reduce moves 2 (P - 1) / P models per rank and step, 2 (P - 1) N /
(P b) models an epoch.

The library runs on the ``sequential`` backend here (the synchronous
strategy gives the local backend's model to 1e-5, tests/training checks
it): wall time is not the point, accuracy and bytes are.

    python benchmarks/scaling_accuracy.py --replicas 2,4,8,16,32 \\
        --settings 1+sqrt,0.25+sqrt

Not a test; never imported by the package.
"""

import argparse
import copy
import json
import math
import time

import numpy as np
import torch

# benchmarks/ is on sys.path: the synchronous benchmark's MLP and data,
# the single-process and the DDP-equivalent contenders.
from _common import (MLP, accuracy, classification_rows,  # noqa: E402
                     large_batch, plain_pytorch, state_bytes)
from _machine import print_header  # noqa: E402

import dislib_nn as dnn
from dislib_nn import runtime


class Warmup:
    """``lr_schedule``: factor 1/2 in the first epoch, then 1."""

    def __call__(self, epoch):
        return 0.5 if epoch == 0 else 1.0


def make_data(n_train, n_test, seed):
    X, X_test, y, y_test = classification_rows(n_train, n_test, seed)
    return X, y, X_test, y_test


def scorer(data):
    X_test, y_test = data[2], data[3]
    return lambda model: accuracy(model, X_test, y_test)


def plain_sgd(init, data, args):
    """Plain PyTorch; per-epoch test accuracy."""
    model = copy.deepcopy(init)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr,
                          momentum=args.momentum)
    return plain_pytorch(model, opt, data[0], data[1], args.epochs,
                         args.batch, args.seed,
                         after_epoch=scorer(data))[1]


def library(init, data, args, P, setting):
    """``setting`` is "default" or SYNC_EVERY[+sqrt|+lin]."""
    X, y, X_test, y_test = data
    params = dict(module=init, n_workers=P, n_epochs=args.epochs,
                  batch_size=args.batch, lr=args.lr,
                  optimizer__momentum=args.momentum, random_state=args.seed,
                  validation_data=(X_test, y_test))
    if setting != "default":
        every, _, scale = setting.partition("+")
        params["sync_every"] = every if every == "step" else (
            int(every) if float(every) >= 1 else float(every))
        if scale:
            params["lr"] = args.lr * (math.sqrt(P) if scale == "sqrt"
                                      else P)
            params["lr_schedule"] = Warmup()
    clf = dnn.SyncEpochAveragingClassifier(**params).fit(X, y)
    merges = [h.get("n_merges", 1) for h in clf.history_]
    return [h["valid_score"] for h in clf.history_], merges


def model_bytes(module):
    return state_bytes(module.state_dict())


def first_within(scores, target):
    return next((e + 1 for e, s in enumerate(scores) if s >= target), None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-train", type=int, default=48000)
    p.add_argument("--n-test", type=int, default=5000)
    p.add_argument("--replicas", default="2,4,8,16,32,64")
    p.add_argument("--settings", default="1+sqrt,0.25+sqrt")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args(argv)
    print_header("scaling_accuracy")
    runtime.set_backend("sequential")
    torch.set_num_threads(1)
    data = make_data(args.n_train, args.n_test, args.seed)
    torch.manual_seed(args.seed)
    init = MLP()
    size = model_bytes(init)
    print(f"{args.n_train} training rows, {args.epochs} epochs, batch "
          f"{args.batch}, model {size / 2 ** 20:.2f} MiB, seed {args.seed}")
    single = plain_sgd(init, data, args)
    target = single[-1] - 0.01
    rows = [{"P": 1, "contender": "single", "scores": single,
             "bytes": 0}]
    print(f"single-process: {single[-1]:.4f}", flush=True)
    for P in [int(v) for v in args.replicas.split(",")]:
        steps = args.n_train / (P * args.batch)
        ddp = {}
        for scale in ("lin", "sqrt"):
            ddp[scale] = large_batch(init, data[0], data[1], P, scale,
                                     args.batch, args.lr, args.momentum,
                                     args.epochs, args.seed,
                                     after_epoch=scorer(data))
        best = max(ddp, key=lambda k: ddp[k][-1])
        rows.append({"P": P, "contender": f"ddp ({best})",
                     "scores": ddp[best],
                     "bytes": 2 * (P - 1) * size * steps})
        for setting in ["default"] + args.settings.split(","):
            started = time.perf_counter()
            scores, merges = library(init, data, args, P, setting)
            rows.append({"P": P, "contender": setting, "scores": scores,
                         "bytes": (3 * P - 2) * size * float(
                             np.mean(merges)),
                         "fit_s": time.perf_counter() - started})
        for row in rows[-(2 + len(args.settings.split(","))):]:
            s = row["scores"]
            print(f"P={P:>3} {row['contender']:<14} acc {s[-1]:.4f} "
                  f"({100 * (s[-1] - single[-1]):+.1f} pts)  within 1 pt "
                  f"at epoch {first_within(s, target)}  "
                  f"{row['bytes'] / 2 ** 20:>9.1f} MiB/epoch", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
