"""A user's training script, as the README shows it: the module in __main__.

Fits each estimator (both strategies) with the default settings, and with
optimizer_state="average", validation and early stopping, on arrays and
on ds-tensors, with a checkpoint resumed, and with a training forward
that raises under on_failure="retry" and "skip"; predicts and scores;
and asynchronous fits whose merge order the tests replay.
Prints one JSON report: the final weights (summed per entry),
predictions and scores, so that a run under the emulated ``runcompss``
can be compared with plain ``python``.
"""

import json
import os
import sys
import tempfile

import numpy as np
import torch
from sklearn.datasets import make_classification, make_regression
from torch import nn

import dislib_nn as dnn
from dislib_nn import runtime


class MLP(nn.Module):
    """Defined in the script: COMPSs workers cannot import it by name."""

    def __init__(self, n_features_in, n_outputs=None, n_classes=None):
        super().__init__()
        out = n_classes if n_classes is not None else n_outputs
        self.net = nn.Sequential(nn.Linear(n_features_in, 16),
                                 nn.BatchNorm1d(16), nn.ReLU(),
                                 nn.Linear(16, out))

    def forward(self, x):
        return self.net(x)


MARKER = 7.25

# The cases of one feature each have workers shuffle their own rows: the
# global shuffle's tasks (five a block and epoch, most of what a fit
# this small submits) run in each kind's default, average and lag0 fits.
OWN_ROWS = {"shuffle": "local"}
# DiLoCo's outer step (Nesterov SGD on the averaged update).
OUTER = {"outer_optimizer": torch.optim.SGD, "outer_optimizer__lr": 0.7,
         "outer_optimizer__momentum": 0.9, "outer_optimizer__nesterov": True,
         **OWN_ROWS}
# Two merges an epoch with bf16 updates as their payloads.
HALF_BF16 = {"sync_every": 0.5, "merge_precision": "bf16", **OWN_ROWS}


class FaultyMLP(MLP):
    """Raises in a training forward whose batch holds the marker row: every
    time (``once=""``), or the first time only (``once`` names the flag
    file that records it). The worker that gets the row depends on the
    seed only, so both backends see the same faults."""

    def __init__(self, n_features_in, n_outputs=None, n_classes=None,
                 once=""):
        super().__init__(n_features_in, n_outputs, n_classes)
        self.once = once

    def forward(self, x):
        if self.training and bool((x[:, 0] == MARKER).any()):
            if not self.once or not os.path.exists(self.once):
                if self.once:
                    open(self.once, "w").close()
                raise ValueError("a corrupt row")
        return super().forward(x)


def weights(estimator):
    return {k: float(v.double().sum())
            for k, v in estimator.module_.state_dict().items()}


def summary(estimator, X, y, ds=False):
    """What a fit learned; with ``ds``, also its predictions and score on
    ds-tensors (the same tasks whatever the fit's settings: the default
    ones only, as every emulated task costs its executor two full garbage
    collections)."""
    out = {"weights": weights(estimator),
           "history": [[h["train_loss"], h["valid_loss"]]
                       for h in estimator.history_],
           "predict": np.asarray(estimator.predict(X[:8])).tolist(),
           "score": estimator.score(X, y)}
    if ds:
        ds_x = dnn.from_array(X, n_blocks=2)
        ds_y = dnn.from_array(y, n_blocks=2)
        out["ds_score"] = estimator.score(ds_x, ds_y)
        out["ds_predict"] = estimator.predict(ds_x).collect()[:8].tolist()
    return out


class HalveAfterFirst(dnn.callbacks.Callback):
    """A user's callback, defined in the script: it runs on the master,
    halves the rate after the first epoch and records what it saw."""

    def initialize(self):
        self.calls = []
        return self

    def on_epoch_begin(self, state, epoch):
        if epoch > 0:
            state.lr *= 0.5
        self.calls.append(["begin", epoch + 1])

    def on_epoch_end(self, state, record, handle):
        self.calls.append(["end", record.epoch, record["n_merges"]])


def scheduled_fit(X, y):
    """A per-step OneCycle schedule over two merges an epoch (each
    training task starts the schedule at its own first step), and a
    callback of the script's that changes the rate."""
    halve = HalveAfterFirst()
    est = dnn.SyncEpochAveragingRegressor(
        module=MLP, n_epochs=2, batch_size=16, n_workers=2, random_state=0,
        sync_every=0.5, shuffle="local", callbacks=[dnn.callbacks.LRScheduler(
            torch.optim.lr_scheduler.OneCycleLR, step_every="batch",
            max_lr=0.1), halve])
    est.fit(X, y)
    out = summary(est, X, y)
    out["n_merges"] = [r["n_merges"] for r in est.history_]
    out["lr"] = [r["lr"] for r in est.history_]
    out["calls"] = halve.calls
    return out


def resumed_fit(X, y):
    """A 2-epoch fit with a checkpoint, then resumed to 3 (the master
    fetches each merged epoch's copy; the optimizer states and the
    momentum buffer travel with it)."""
    with tempfile.TemporaryDirectory() as directory:
        for n_epochs, resume in ((2, False), (3, True)):
            est = dnn.SyncEpochAveragingRegressor(
                module=MLP, n_epochs=n_epochs, batch_size=16, n_workers=2,
                random_state=0, optimizer__momentum=0.9, outer_momentum=0.5,
                shuffle="local", checkpoint_dir=directory)
            est.fit(X, y, resume=resume)
        return summary(est, X, y)


