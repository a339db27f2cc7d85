"""The cost model, calibrated on the testbed's measurements.

``cost_model.py`` projects epoch times to a cluster from stated figures
(COMPSs transfers at 2 GB/s, 20 ms per task, DDP's all-reduce hidden or
not). This script replaces the ones the testbed measures, from
``time_to_accuracy.py --json`` outputs:

- **per-round overhead** ``h``: what a synchronous round costs beyond its
  training and its transfers, from the unshaped cell (epoch time minus
  the training floor, per merge round, minus the transfers at the
  measured rate);
- **transfer rate**: each link's measured goodput;
- **rows moved**: what the default global shuffle sends between nodes,
  from the rows' size;
- **DDP's overlap**: the share of the all-reduce hidden behind compute,
  ``(nosync step + ring time - DDP step) / ring time``, the ring time
  ``2 (P-1)/P M / B`` at the measured rate.

Then it predicts every cell (the synchronous estimator's epoch and DDP's
step) from the floors and those figures, prints predicted against
measured, and projects to the paper's cluster with ``_cost.py``'s
formulas, the per-task overhead and DDP's overlap replaced by the
measured ones.

The model of a synchronous round on the testbed (one replica per node,
P nodes, depth d = ceil(log2 P)): the replicas go up the tree, one model
per level over a link, and the merged model goes from one node to the
P - 1 others:

    round = h + (d + P - 1) M / B

With ``merge=sharded`` every node sends and receives (P - 1) / P of a
model twice, all links at once:

    round = h + 2 (P - 1) / P M / B

An epoch is its training floor and its rounds, plus, under the
estimators' default ``shuffle="global"``, the rows that change node: of
a node's D / P bytes of training rows, (P - 1) / P leave and as many
arrive, every link at once:

    epoch = floor + rounds x round + (P - 1) / P^2 D / B

(``shuffle="local"`` and ``"none"`` move no rows.) D is the report's
``data_bytes``, or for older reports its rows times a row's bytes.

``h`` is calibrated for each synchronous row (each setting) from its own
unshaped cell, and predicts its shaped cells; the projection uses the
defaults row's (``sync``).

    python benchmarks/cost_calibration.py tta2.json [tta4.json]

Not a test; never imported by the package.
"""

import argparse
import json
import math

from _cost import cluster, ddp, epoch_averaging, measure_merge  # noqa: E402
from _ddp import row_bytes  # noqa: E402
from _machine import print_header  # noqa: E402

# Float32 parameters of benchmarks/_ddp.py's models, for reports that
# do not carry their model's size (those before the size was recorded).
MODEL_BYTES = {"mlp4m": 4_207_626 * 4, "tiny": 2_372 * 4,
               "cnn": 26_154 * 4}


def model_bytes(report, default):
    """The model's bytes as the report's DDP rows measured them, else
    ``default``."""
    for cell in report["cells"]:
        for row in cell["contenders"]:
            if row.get("model_bytes"):
                return row["model_bytes"]
    return default


def data_bytes(report):
    """Bytes of the report's training rows (features and labels)."""
    if report.get("data_bytes"):
        return report["data_bytes"]
    argv = report.get("argv", [])

    def arg(flag, default):
        return argv[argv.index(flag) + 1] if flag in argv else default
    return int(arg("--n-train", 4096)) * row_bytes(arg("--model", "mlp4m"))


def shuffle_bytes(row, nodes, data):
    """Bytes of rows a global shuffle puts through each node's link in an
    epoch of the row (0 for the other shuffle modes); ``data`` the
    training rows' bytes."""
    if row.get("setting", {}).get("shuffle", "global") != "global":
        return 0.0
    return (nodes - 1) / nodes ** 2 * data


def _median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else \
        (values[mid - 1] + values[mid]) / 2


def _contender(cell, name):
    return next((c for c in cell["contenders"] if c["contender"] == name),
                None)


def _rounds(row):
    return _median([e.get("merges") for e in row["epochs"]]) or 1


def round_bytes(name, nodes, model_bytes):
    """Bytes a round of the synchronous row ``name`` puts through its
    busiest link, one after the other: the tree's (d + P - 1) models out
    of its root, or a sharded merge's 2 (P - 1) / P of a model on every
    link at once."""
    if "merge=sharded" in name:
        return 2 * (nodes - 1) / nodes * model_bytes
    d = math.ceil(math.log2(nodes)) if nodes > 1 else 0
    return (d + nodes - 1) * model_bytes


def _sync_rows(cell):
    """The synchronous estimator's rows of a cell (defaults and
    settings)."""
    return [c for c in cell["contenders"]
            if c["contender"].split(" ")[0] == "sync"
            and c.get("floor_epoch_seconds") is not None]


