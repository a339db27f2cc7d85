"""Accuracy at equal epochs from 1 to 64 replicas, and the bytes it costs.

Two workloads (``--workload``):

``mlp``   the MLP of ``sync_training.py`` (128-512-512-10) on
          ``make_classification`` (128 features, 10 classes), 48 000
          training and 5 000 test rows, SGD lr 0.05 momentum 0.9, batch 64;
``cnn``   ``_common.CNN`` on ``_common.pattern_images`` (the CIFAR-shaped
          3x32x32 images of ``bench_strategies.py``), 12 000 training and
          2 000 test images, SGD lr 0.01 momentum 0.9, batch 64 (the rate
          picked once, for single-process PyTorch only, with
          ``--pick-lr 0.01,0.02,0.05``).

Contenders, trained for ``--max-epochs`` epochs (the accuracy is read
at ``--epochs``):

``single``          plain PyTorch in one process (the reference), once;
``ddp``             what DDP computes with P workers of batch b: one
                    process, global batch b P, the rate scaled by P or by
                    sqrt(P) after one epoch of linear warm-up (both run,
                    the better at ``--epochs`` reported; P >= 2);
``STRATEGY default`` ``SyncEpochAveragingClassifier`` or
                    ``AsyncEpochAveragingClassifier`` with only
                    ``n_workers``, ``lr``, ``momentum``, ``batch_size``,
                    ``random_state`` and ``validation_data`` set
                    (``sync_every``, ``lr_scaling`` and ``max_lag`` at
                    "auto"; what they ran is ``history_[0]["schedule"]``);
``STRATEGY SETTING`` the same with ``--settings``, each
                    ``SYNC_EVERY[+sqrt|+lin|+xK][+diloco|+slowmo[B]]``
                    ``[+bf16][+lagK][+delay]``: a merge every
                    SYNC_EVERY epochs (a fraction merges within epochs,
                    ``step`` after every step), ``lr_scaling="sqrt"`` or
                    ``"linear"`` (the estimator then runs half the rate in
                    the first epoch), ``+xK`` the rate times K (half of it
                    in the first epoch too, through ``lr_schedule``),
                    ``+diloco`` an outer SGD (lr 0.7, momentum 0.9,
                    Nesterov), ``+slowmo`` an outer SGD at lr 1 with
                    momentum 1 - 1/P (``+slowmo0.8``: 0.8), ``+bf16``
                    ``merge_precision="bf16"`` (skipped, with a note, where
                    the estimators have no such parameter), ``+lagK``
                    ``max_lag=K`` (asynchronous only), ``+delay``
                    ``merge_delay=1`` (synchronous only);
                    ``SETTING@P0`` runs it only from P0 replicas on,
                    ``SETTING@P0-P1`` only from P0 to P1.
                    A setting that runs what the defaults ran (their
                    ``schedule``) is not fitted again: its row is the
                    defaults' (``same_as``).

Per contender and P it prints the test accuracy at ``--epochs``, the
points against single-process there, the first epoch within 1 point of
single-process's accuracy at ``--epochs`` ("-" when not within
``--max-epochs``), the bytes moved per epoch and the fit's wall time
here. Bytes, in models of M bytes, every read counted as crossing
nodes: a synchronous merge round reads the P replicas and P - 2 partial
sums and sends the merged model to P training tasks, (3P - 2) M, times
the rounds of an epoch (``history_``'s ``n_merges``); an asynchronous
round (``history_``'s ``merges``: P per round) folds P replicas, each
fold reading one and the global model, 2P M, and then starts the next
round: with ``max_lag=0`` one task reads the global model and P
training tasks its copy, (P + 1) M; otherwise each fold returns a copy
to its worker, P M, and with a lag bound (P >= 2) each worker's start
is picked by a task reading the P copies of the round before, P * P M;
with ``+bf16`` the replicas' uploads count M / 2; DDP's ring
all-reduce, 2 (P - 1) N / (P b) M an epoch.

Then the cost model (``_cost.py``, as ``cost_model.py``: the paper's
cluster, 4 GPUs a node, its stated figures, the merge cost measured
here) projects the wall time to that accuracy: epochs to target times
the projected epoch, where an epoch with K merge rounds pays the task
chain, merge tree and spread K times; DDP between full and no overlap.

The library runs on the ``sequential`` backend by default (the
synchronous strategy and ``max_lag=0`` give the local backend's models,
tests/training checks it; at a lag bound the local backend folds in the
order tasks finish), ``--backend local`` on a pool of 2 processes: wall
time here is not the point, accuracy and bytes are.

    python benchmarks/scaling_accuracy.py --workload mlp \\
        --strategies sync,async --settings 0.25+sqrt,0.25+sqrt+diloco \\
        --json mlp.json --plot docs/img/scaling_accuracy

Not a test; never imported by the package.
"""