def faulty_fits(X, y):
    """A fit whose worker raises once (``"retry"`` reruns that epoch) and
    one whose worker raises in every epoch (``"skip"`` drops it). Here, as
    in :func:`resumed_fit`, workers shuffle their own rows: the global
    shuffle's tasks run in the default fits."""
    X = X.copy()
    X[5, 0] = MARKER
    out = {}
    with tempfile.TemporaryDirectory() as directory:
        for policy, once in (("retry", os.path.join(directory, "once")),
                             ("skip", "")):
            est = dnn.SyncEpochAveragingRegressor(
                module=FaultyMLP, module__once=once, n_epochs=2,
                batch_size=16, n_workers=2, random_state=0,
                shuffle="local", on_failure=policy)
            est.fit(X, y)
            out[f"regressor/{policy}"] = {
                "weights": weights(est),
                "retried": [h["retried"] for h in est.history_],
                "skipped": [h["skipped"] for h in est.history_]}
    return out


def merge_order(X, y):
    """Asynchronous fits of 4 epochs whose merges the tests replay from
    ``history_``: without a lag bound, and with ``max_lag=1``."""
    out = {}
    for name, lag in (("nolag", None), ("lag1", 1)):
        est = dnn.AsyncEpochAveragingClassifier(
            module=MLP, n_epochs=4, batch_size=16, n_workers=2,
            random_state=0, max_lag=lag, shuffle="local")
        est.fit(X, y)
        out[f"async-classifier/{name}"] = {
            "weights": weights(est),
            "merges": [h["merges"] for h in est.history_],
            "worker_samples": [h["worker_samples"] for h in est.history_],
            "n_rows": len(X),
            "staleness_exponent": est.staleness_exponent}
    return out


def main(parts):
    Xc, yc = make_classification(n_samples=120, n_features=6,
                                 n_informative=4, n_classes=3,
                                 random_state=0)
    Xr, yr = make_regression(n_samples=120, n_features=6, noise=0.1,
                             random_state=0)
    Xc, Xr = Xc.astype(np.float32), Xr.astype(np.float32)
    yr = (yr / np.abs(yr).max()).astype(np.float32)
    report = {"backend": runtime.backend_name()}
    settings = {
        "default": {},
        "average": {"optimizer_state": "average", "optimizer":
                    torch.optim.Adam, "validation_fraction": 0.2,
                    "early_stopping": True, "patience": 1},
    }
    kinds = {"classifier": (dnn.SyncEpochAveragingClassifier, Xc, yc),
             "regressor": (dnn.SyncEpochAveragingRegressor, Xr, yr),
             "async-classifier": (dnn.AsyncEpochAveragingClassifier, Xc,
                                  yc),
             "async-regressor": (dnn.AsyncEpochAveragingRegressor, Xr, yr)}
    for kind, (Estimator, X, y) in kinds.items():
        if ("async" if kind.startswith("async") else "sync") not in parts:
            continue
        runs = dict(settings)
        if kind.startswith("async"):
            # Every epoch from the model with all of the previous epoch's
            # merges: the synchronous strategy's model, in any merge order.
            runs["lag0"] = {"max_lag": 0}
        if kind == "classifier":
            runs["outer"] = OUTER
            # bf16 updates as merge payloads: after two shares of each
            # epoch, and after a round of two epochs (the update from
            # the round's start, which the second epoch's task is given).
            runs["half-bf16"] = HALF_BF16
            runs["every2-bf16"] = {"merge_precision": "bf16",
                                   "sync_every": 2, **OWN_ROWS}
            # Each worker merges one shard (COLLECTION_OUT pieces), two
            # merges an epoch.
            runs["sharded"] = {"merge": "sharded", "sync_every": 0.5,
                               **OWN_ROWS}
            # The BatchNorm statistics recomputed after the last merge.
            runs["batchnorm"] = {"recompute_batchnorm": True, **OWN_ROWS}
        if kind == "async-classifier":
            # The delayed outer step with no lag: the synchronous one.
            runs["lag0-outer"] = dict(OUTER, max_lag=0)
            # Rounds of half an epoch with no lag: the synchronous ones.
            runs["lag0-half-bf16"] = dict(HALF_BF16, max_lag=0)
        for name, extra in runs.items():
            est = Estimator(module=MLP, n_epochs=2, batch_size=16,
                            n_workers=2, random_state=0, **extra)
            if name != "average":
                est.fit(X, y)
            else:       # ds-tensors in, as on a cluster
                est.fit(dnn.from_array(X, n_blocks=2),
                        dnn.from_array(y, n_blocks=2))
            report[f"{kind}/{name}"] = summary(est, X, y,
                                               ds=name == "default")
            report[f"{kind}/{name}"]["recomputed"] = [
                h["batchnorm_recomputed"] for h in est.history_]
    if "async" in parts:
        report.update(merge_order(Xc, yc))
    if "sync" in parts:
        # A merge after every optimizer step (plain SGD: large-batch SGD).
        est = dnn.SyncEpochAveragingRegressor(
            module=MLP, n_epochs=1, batch_size=16, n_workers=2,
            random_state=0, shuffle="none", sync_every="step")
        est.fit(Xr, yr)
        report["regressor/step"] = summary(est, Xr, yr)
        report["regressor/step"]["n_merges"] = est.history_[0]["n_merges"]
        report["regressor/schedule"] = scheduled_fit(Xr, yr)
        report["regressor/checkpoint"] = resumed_fit(Xr, yr)
        report.update(faulty_fits(Xr, yr))
    print(json.dumps(report))


if __name__ == "__main__":
    # "sync", "async" or both (the default): the emulated runcompss runs
    # them as two applications side by side.
    main(sys.argv[1:] or ["sync", "async"])