def calibrate(report, model_bytes, data=0):
    """``(hs, overlap)``: each synchronous row's per-round overhead (s),
    name -> h, from its unshaped cell, and DDP's median overlap; ``data``
    the training rows' bytes."""
    P = report["nodes"]
    hs = {}
    overlaps = []
    for cell in report["cells"]:
        B = cell["link_mbit_per_s"] * 1e6 / 8
        for row in _sync_rows(cell) if cell["rate"] == "none" else []:
            name = row["contender"]
            per_round = (row["epoch_seconds"] - row["floor_epoch_seconds"]
                         - shuffle_bytes(row, P, data) / B) / _rounds(row)
            hs[name] = per_round - round_bytes(name, P, model_bytes) / B
        best = report_ddp(cell)
        if best is not None and cell["rate"] != "none":
            ring = 2 * (P - 1) / P * model_bytes / B
            hidden = best["nosync_step_seconds"] + ring - best["step_seconds"]
            overlaps.append(min(1.0, max(0.0, hidden / ring)))
    return hs, _median(overlaps)


def report_ddp(cell):
    return _contender(cell, f"ddp-{cell.get('ddp_scaling') or 'linear'}")


def predict(report, model_bytes, hs, overlap, data=0):
    """Rows ``(link, contender, measured, predicted)`` of every cell."""
    P = report["nodes"]
    rows = []
    for cell in report["cells"]:
        B = cell["link_mbit_per_s"] * 1e6 / 8
        for row in _sync_rows(cell):
            name = row["contender"]
            if name not in hs:
                continue
            guess = row["floor_epoch_seconds"] + _rounds(row) * (
                hs[name] + round_bytes(name, P, model_bytes) / B) \
                + shuffle_bytes(row, P, data) / B
            rows.append((cell["rate"], f"{name} epoch", row["epoch_seconds"],
                         guess))
        best = report_ddp(cell)
        if best is not None and overlap is not None:
            ring = 2 * (P - 1) / P * model_bytes / B
            guess = best["nosync_step_seconds"] + (1 - overlap) * ring
            rows.append((cell["rate"], f"{best['contender']} step",
                         best["step_seconds"], guess))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reports", nargs="+",
                   help="time_to_accuracy.py --json outputs")
    p.add_argument("--model", default="mlp4m", choices=sorted(MODEL_BYTES),
                   help="the model of reports that do not record its size")
    args = p.parse_args(argv)
    print_header("cost_calibration")
    hs, overlaps = [], []
    for path in args.reports:
        with open(path) as f:
            report = json.load(f)
        M = model_bytes(report, MODEL_BYTES[args.model])
        D = data_bytes(report)
        rows_h, overlap = calibrate(report, M, D)
        hs.append(rows_h.get("sync"))
        overlaps.append(overlap)
        print(f"\n{path}: {report['nodes']} nodes, {D / 1e6:.1f} MB of "
              f"training rows; DDP's overlap "
              f"{'-' if overlap is None else f'{overlap:.2f}'}")
        for name, h in rows_h.items():
            print(f"  per-round overhead h = {h:.3f} s: {name}")
        rows = predict(report, M, rows_h, overlap, D)
        width = max([22] + [len(what) + 2 for _, what, _, _ in rows])
        links = max([6] + [len(link) + 2 for link, _, _, _ in rows])
        print(f"  {'link':<{links}}{'what':<{width}}{'measured':>10}"
              f"{'model':>10}{'error':>9}")
        for link, what, measured, guess in rows:
            err = (guess - measured) / measured
            print(f"  {link:<{links}}{what:<{width}}{measured:>10.3f}"
                  f"{guess:>10.3f}{100 * err:>8.0f}%"
                  f"{'' if abs(err) <= 0.3 else '  MISS'}")
    h = _median(hs)
    overlap = _median(overlaps)
    if h is None:
        return
    # The paper's cluster with the measured per-round overhead as the
    # per-task cost (a round is a chain of train + d merge tasks there:
    # h spread over them), and DDP's all-reduce hidden as measured.
    merge_s_per_b = measure_merge()
    print(f"\nProjection to the paper's cluster (cost_model.py's stated "
          f"figures; the task overhead and DDP's overlap replaced by the "
          f"measured ones: {h * 1e3:.0f} ms per round, overlap "
          f"{overlap if overlap is not None else 0:.2f})")
    print(f"{'nodes':>6}{'GPUs':>6}{'avg stated':>12}{'avg calib.':>12}"
          f"{'DDP stated':>14}{'DDP calib.':>12}")
    for n in (1, 2, 4, 8, 16, 32, 64):
        stated = cluster(merge_s_per_b)
        d = math.ceil(math.log2(n * stated["gpus_per_node"])) \
            if n * stated["gpus_per_node"] > 1 else 0
        calibrated = dict(stated, task_s=h / (d + 1))
        lo, hi = ddp(n, stated, True), ddp(n, stated, False)
        mixed = hi - (overlap or 0) * (hi - lo)
        print(f"{n:>6}{n * stated['gpus_per_node']:>6}"
              f"{epoch_averaging(n, stated):>12.2f}"
              f"{epoch_averaging(n, calibrated):>12.2f}"
              f"{lo:>7.2f}-{hi:<6.2f}{mixed:>12.2f}")


if __name__ == "__main__":
    main()
