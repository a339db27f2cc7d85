"""Time to accuracy against DDP across real (shaped) links.

Every contender trains the same model (``--model``, one of
``_ddp.MODELS``: by default ``mlp4m``, 1024-2048-1024-10, 4.2 M
parameters, 16.8 MB float32, on ``make_classification`` rows; ``tiny``,
the scaling benchmark's 32-64-4 MLP; ``cnn``, the accuracy benchmark's
CNN on its synthetic 3x32x32 images) on the same rows
(``_ddp.make_data``, seed ``--seed``), batch ``--batch`` per replica,
SGD at ``--lr`` with momentum ``--momentum``, for ``--epochs`` epochs:

``single``      plain PyTorch, one process, one thread, no testbed: its
                test accuracy at ``--epochs`` minus 1 point is the target;
``ddp-linear``, ``ddp-sqrt``
                DDP over gloo, one rank per node of a :class:`Testbed`
                (``_ddp.run_ddp``), the rate times P or sqrt(P), warmed
                up over the first epoch; each epoch is preceded by the
                same steps under ``no_sync()`` (no communication), DDP's
                compute-only floor. Both run unshaped for
                ``--max-epochs``; the better one (less time to target,
                else higher accuracy at ``--epochs``) runs
                ``--shaped-epochs`` epochs under each shaped link, and its
                time to target there is factored: (epochs to target, from
                the unshaped run) x (epoch time under that link), the
                epochs' accuracies printed beside the unshaped run's to
                show they do not depend on the link;
``sync``        ``SyncEpochAveragingClassifier(n_workers=nodes)`` at its
                defaults on the testbed's dask workers
                (``DISLIB_NN_BACKEND=dask``), scored each epoch on the
                test rows by tasks (``validation_data``); unshaped it runs
                until it reached the target and ``--epochs`` (at most
                ``--max-epochs``), under shaped links ``--shaped-epochs``
                epochs, factored as DDP;
``sync SETTING`` the same with ``--sync-setting`` (``key=value,...``);
``async``       ``AsyncEpochAveragingClassifier`` at its defaults, in
                full under every link (its merge order depends on timing);
``async SETTING`` the same with ``--async-setting`` (``max_lag=null``
                for None).

A fit's epoch 1 includes its start (placing the data on the workers);
factored times count epoch 1 as measured and later epochs at their mean.

The estimators run in a child process in the testbed's master namespace
(this file with ``--child``); a callback reads every interface's byte
counters at each epoch's end. The library's compute-only floor is its
training tasks' own compute time (``history_[i]["worker_compute_s"]``,
the slowest worker per epoch), from the same run.

``--links`` takes tc rates (``1gbit``, ``300mbit``...) and the names
``10gbe`` and ``1gbe``: the rate at which DDP's r (below) is the paper's
cluster's for this model and node count, computed from the unshaped
cell's DDP step (:func:`regime_rate`) and printed. With
``--data-on-workers`` the estimators' workers read their rows from .npy
files (``load_npy``) instead of receiving them from the master, as
DDP's ranks make theirs.

Per node count and link it prints the measured link rate, r = DDP's
communication time per step / its compute time per step (which cluster
the row stands for), and per contender the time to target, the accuracy
at ``--epochs``, the bytes all interfaces sent per epoch, the floors,
and the targets MET or MISSED. ``--json`` writes everything.

Run as root, one benchmark at a time::

    python benchmarks/time_to_accuracy.py --nodes 2 \\
        --links none,1gbit,300mbit,100mbit --json tta.json
    python benchmarks/time_to_accuracy.py --smoke       # under 2 minutes
    python benchmarks/time_to_accuracy.py --tables-from tta.json \
        --threshold 0.606          # the tables again, timed to 0.606

Not a test; never imported by the package.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _ddp import (MODELS, accuracy, build_model,  # noqa: E402
                  epoch_order, make_data, row_bytes, run_ddp)

# The link rates that keep DDP's r = communication / compute per step of
# mlp4m near a cluster's (docs/REALNET: 1gbit gives r ~ 3 at 2 nodes,
# 100mbit r ~ 27; at 4 nodes on 2 cores compute per step doubles, so the
# rates halve).
REGIMES = {2: {"1gbit": "10 GbE", "100mbit": "1 GbE"},
           4: {"500mbit": "10 GbE", "50mbit": "1 GbE"}}
PAPER_R = {"InfiniBand": 0.14, "10 GbE": 2.8, "1 GbE": 28.0}
#: Links named by the cluster whose ratio they stand for, for any model:
#: the rate is computed from the unshaped cell (:func:`regime_rate`).
REGIME_LINKS = {"10gbe": "10 GbE", "1gbe": "1 GbE"}


def regime_rate(ddp, regime, nodes):
    """The link rate (``"NNNkbit"``) at which DDP's r is the paper's for
    ``regime``, from DDP's unshaped row ``ddp``: its ring all-reduce
    sends 2(P - 1)/P model sizes per rank and step, and what its
    communication cost unshaped (its r there, latency and CPU) is
    counted in, so the link adds the rest:
    B = 2(P - 1)/P x M / ((r_paper - r_unshaped) x compute per step)."""
    extra = PAPER_R[regime] - ddp["r"]
    if extra <= 0:
        raise SystemExit(
            f"DDP's r unshaped ({ddp['r']:.2f}) is already above "
            f"{regime}'s ({PAPER_R[regime]}): no link rate reproduces it")
    bits = 2 * (nodes - 1) / nodes * ddp["model_bytes"] * 8 \
        / (extra * ddp["nosync_step_seconds"])
    return f"{max(1, round(bits / 1e3))}kbit"


# ------------------------------------------------------------ single
def run_single(args):
    """Plain PyTorch, one thread: per-epoch seconds and test accuracy."""
    torch.set_num_threads(1)
    X, y, X_test, y_test = make_data(args.model, args.n_train, args.n_test,
                                     args.seed)
    model = build_model(args.model, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr,
                          momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = args.n_train // args.batch
    epochs = []
    for epoch in range(args.epochs):
        order = epoch_order(args.n_train, epoch, args.seed)
        start = time.perf_counter()
        for k in range(steps):
            rows = order[k * args.batch:(k + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(X[rows]), y[rows]).backward()
            opt.step()
        seconds = time.perf_counter() - start
        epochs.append({"epoch": epoch + 1, "seconds": seconds,
                       "test_accuracy": accuracy(model, X_test, y_test)})
        print(f"  single epoch {epoch + 1}: {seconds:.2f} s, accuracy "
              f"{epochs[-1]['test_accuracy']:.4f}", flush=True)
    return {"contender": "single", "epochs": epochs}


# ------------------------------------------------------------ the child
def _wire_bytes():
    """Bytes every testbed interface sent so far (master's included)."""
    stats = "/sys/class/net/eth0/statistics/tx_bytes"
    with open(stats) as f:                  # we run in the master
        total = int(f.read())
    for ns in os.environ["TESTBED_NETNS"].split(","):
        done = subprocess.run(["ip", "netns", "exec", ns, "cat", stats],
                              capture_output=True, text=True, check=True)
        total += int(done.stdout)
    return total


def _parse_setting(text):
    """``"shuffle=local,lr_scaling=sqrt"`` -> a dict of parameters."""
    params = {}
    for item in filter(None, (text or "").split(",")):
        key, _, value = item.partition("=")
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value.strip()
    return params


def run_child(args):
    """Fit one estimator on the testbed (in its master); write JSON."""
    import dislib_nn
    from dislib_nn.callbacks import Callback

    class StopAtTarget(Callback):
        # Ends the fit once the accuracy at --epochs is known and the
        # target was reached (the loop reads an epoch one epoch late, so
        # one more epoch may run; the times come from history_).
        def __init__(self):
            self.reached = False

        def on_epoch_end(self, state, record, handle):
            score = record["valid_score"]
            self.reached = self.reached or (score is not None and
                                            score >= args.child_target)
            return self.reached and record["epoch"] >= args.epochs

    class WireCounter(Callback):
        def __init__(self):
            self.samples = []

        def on_fit_begin(self, state):
            self.samples.append((time.perf_counter(), _wire_bytes()))

        def on_epoch_end(self, state, record, handle):
            self.samples.append((time.perf_counter(), _wire_bytes()))

    torch.set_num_threads(1)
    X, y, X_test, y_test = _child_data(args)
    kind = {"sync": dislib_nn.SyncEpochAveragingClassifier,
            "async": dislib_nn.AsyncEpochAveragingClassifier}[args.child]
    wire = WireCounter()
    setting = _parse_setting(args.child_setting)
    clf = kind(module=build_model(args.model, args.seed),
               optimizer=torch.optim.SGD, optimizer__momentum=args.momentum,
               lr=args.lr, batch_size=args.batch,
               n_epochs=args.child_epochs, n_workers=args.nodes,
               random_state=args.seed,
               validation_data=(X_test, y_test),
               callbacks=[("wire", wire), ("stop", StopAtTarget())],
               **setting)
    before, start = _wire_bytes(), time.perf_counter()
    clf.fit(X, y)
    wall, after = time.perf_counter() - start, _wire_bytes()
    history = clf.history_
    report = {"contender": args.child + (f" {args.child_setting}"
                                         if args.child_setting else ""),
              "setting": setting, "fit_seconds": wall,
              "fit_bytes": after - before,
              "epoch_end_bytes": [b - before for _, b in wire.samples[1:]],
              "test_accuracy": float(clf.score(X_test, y_test)),
              "schedule": history[0].get("schedule"), "epochs": []}
    for h in history:
        report["epochs"].append({
            "epoch": h["epoch"], "seconds": h["dur_s"],
            "test_accuracy": h["valid_score"],
            "compute_seconds": max(h["worker_compute_s"]),
            "worker_compute_s": h["worker_compute_s"],
            "merges": h.get("n_merges", len(h.get("merges") or []))})
    with open(args.child_json, "w") as f:
        json.dump(report, f, indent=1)
    return 0


def _child_data(args):
    """The child's ``X, y, X_test, y_test``: arrays made here, or with
    ``--data-on-workers`` DsTensors whose blocks the workers read from
    the files the driver wrote (:func:`write_data`), one block per node,
    so that no row leaves the master."""
    if not args.child_data:
        return tuple(a.numpy() for a in make_data(
            args.model, args.n_train, args.n_test, args.seed))
    from dislib_nn.data import load_npy
    return tuple(load_npy(os.path.join(args.child_data, f"{name}.npy"),
                          n_blocks=args.nodes)
                 for name in _DATA_FILES)


_DATA_FILES = ("X", "y", "X_test", "y_test")


def write_data(args):
    """Write the run's data as .npy files in ``args.tmp`` (which every
    node reads: the namespaces share the file system); the folder."""
    folder = os.path.join(args.tmp, "data")
    os.makedirs(folder)
    for name, values in zip(_DATA_FILES, make_data(
            args.model, args.n_train, args.n_test, args.seed)):
        np.save(os.path.join(folder, f"{name}.npy"), values.numpy())
    return folder


def run_estimator(tb, args, kind, setting="", epochs=None, target=2.0):
    """Run the child for ``kind`` in the testbed's master; its report."""
    out = os.path.join(args.tmp, f"{kind}-{len(os.listdir(args.tmp))}.json")
    argv = [sys.executable, os.path.abspath(__file__), "--child", kind,
            "--child-json", out, "--child-setting", setting,
            "--child-epochs", epochs or args.max_epochs,
            "--child-target", target,
            "--nodes", args.nodes, "--epochs", args.epochs,
            "--model", args.model, "--n-train", args.n_train,
            "--n-test", args.n_test, "--batch", args.batch,
            "--lr", args.lr, "--momentum", args.momentum,
            "--seed", args.seed]
    if args.data_folder:
        argv += ["--child-data", args.data_folder]
    before = tb.counters()
    done = tb.run(argv, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                  timeout=args.timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {setting} failed:\n{done.stdout[-3000:]}")
    with open(out) as f:
        report = json.load(f)
    after = tb.counters()
    report["bytes"] = _bytes_between(before, after)
    report["bytes_by_node"] = {
        ns: {k: after[ns][k] - before[ns][k] for k in ("tx_bytes",
                                                       "rx_bytes")}
        for ns in after}
    return report


def _bytes_between(before, after):
    return sum(after[ns]["tx_bytes"] - before[ns]["tx_bytes"] for ns in after)


# ------------------------------------------------------------ analysis
def epochs_to(epochs, target):
    """The first epoch (1-based) whose accuracy reaches ``target``."""
    for row in epochs:
        if row["test_accuracy"] >= target:
            return row["epoch"]
    return None


def summarise(report, target, at_epoch):
    """Add time to target, accuracy at the end, bytes and floor."""
    rows = report["epochs"]
    k = epochs_to(rows, target)
    report["epochs_to_target"] = k
    report["final_accuracy"] = rows[min(at_epoch, len(rows)) - 1][
        "test_accuracy"]
    report["epochs_run"] = len(rows)
    report["time_to_target"] = None if k is None else \
        sum(r["seconds"] for r in rows[:k])
    floor = [r.get("compute_seconds", r.get("nosync_seconds")) for r in rows]
    if all(f is not None for f in floor):
        report["floor_epoch_seconds"] = sum(floor) / len(floor)
        report["floor_to_target"] = None if k is None else sum(floor[:k])
    report["epoch_seconds"] = sum(r["seconds"] for r in rows) / len(rows)
    # Epoch 1 also carries the fit's start (the data's trip out of the
    # master, the workers' first imports): the later epochs apart.
    later = rows[1:] or rows
    report["later_epoch_seconds"] = sum(r["seconds"] for r in later) \
        / len(later)
    if "epoch_end_bytes" in report and len(report["epoch_end_bytes"]) > 2:
        marks = report["epoch_end_bytes"]
        steps = [b - a for a, b in zip(marks[1:], marks[2:])]
        report["bytes_per_epoch"] = float(np.median(steps))
    elif "bytes" in report:
        report["bytes_per_epoch"] = report["bytes"] / len(rows)
    return report


def ddp_report(raw, label):
    rows = [{"epoch": e["epoch"], "seconds": e["seconds"],
             "nosync_seconds": e["nosync_seconds"],
             "test_accuracy": e["test_accuracy"]} for e in raw["epochs"]]
    step, nosync = (np.mean([e[k] for e in raw["epochs"]]) for k in
                    ("step_seconds", "nosync_step_seconds"))
    return {"contender": label, "epochs": rows,
            "bytes": sum(b["tx_bytes"] for b in raw["bytes"].values()),
            "steps_per_epoch": raw["steps_per_epoch"],
            "step_seconds": float(step), "nosync_step_seconds": float(nosync),
            "model_bytes": raw["model_bytes"],
            "r": float((step - nosync) / nosync)}


def _fmt(seconds):
    return "-" if seconds is None else f"{seconds:.1f}"


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def _mark(ok):
    return "MET" if ok else "MISSED"


# ------------------------------------------------------------ the driver
def _workers_import_here():
    """Put this folder on the ``PYTHONPATH`` the testbed's processes
    inherit: the dask workers unpickle the CNN as ``_common.CNN`` and
    import this folder's modules as this script does, wherever it was
    started from."""
    path = os.environ.get("PYTHONPATH", "")
    if HERE not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (HERE, path) if p)


def run_link(args, rate, target, unshaped):
    """Every contender on one testbed of ``--nodes`` at ``rate``."""
    from testbed import Testbed
    shaped = rate != "none"
    cell = {"rate": rate, "contenders": []}
    with Testbed(args.nodes, rate=rate, dask=True, prefix=args.prefix,
                 timeout=120) as tb:
        link = tb.measure_throughput()
        cell["link_mbit_per_s"] = link["mbit_per_s"]
        print(f"\n== {args.nodes} nodes, link {rate}: {link['mbit_per_s']:.0f}"
              f" Mbit/s measured, idle round trip {link['rtt_ms']:.3f} ms",
              flush=True)
        # Shaped, DDP runs at the scaling that won unshaped (none when
        # DDP is not a contender of this run).
        scalings = ["linear", "sqrt"] if not shaped else \
            [s for s in [unshaped.get("ddp_scaling")] if s is not None]
        ddp_epochs = args.shaped_epochs if shaped else args.max_epochs
        for scaling in scalings:
            if f"ddp-{scaling}" not in args.contenders:
                continue
            print(f"  ddp-{scaling}: {ddp_epochs} epoch(s)", flush=True)
            raw = run_ddp(tb, args.nodes, model=args.model, epochs=ddp_epochs,
                          batch=args.batch, lr=args.lr, lr_scaling=scaling,
                          momentum=args.momentum, n_train=args.n_train,
                          n_test=args.n_test, seed=args.seed,
                          timeout=args.timeout)
            rep = summarise(ddp_report(raw, f"ddp-{scaling}"), target,
                            args.epochs)
            if shaped:
                _factor(rep, unshaped)
            cell["contenders"].append(rep)
            _print_row(rep)
        for kind, setting in args.estimators:
            # Synchronous fits are factored under shaped links (their
            # accuracy per epoch does not depend on the link, shown by
            # the printed accuracies); asynchronous ones run in full.
            factored = shaped and kind == "sync"
            epochs = args.shaped_epochs if factored else args.max_epochs
            print(f"  {kind} {setting or '(defaults)'}: "
                  + (f"{epochs} epochs" if factored else
                     f"until the target and epoch {args.epochs}, at most "
                     f"{epochs}"), flush=True)
            rep = summarise(run_estimator(
                tb, args, kind, setting, epochs,
                2.0 if factored else target), target, args.epochs)
            if factored:
                _factor(rep, unshaped)
            cell["contenders"].append(rep)
            _print_row(rep)
    ddp = [c for c in cell["contenders"] if c["contender"].startswith("ddp")]
    if ddp:
        cell["r"] = min(ddp, key=lambda c: c["r"])["r"]
    return cell


def _factor(rep, unshaped):
    """Time to target under a shaped link = (epochs to target of the
    unshaped run) x (the mean epoch time measured here)."""
    base = next(c for c in unshaped["contenders"]
                if c["contender"] == rep["contender"])
    k, n = base["epochs_to_target"], len(rep["epochs"])
    rep["factored_from_unshaped"] = True
    rep["unshaped_accuracies"] = [e["test_accuracy"]
                                  for e in base["epochs"][:n]]
    rep["epochs_to_target"] = k
    rep["final_accuracy"] = base["final_accuracy"]
    # Epoch 1 carries the fit's start (data placement, first imports):
    # count it as measured here, and later epochs at their mean here.
    rep["time_to_target"] = None if k is None else \
        rep["epochs"][0]["seconds"] + (k - 1) * rep["later_epoch_seconds"]
    floors = [e.get("compute_seconds", e.get("nosync_seconds"))
              for e in rep["epochs"]]
    fl = floors[1:] or floors
    rep["floor_to_target"] = None if k is None else \
        floors[0] + (k - 1) * sum(fl) / len(fl)


def _print_row(rep):
    accs = " ".join(f"{e['test_accuracy']:.3f}" for e in rep["epochs"])
    extra = ""
    if rep.get("factored_from_unshaped"):
        extra = (" (factored: epochs to target from the unshaped run; "
                 "unshaped accuracies of these epochs " + " ".join(
                     f"{a:.3f}" for a in rep["unshaped_accuracies"]) + ")")
    print(f"    accuracies per epoch: {accs}{extra}")
    print(f"    epoch {rep['epoch_seconds']:.2f} s (epoch 1 "
          f"{rep['epochs'][0]['seconds']:.2f} s, later "
          f"{rep['later_epoch_seconds']:.2f} s), floor "
          f"{rep.get('floor_epoch_seconds', float('nan')):.2f} s/epoch, "
          f"epochs to target {rep['epochs_to_target'] or '-'}, time to "
          f"target {_fmt(rep['time_to_target'])} s, bytes/epoch "
          f"{rep['bytes_per_epoch'] / 1e6:.1f} MB", flush=True)


def pick_ddp(contenders):
    """The better DDP scaling: less time to target, else final accuracy."""
    ddp = [c for c in contenders if c["contender"].startswith("ddp")]
    return min(ddp, key=lambda c: (c["time_to_target"] is None,
                                   c["time_to_target"] or 0,
                                   -c["final_accuracy"]))


def judge(cells, nodes):
    """The targets, each MET or MISSED, as records: for every estimator
    row of every cell (the issue states them for ``sync``, the
    synchronous defaults; the other rows are the settings tried)."""
    verdicts = []
    regimes = REGIMES.get(nodes, {})
    for cell in cells:
        ddp = next((c for c in cell["contenders"]
                    if c["contender"].startswith("ddp")), None)
        if cell["rate"] == "none" and ddp:
            ddp = pick_ddp(cell["contenders"])
        if not ddp:
            continue
        regime = cell.get("regime", regimes.get(cell["rate"]))
        for row in cell["contenders"]:
            name = row["contender"]
            if name.startswith("ddp") or name == "single":
                continue
            verdicts.extend(_row_verdicts(row, ddp, cell["rate"], regime))
    return verdicts


def _row_verdicts(row, ddp, rate, regime):
    """The targets that apply to one estimator row against DDP's."""
    name, out = row["contender"], []
    t_lib = row["time_to_target"]
    ratio = _ratio(t_lib, ddp["time_to_target"])

    def verdict(target, value, bound):
        out.append({"link": rate, "regime": regime or "unshaped",
                    "contender": name, "target": f"{name}: {target}",
                    "value": value,
                    "met": value is not None and value <= bound})
    bound = {"10 GbE": 0.5, "1 GbE": 0.2}.get(regime)
    if bound:
        verdict(f"time to target <= {bound} x DDP's", ratio, bound)
    if regime == "10 GbE":
        verdict("time to target <= 1.3 x its compute floor",
                _ratio(t_lib, row.get("floor_to_target")), 1.3)
    if rate == "none":
        verdict("not slower than DDP to target", ratio, 1.0)
    return out


def print_tables(cells, nodes, target):
    print(f"\n=== {nodes} nodes: target accuracy {target:.4f}")
    for cell in cells:
        r = cell.get("r")
        regime = cell.get("regime") or \
            REGIMES.get(nodes, {}).get(cell["rate"], "")
        print(f"\nlink {cell['rate']} ({cell['link_mbit_per_s']:.0f} Mbit/s "
              f"measured): DDP r = comm/compute per step = "
              + ("-" if r is None else f"{r:.2f}")
              + (f"; stands for {regime} (paper r = {PAPER_R[regime]})"
                 if regime else ""))
        ddp = [c for c in cell["contenders"]
               if c["contender"].startswith("ddp")]
        best = pick_ddp(cell["contenders"]) if ddp else None
        # Whole names: settings rows differ only at their ends.
        width = max([28] + [len(c["contender"])
                            for c in cell["contenders"]])
        print(f"  {'contender':{width}s} {'to target s':>11s} {'epochs':>6s} "
              f"{'acc@E':>6s} {'epoch s':>7s} {'floor s/ep':>10s} "
              f"{'MB/epoch':>8s} {'vs DDP':>6s} {'vs floor':>8s}")
        for c in cell["contenders"]:
            vs_ddp = _ratio(c["time_to_target"],
                            best and best["time_to_target"])
            vs_floor = _ratio(c["time_to_target"], c.get("floor_to_target"))
            print(f"  {c['contender']:{width}s} "
                  f"{_fmt(c['time_to_target']):>11s} "
                  f"{str(c['epochs_to_target'] or '-'):>6s} "
                  f"{c['final_accuracy']:6.3f} {c['epoch_seconds']:7.2f} "
                  f"{c.get('floor_epoch_seconds', float('nan')):10.2f} "
                  f"{c['bytes_per_epoch'] / 1e6:8.1f} "
                  f"{'-' if vs_ddp is None else f'{vs_ddp:.2f}':>6s} "
                  f"{'-' if vs_floor is None else f'{vs_floor:.2f}':>8s}")


def reanalyse(path, threshold):
    """Print the tables of a saved ``--json`` at another accuracy
    threshold (``None``: the run's own target); no training."""
    with open(path) as f:
        report = json.load(f)
    threshold = report["target"] if threshold is None else threshold
    epochs = report.get("epochs") or 10
    cells = report["cells"]
    for cell in cells:
        for c in cell["contenders"]:
            summarise(c, threshold, epochs)
            if c.get("factored_from_unshaped"):
                _factor(c, cells[0])
    print(f"{path}: the run's target {report['target']:.4f}; tables at "
          f"{threshold:.4f}")
    print_tables(cells, report["nodes"], threshold)
    for v in judge(cells, report["nodes"]):
        value = "-" if v["value"] is None else f"{v['value']:.2f}"
        print(f"  [{_mark(v['met'])}] {v['link']} ({v['regime']}): "
              f"{v['target']}: {value}")
    return 0


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.child:
        return run_child(args)
    if args.tables_from:
        return reanalyse(args.tables_from, args.threshold)
    if args.smoke:
        args.model, args.n_train, args.n_test = "tiny", 1024, 256
        args.epochs, args.max_epochs, args.shaped_epochs = 2, 3, 2
        if args.contenders == _parser().get_default("contenders"):
            args.contenders = "ddp-linear,sync,async"
        args.links = args.links or "none,100mbit"
    args.links = (args.links or "none,1gbit,300mbit,100mbit").split(",")
    args.contenders = args.contenders.split(",")
    # Estimator rows in the order the contenders name them.
    args.estimators = []
    for c in args.contenders:
        kind = c.split("-")[0]
        if c in ("sync", "async"):
            args.estimators.append((kind, ""))
        elif c in ("sync-setting", "async-setting"):
            settings = getattr(args, f"{kind}_setting")
            args.estimators.extend((kind, s) for s in settings.split(";")
                                   if s)
    from _machine import print_header
    from testbed import unavailable_reason
    print_header("time_to_accuracy.py")
    print(f"seed {args.seed}; model {args.model}; {args.n_train} training, "
          f"{args.n_test} test rows; batch {args.batch} per replica; SGD lr "
          f"{args.lr} momentum {args.momentum}; {args.epochs} epochs; "
          f"{args.nodes} nodes, one process and one torch thread each on "
          f"{os.cpu_count()} cores", flush=True)
    reason = unavailable_reason()
    if reason:
        print(f"time_to_accuracy.py: cannot build a testbed: {reason}",
              file=sys.stderr)
        return 2
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    _workers_import_here()
    import shutil
    import tempfile
    # The children's reports, removed however the run ends.
    args.tmp = tempfile.mkdtemp(prefix="tta-")
    try:
        return _run(args)
    finally:
        shutil.rmtree(args.tmp, ignore_errors=True)


def _regime_link(unshaped, regime, nodes):
    """The rate standing for ``regime``, printed; DDP must have run."""
    ddp = [c for c in unshaped["contenders"]
           if c["contender"].startswith("ddp")]
    if not ddp:
        raise SystemExit(f"a link named {regime} needs DDP unshaped: its "
                         f"rate comes from DDP's measured step")
    rate = regime_rate(pick_ddp(ddp), regime, nodes)
    print(f"\n{regime}'s ratio (r = {PAPER_R[regime]}) for this model at "
          f"{nodes} nodes: {rate}", flush=True)
    return rate


def _run(args):
    """The runs and the tables, once the testbed can be built."""
    print("\nsingle-process PyTorch (the reference):", flush=True)
    single = summarise(run_single(args), 0.0, args.epochs)
    target = single["final_accuracy"] - 0.01
    single = summarise(single, target, args.epochs)
    print(f"target: {single['final_accuracy']:.4f} - 0.01 = {target:.4f}; "
          f"single reaches it at epoch {single['epochs_to_target']}, "
          f"{_fmt(single['time_to_target'])} s", flush=True)
    cells, unshaped = [], None
    args.data_folder = write_data(args) if args.data_on_workers else None
    if "none" in args.links:
        args.links.remove("none")
        args.links.insert(0, "none")
    for rate in args.links:
        if rate != "none" and unshaped is None:
            raise SystemExit("the unshaped link must run first (DDP's "
                             "epochs to target come from it)")
        regime = REGIME_LINKS.get(rate.lower())
        if regime:
            rate = _regime_link(unshaped, regime, args.nodes)
        cell = run_link(args, rate, target, unshaped)
        cell["regime"] = regime or REGIMES.get(args.nodes, {}).get(rate)
        if rate == "none":
            unshaped = cell
            ddp = [c for c in cell["contenders"]
                   if c["contender"].startswith("ddp")]
            if ddp:
                cell["ddp_scaling"] = pick_ddp(ddp)["contender"][4:]
                print(f"  DDP's better scaling here: {cell['ddp_scaling']}")
        cells.append(cell)
    print_tables(cells, args.nodes, target)
    verdicts = judge(cells, args.nodes)
    print("\ntargets:")
    if not verdicts:
        print("  none judged: the targets are ratios to DDP, which was not "
              "a contender of this run")
    for v in verdicts:
        value = "-" if v["value"] is None else f"{v['value']:.2f}"
        print(f"  [{_mark(v['met'])}] {v['link']} ({v['regime']}): "
              f"{v['target']}: {value}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv[1:], "seed": args.seed,
                       "epochs": args.epochs,
                       "nodes": args.nodes, "target": target,
                       "data_bytes": args.n_train * row_bytes(args.model),
                       "single": single, "cells": cells,
                       "verdicts": verdicts}, f, indent=1)
    return 0