import argparse
import copy
import json
import math
import time

import numpy as np
import torch

# benchmarks/ is on sys.path: the workloads, the single-process and the
# DDP-equivalent contenders, and the cost model.
import _cost  # noqa: E402
from _common import (CNN, MLP, accuracy, classification_rows,  # noqa: E402
                     large_batch, pattern_images, plain_pytorch, state_bytes)
from _machine import print_header  # noqa: E402

import dislib_nn as dnn
from dislib_nn import runtime

# name: (model class, data maker, training rows, test rows, lr)
WORKLOADS = {"mlp": (MLP, classification_rows, 48000, 5000, 0.05),
             "cnn": (CNN, pattern_images, 12000, 2000, 0.01)}
ESTIMATORS = {"sync": dnn.SyncEpochAveragingClassifier,
              "async": dnn.AsyncEpochAveragingClassifier}
DILOCO = {"outer_optimizer": torch.optim.SGD, "outer_optimizer__lr": 0.7,
          "outer_optimizer__momentum": 0.9,
          "outer_optimizer__nesterov": True}
EVAL_CHUNK = 1000


def slowmo(beta=None):
    """SlowMo's outer step (Wang et al., ICLR 2020): SGD at slow rate 1
    with slow momentum ``beta``, by default 1 - 1 / P, the block momentum
    BMUF (Chen and Huo, 2016) sets from the number of workers. A value
    that depends on P is resolved at the fit (``at_replicas``)."""
    return {"outer_optimizer": torch.optim.SGD, "outer_optimizer__lr": 1.0,
            "outer_optimizer__momentum": OfReplicas(lambda P: 1 - 1 / P)
            if beta is None else beta}


class OfReplicas:
    """A parameter's value as a function of the number of replicas."""

    def __init__(self, fn):
        self.fn = fn


def half_in_the_first_epoch(epoch):
    """The warm-up the estimators give a scaled rate: half of it in the
    fit's first epoch."""
    return 0.5 if epoch == 0 else 1.0


def at_replicas(params, P):
    """``params`` with the values that depend on P resolved."""
    return {k: v.fn(P) if isinstance(v, OfReplicas) else v
            for k, v in params.items()}


def parse_setting(setting):
    """``SYNC_EVERY[+sqrt|+lin|+xK][+diloco|+slowmo[B]][+bf16][+lagK]
    [+delay]``
    -> estimator parameters (see ``at_replicas``; ``lr_factor`` multiplies
    the rate)."""
    every, *suffixes = setting.split("+")
    params = {}
    if every == "step":
        params["sync_every"] = "step"
    else:
        try:
            value = float(every)
        except ValueError:
            raise ValueError(f"--settings: {setting!r} must start with a "
                             f"number of epochs or 'step', got "
                             f"{every!r}") from None
        params["sync_every"] = int(value) if value >= 1 else value
    for suffix in suffixes:
        if suffix in ("sqrt", "lin"):
            params["lr_scaling"] = "sqrt" if suffix == "sqrt" else "linear"
        elif suffix.startswith("x"):
            try:
                factor = float(suffix[1:])
            except ValueError:
                factor = 0
            if not factor > 0:
                raise ValueError(f"--settings: {suffix!r} in {setting!r} "
                                 f"must be x<factor of the rate>, such as "
                                 f"x8") from None
            params.update(lr_scaling="none", lr_factor=factor,
                          lr_schedule=half_in_the_first_epoch)
        elif suffix == "diloco":
            params.update(DILOCO)
        elif suffix.startswith("slowmo"):
            beta = suffix[len("slowmo"):]
            try:
                params.update(slowmo(float(beta) if beta else None))
            except ValueError:
                raise ValueError(f"--settings: {suffix!r} in {setting!r} "
                                 f"must be slowmo or slowmo<momentum>, "
                                 f"such as slowmo0.8") from None
        elif suffix == "bf16":
            params["merge_precision"] = "bf16"
        elif suffix.startswith("lag") and suffix[3:].isdigit():
            params["max_lag"] = int(suffix[3:])
        elif suffix == "delay":
            params["merge_delay"] = 1
        else:
            raise ValueError(f"--settings: unknown suffix {suffix!r} in "
                             f"{setting!r} (sqrt, lin, xK, diloco, "
                             f"slowmo[B], bf16, lagK, delay)")
    return params


def same_as_defaults(params, schedule, P):
    """Whether a setting runs what the defaults ran (``schedule``, from
    ``history_``): the same merges, the same scaled, warmed-up rate and
    the same ``max_lag``, nothing else set. The defaults' fit is then not
    repeated."""
    if not schedule or set(params) - {"max_lag"} != {"sync_every",
                                                     "lr_scaling"}:
        return False
    factor = math.sqrt(P) if params["lr_scaling"] == "sqrt" else P
    return (schedule.get("sync_every") == params["sync_every"]
            and math.isclose(schedule.get("lr_factor", 0), factor)
            and bool(schedule.get("warmup")) == (factor > 1)
            and schedule.get("max_lag") == params.get(
                "max_lag", schedule.get("max_lag")))


def scorer(X_test, y_test):
    return lambda model: accuracy(model, X_test, y_test, EVAL_CHUNK)


def library(strategy, init, data, args, P, params):
    """Fit the estimator with ``params`` resolved for P (``at_replicas``;
    ``lr_factor`` multiplies the rate); (per-epoch test accuracy, its
    history_)."""
    X, y, X_test, y_test = data
    params = dict(params)
    factor = params.pop("lr_factor", 1.0)
    clf = ESTIMATORS[strategy](
        module=copy.deepcopy(init), n_workers=P, n_epochs=args.max_epochs,
        batch_size=args.batch, lr=args.lr * factor,
        optimizer__momentum=args.momentum, random_state=args.seed,
        validation_data=(X_test, y_test), **params).fit(X, y)
    return [h["valid_score"] for h in clf.history_], clf.history_


def merges_per_epoch(strategy, history, P):
    """Merge rounds per epoch, averaged over the epochs: ``n_merges``
    (sync), or a round per P folds in ``merges`` (async)."""
    if strategy == "sync":
        return float(np.mean([h.get("n_merges", 0) for h in history]))
    return float(np.mean([len(h.get("merges", [])) for h in history])) / P


def library_bytes(strategy, P, rounds, size, bf16=False, max_lag=1):
    """Bytes moved per epoch by ``rounds`` merge rounds of P replicas
    (every read counted as crossing nodes)."""
    upload = size / 2 if bf16 else size
    if strategy == "sync":
        # P replica uploads, P - 2 partial sums, P copies sent back.
        return (P * upload + max(P - 2, 0) * size + P * size) * rounds
    # P folds, each reading one replica and the global model (which
    # moves from one fold's node to the next) ...
    per_round = P * (upload + size)
    if max_lag == 0:
        # ... one task reading the global model after them, its copy
        # read by P training tasks;
        per_round += (P + 1) * size
    else:
        # ... each returning a global copy to its worker; with a lag
        # bound each worker's start is picked by a task reading the P
        # copies of the round before (none with one replica).
        per_round += P * size
        if max_lag is not None and P > 1:
            per_round += P * P * size
    return per_round * rounds


def lag_of(row):
    """The ``max_lag`` an asynchronous row ran: its schedule's (chosen by
    ``"auto"``), else its setting's ``+lagK``, else 1."""
    sched = row.get("schedule") or {}
    if "max_lag" in sched:
        return sched["max_lag"]
    for suffix in (row.get("setting") or "").split("+"):
        if suffix.startswith("lag") and suffix[3:].isdigit():
            return int(suffix[3:])
    return 1


def ddp_bytes(P, size, n_train, batch):
    """A ring all-reduce: 2 (P - 1) / P models per rank and step, N / (P
    b) steps an epoch, P ranks."""
    return 2 * (P - 1) * size * n_train / (P * batch)


def first_within(scores, target):
    return next((e + 1 for e, s in enumerate(scores) if s >= target), None)


def projection(row, c, single_epoch):
    """Projected seconds to the target on ``row["P"] / 4`` nodes (None
    where the target was not reached or P is not a multiple of the
    GPUs per node)."""
    epochs, P = row["epochs_to_target"], row["P"]
    if epochs is None:
        return None
    if row["contender"] == "single":
        return {"s": epochs * single_epoch}
    if P % c["gpus_per_node"]:
        return None
    nodes = P // c["gpus_per_node"]
    if row["contender"] == "ddp":
        return {"s_overlap": epochs * _cost.ddp(nodes, c, True),
                "s_no_overlap": epochs * _cost.ddp(nodes, c, False)}
    rounds = row["merges_per_epoch"]
    return {"s": epochs * _cost.epoch_averaging(nodes, c, merges=rounds),
            "s_tree": epochs * _cost.epoch_averaging(nodes, c, tree=True,
                                                     merges=rounds)}