def _parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--links", help="rates, comma-separated; 'none' first "
                   "(default none,1gbit,300mbit,100mbit)")
    p.add_argument("--contenders",
                   default="ddp-linear,ddp-sqrt,sync,sync-setting,async")
    p.add_argument("--sync-setting", default="shuffle=local",
                   help="key=value,... for another sync row; several "
                        "rows separated by ';'")
    p.add_argument("--async-setting", default="",
                   help="key=value,... for asynchronous rows (contender "
                        "async-setting); several separated by ';'")
    p.add_argument("--model", default="mlp4m", choices=MODELS)
    p.add_argument("--data-on-workers", action="store_true",
                   help="the estimators' workers read the rows from .npy "
                        "files (load_npy, one block per node) instead of "
                        "receiving them from the master, as DDP's ranks "
                        "make theirs: what a cluster's shared file system "
                        "gives")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--max-epochs", type=int, default=20,
                   help="unshaped DDP and every full estimator fit run "
                        "until the target (estimators stop there once "
                        "--epochs are done), at most this many epochs")
    p.add_argument("--shaped-epochs", type=int, default=3,
                   help="epochs of DDP and of the synchronous estimators "
                        "under a shaped link (their time to target is "
                        "factored)")
    p.add_argument("--n-train", type=int, default=4096)
    p.add_argument("--n-test", type=int, default=1024)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--prefix", default="dtta")
    p.add_argument("--smoke", action="store_true",
                   help="tiny model, 2 epochs, links none,100mbit")
    p.add_argument("--json")
    p.add_argument("--tables-from", metavar="JSON",
                   help="print the tables of a saved --json and exit")
    p.add_argument("--threshold", type=float,
                   help="with --tables-from: the accuracy to time to "
                        "instead of the run's target")
    p.add_argument("--child", choices=("sync", "async"),
                   help=argparse.SUPPRESS)
    p.add_argument("--child-json", help=argparse.SUPPRESS)
    p.add_argument("--child-setting", default="", help=argparse.SUPPRESS)
    p.add_argument("--child-epochs", type=int, help=argparse.SUPPRESS)
    p.add_argument("--child-target", type=float, help=argparse.SUPPRESS)
    p.add_argument("--child-data", help=argparse.SUPPRESS)
    return p


if __name__ == "__main__":
    sys.exit(main())