def pick_lr(init, data, args):
    """Single-process PyTorch at each of ``--pick-lr`` for
    ``--pick-epochs`` epochs: the accuracy after each epoch."""
    X, y, X_test, y_test = data
    for lr in [float(v) for v in args.pick_lr.split(",")]:
        model = copy.deepcopy(init)
        opt = torch.optim.SGD(model.parameters(), lr=lr,
                              momentum=args.momentum)
        scores = plain_pytorch(model, opt, X, y, args.pick_epochs,
                               args.batch, args.seed,
                               after_epoch=scorer(X_test, y_test))[1]
        print(f"lr {lr:g}: " + " ".join(f"{s:.4f}" for s in scores),
              flush=True)


def print_row(row, single_acc):
    name = row["contender"] + (f" {row['setting']}"
                               if row.get("setting") else "")
    if row.get("error"):
        print(f"P={row['P']:>3} {name:<28} failed: {row['error']}",
              flush=True)
        return
    within = row["epochs_to_target"]
    sched, params = row.get("schedule"), row.get("params", {})
    ran = "" if not sched else (
        f"  ran sync_every={sched['sync_every']} lr x"
        f"{sched['lr_factor'] * params.get('lr_factor', 1):.3g}"
        + (f" max_lag={sched['max_lag']}" if "max_lag" in sched else ""))
    fit = f"  fit {row['fit_s']:.0f} s" if "fit_s" in row else ""
    print(f"P={row['P']:>3} {name:<28} acc {row['acc']:.4f} "
          f"({row['points']:+.1f} pts)  within 1 pt at epoch "
          f"{within if within is not None else '-'}  "
          f"{row['bytes_per_epoch'] / 2 ** 20:>9.1f} MiB/epoch{fit}{ran}",
          flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="mlp")
    p.add_argument("--n-train", type=int, default=None,
                   help="training rows (48 000 mlp, 12 000 cnn)")
    p.add_argument("--n-test", type=int, default=None,
                   help="test rows (5 000 mlp, 2 000 cnn)")
    p.add_argument("--replicas", default="1,2,4,8,16,32,64")
    p.add_argument("--strategies", default="sync,async")
    p.add_argument("--settings", default="0.25+sqrt")
    p.add_argument("--settings-from", type=int, default=2,
                   help="run --settings only from this P on (at P = 1 "
                        "they differ from the defaults only in merges of "
                        "one replica)")
    p.add_argument("--backend", choices=("sequential", "local"),
                   default="sequential",
                   help="where the library's tasks run (local: a pool of "
                        "2 processes)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--max-epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=None,
                   help="0.05 mlp, 0.01 cnn")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pick-lr", default=None,
                   help="only train single-process at these rates")
    p.add_argument("--pick-epochs", type=int, default=3)
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--resume", default=None,
                   help="an earlier --json of the same arguments: its rows "
                        "are taken, not run again")
    p.add_argument("--plot", default=None,
                   help="write PATH_PREFIX_WORKLOAD.png")
    args = p.parse_args(argv)
    module, make_data, n_train, n_test, lr = WORKLOADS[args.workload]
    args.n_train = args.n_train or n_train
    args.n_test = args.n_test or n_test
    args.lr = args.lr if args.lr is not None else lr
    args.max_epochs = max(args.max_epochs, args.epochs)
    replicas = [int(v) for v in args.replicas.split(",")]
    strategies = args.strategies.split(",")
    for s in strategies:
        if s not in ESTIMATORS:
            p.error(f"--strategies: {s!r} is not one of sync, async")
    # SETTING@P0 runs SETTING only from P0 replicas on, SETTING@P0-P1
    # only from P0 to P1.
    p_range = {}
    for v in args.settings.split(","):
        if v:
            name, _, span = v.partition("@")
            lo, _, hi = span.partition("-")
            p_range[name] = (int(lo or 0), int(hi or 1 << 30))
    settings = list(p_range)
    parsed = {s: parse_setting(s) for s in settings}
    has_bf16 = "merge_precision" in dnn.SyncEpochAveragingClassifier(
    ).get_params()
    for s in list(settings):
        if "merge_precision" in parsed[s] and not has_bf16:
            print(f"note: skipping setting {s}: the estimators have no "
                  f"merge_precision parameter")
            settings.remove(s)

    earlier = None
    if args.resume:
        with open(args.resume) as f:
            earlier = json.load(f)
        ran_on = earlier["args"].get("backend", "sequential")
        if ran_on != args.backend:
            p.error(f"--resume: {args.resume} ran the library on the "
                    f"{ran_on} backend, not --backend {args.backend}")

    print_header("scaling_accuracy")
    if args.backend == "local":
        runtime.set_backend("local", n_workers=2, threads_per_worker=1)
    else:
        runtime.set_backend("sequential")
    torch.set_num_threads(1)
    X, X_test, y, y_test = make_data(args.n_train, args.n_test, args.seed)
    data = (X, y, X_test, y_test)
    torch.manual_seed(args.seed)
    init = module()
    size = state_bytes(init.state_dict())
    print(f"workload {args.workload}: {args.n_train} training and "
          f"{args.n_test} test rows, {args.epochs} epochs (trained to "
          f"{args.max_epochs}), batch {args.batch}, SGD lr {args.lr:g} "
          f"momentum {args.momentum:g}, model {size / 2 ** 20:.2f} MiB; "
          f"seed {args.seed} (data, initial weights, shuffles, "
          f"random_state); the library on the {args.backend} backend",
          flush=True)
    if args.pick_lr:
        pick_lr(init, data, args)
        return

    merge_s_per_b = _cost.measure_merge()
    c = _cost.cluster(merge_s_per_b)
    single_epoch = c["n_train"] * c["t_gpu"]
    at = args.epochs - 1
    done = {}
    if args.resume:             # the rows of an earlier run's --json
        for r in earlier["rows"]:
            done[(r["P"], r["contender"], None if r["contender"] in (
                "ddp", "single") else r.get("setting"))] = r
        print(f"resumed {len(done)} rows from {args.resume}")
    t0 = time.perf_counter()
    if (1, "single", None) in done:
        single = done[(1, "single", None)]["scores"]
        t0 -= done[(1, "single", None)]["fit_s"]
    else:
        model = copy.deepcopy(init)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr,
                              momentum=args.momentum)
        single = plain_pytorch(model, opt, X, y, args.max_epochs,
                               args.batch, args.seed,
                               after_epoch=scorer(X_test, y_test))[1]
    target = single[at] - 0.01

    def finish(row, scores):
        row.update(scores=scores, acc=scores[at],
                   points=100 * (scores[at] - single[at]),
                   epochs_to_target=first_within(scores, target))
        row["projection"] = projection(row, c, single_epoch)
        return row

    rows = [finish({"P": 1, "contender": "single", "bytes_per_epoch": 0,
                    "fit_s": time.perf_counter() - t0}, single)]
    print_row(rows[0], single[at])
    for P in replicas:
        if P >= 2 and (P, "ddp", None) in done:
            old = done[(P, "ddp", None)]
            rows.append(finish(old, old["scores"]))
            print_row(rows[-1], single[at])
        elif P >= 2:
            t0 = time.perf_counter()
            ddp = {scale: large_batch(init, X, y, P, scale, args.batch,
                                      args.lr, args.momentum,
                                      args.max_epochs, args.seed,
                                      after_epoch=scorer(X_test, y_test))
                   for scale in ("lin", "sqrt")}
            best = max(ddp, key=lambda k: ddp[k][at])
            rows.append(finish(
                {"P": P, "contender": "ddp", "setting": best,
                 "scores_all": ddp,
                 "bytes_per_epoch": ddp_bytes(P, size, args.n_train,
                                              args.batch),
                 "fit_s": time.perf_counter() - t0}, ddp[best]))
            print_row(rows[-1], single[at])
        for strategy in strategies:
            named = [s for s in settings
                     if max(args.settings_from, p_range[s][0]) <= P
                     <= p_range[s][1] and (strategy == "async"
                                           or "max_lag" not in parsed[s])
                     and (strategy == "sync"
                          or "merge_delay" not in parsed[s])]
            for setting in ["default"] + named:
                params = {} if setting == "default" else parsed[setting]
                row = {"P": P, "contender": strategy, "setting": setting}
                key = (P, strategy, setting)
                if key in done:
                    old = done[key]
                    if not old.get("error"):    # by this version's formula
                        old["bytes_per_epoch"] = library_bytes(
                            strategy, P, old["merges_per_epoch"], size,
                            bf16="merge_precision" in params,
                            max_lag=lag_of(old))
                    rows.append(finish(old, old["scores"]))
                    print_row(rows[-1], single[at])
                    continue
                default = next((r for r in rows if r["P"] == P and
                                r["contender"] == strategy and
                                r.get("setting") == "default"), None)
                if (setting != "default" and default is not None
                        and not default.get("error") and same_as_defaults(
                            params, default["schedule"], P)):
                    row = dict(default, setting=setting,
                               same_as="default", fit_s=0.0)
                    rows.append(row)
                    print_row(row, single[at])
                    continue
                ran = at_replicas(params, P)
                t0 = time.perf_counter()
                try:
                    scores, history = library(strategy, init, data, args,
                                              P, ran)
                except Exception as exc:    # recorded, the run goes on
                    row["error"] = f"{type(exc).__name__}: {exc}"
                    rows.append(row)
                    print_row(row, single[at])
                    continue
                rounds = merges_per_epoch(strategy, history, P)
                row.update(fit_s=time.perf_counter() - t0,
                           schedule=history[0].get("schedule"),
                           merges_per_epoch=rounds,
                           params=ran)
                row["bytes_per_epoch"] = library_bytes(
                    strategy, P, rounds, size,
                    bf16="merge_precision" in params, max_lag=lag_of(row))
                rows.append(finish(row, scores))
                print_row(row, single[at])
        if args.json:       # after every P: a long run keeps what it has
            write_json(args, size, merge_s_per_b, rows)
    print_projection(rows, c)
    if args.json:
        write_json(args, size, merge_s_per_b, rows)
    if args.plot:
        plot(rows, single[at], args)


def write_json(args, size, merge_s_per_b, rows):
    with open(args.json, "w") as f:
        json.dump({"workload": args.workload, "seed": args.seed,
                   "args": vars(args), "model_bytes": size,
                   "merge_s_per_b": merge_s_per_b, "rows": rows}, f,
                  indent=1, default=str)


def print_projection(rows, c):
    """Projected seconds to single-process's accuracy, 4 GPUs a node."""
    print(f"\nProjected time to within 1 point of single-process "
          f"(cost model: {c['n_train']:,} images an epoch, "
          f"{c['model_bytes'] / 1e6:g} MB, {1 / c['t_gpu']:g} images/s "
          f"per GPU, NCCL {c['bw_nccl'] / 1e9:g} GB/s, COMPSs "
          f"{c['bw_compss'] / 1e9:g} GB/s, task {c['task_s'] * 1e3:g} ms, "
          f"merge {c['merge_s_per_b'] * 1e9:.3f} ns/B measured here):")
    for row in rows:
        proj = row.get("projection")
        if row.get("error") or (proj is None and row["P"] % 4):
            continue
        name = row["contender"] + (f" {row['setting']}"
                                   if row.get("setting") else "")
        if proj is None:
            text = "- (not within 1 point)"
        elif "s_overlap" in proj:
            text = f"{proj['s_overlap']:.1f}-{proj['s_no_overlap']:.1f} s"
        elif "s_tree" in proj:
            text = f"{proj['s']:.1f} s ({proj['s_tree']:.1f} s tree)"
        else:
            text = f"{proj['s']:.1f} s (one GPU)"
        print(f"  {row['P'] // 4 or 1:>3} nodes, P={row['P']:>3} "
              f"{name:<28} {text}")


def plot(rows, single_acc, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    curves = {}
    for row in rows:
        if row.get("error") or row["contender"] == "single":
            continue
        name = ("ddp (better of P, sqrt P)" if row["contender"] == "ddp"
                else f"{row['contender']} {row['setting']}")
        curves.setdefault(name, []).append((row["P"], row["acc"]))
    fig, ax = plt.subplots(figsize=(6.8, 4.4))
    ax.axhspan(single_acc - 0.01, single_acc, color="0.85",
               label="single-process - 1 point")
    ax.axhline(single_acc, color="k", lw=1, label="single-process")
    for name, points in curves.items():
        ax.plot(*zip(*sorted(points)), "-o" if "ddp" not in name else "--s",
                ms=4, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("replicas P")
    ax.set_ylabel(f"test accuracy at epoch {args.epochs}")
    ax.set_title(f"{args.workload}: {args.n_train:,} rows, batch "
                 f"{args.batch}, seed {args.seed}", fontsize="small")
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    path = f"{args.plot}_{args.workload}.png"
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
