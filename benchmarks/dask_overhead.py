"""Overhead of the dask backend against dask itself and the local backend.

Run: ``python benchmarks/dask_overhead.py [--tasks 500] [--repeats 3]``

Two measures, each a ratio within one run (issue 24's targets):

- **empty tasks**: many independent empty tasks in flight, waited on
  together, through dislib_nn's dask backend and through a bare
  ``client.submit`` on the same ``LocalCluster`` (2 single-threaded
  worker processes). Target: at most 2x the bare cost per task.
- **a 2-worker fit**: ``SyncEpochAveragingClassifier`` on the
  ``LocalCluster`` against the same fit on the ``local`` backend, the
  median epoch time (``history_[i]["dur_s"]``, first epoch left out) of
  the synchronous benchmark's MLP workload (benchmarks/_common.py).
  Target: at most 1.2x.
- **what moves per epoch**, for each ``shuffle`` mode: the bytes the
  workers sent (dask's own ``transfer_outgoing_bytes_total``, to other
  workers and to the master), per epoch, from two fits of E and 2E
  epochs (their difference leaves out loading the data and fetching the
  fitted model), against the model's size and the training data's.

Repeats are interleaved and medians compared. Prints the machine and the
load. A benchmark, never run as a timed test.
"""

import argparse
import statistics
import time

import numpy as np

from dislib_nn import runtime
from dislib_nn.runtime import task, wait_on

from _common import MLP, classification_split  # noqa: E402
from _machine import print_header  # noqa: E402


@task(returns=1)
def _empty():
    return None


def _bare_empty():
    return None


def _per_task(fn, n):
    start = time.perf_counter()
    fn(n)
    return (time.perf_counter() - start) / n


def _fit(X, y, epochs, batch, **params):
    import dislib_nn as dnn
    clf = dnn.SyncEpochAveragingClassifier(
        module=MLP, n_epochs=epochs,
        batch_size=batch, lr=0.05, optimizer__momentum=0.9, n_workers=2,
        random_state=0, **params)
    return clf.fit(X, y)


def _fit_epochs(X, y, epochs, batch):
    return [r["dur_s"] for r in _fit(X, y, epochs, batch).history_][1:]


def _sent(client):
    return sum(client.run(
        lambda dask_worker: dask_worker.transfer_outgoing_bytes_total
    ).values())


def bytes_per_epoch(client, X, y, epochs, batch):
    """Bytes the workers send per epoch, by shuffle mode."""
    from _common import state_bytes
    runtime.set_backend("dask", client=client)
    out = {}
    for mode in ("none", "local", "global"):
        moved = []
        for n in (epochs, 2 * epochs):
            before = _sent(client)
            clf = _fit(X, y, n, batch, shuffle=mode)
            moved.append(_sent(client) - before)
        out[mode] = (moved[1] - moved[0]) / epochs
    model = state_bytes(clf.module_.state_dict())
    return out, model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--n-samples", type=int, default=24000)
    args = parser.parse_args()
    print_header("dask backend overhead")

    from distributed import Client, LocalCluster
    cluster = LocalCluster(n_workers=2, threads_per_worker=1,
                           processes=True, dashboard_address=None)
    client = Client(cluster, set_as_default=False)

    def bare(n):
        client.gather([client.submit(_bare_empty, pure=False)
                       for _ in range(n)])

    def ours(n):
        wait_on([_empty() for _ in range(n)])

    runtime.set_backend("dask", client=client)
    ours(20)                                    # connect, import
    bare(20)
    costs = {"dislib_nn": [], "bare": []}
    for _ in range(args.repeats):
        costs["dislib_nn"].append(_per_task(ours, args.tasks))
        costs["bare"].append(_per_task(bare, args.tasks))
    med = {k: statistics.median(v) for k, v in costs.items()}
    ratio = med["dislib_nn"] / med["bare"]
    print(f"empty task, {args.tasks} in flight: dislib_nn "
          f"{med['dislib_nn'] * 1e3:.2f} ms, bare client.submit "
          f"{med['bare'] * 1e3:.2f} ms per task: x{ratio:.2f} "
          f"(target <= 2): {'MET' if ratio <= 2 else 'MISSED'}")

    X, _, y, _ = classification_split(args.n_samples, 128, 0.1, 0)
    X = np.asarray(X, dtype=np.float32)
    epochs = {"dask": [], "local": []}
    for _ in range(args.repeats):
        runtime.set_backend("dask", client=client)
        epochs["dask"] += _fit_epochs(X, y, args.epochs, 64)
        runtime.set_backend("local", n_workers=2)
        epochs["local"] += _fit_epochs(X, y, args.epochs, 64)
    med = {k: statistics.median(v) for k, v in epochs.items()}
    ratio = med["dask"] / med["local"]
    print(f"2-worker synchronous fit, median epoch: dask LocalCluster "
          f"{med['dask']:.3f} s, local {med['local']:.3f} s: x{ratio:.2f} "
          f"(target <= 1.2): {'MET' if ratio <= 1.2 else 'MISSED'}")
    moved, model = bytes_per_epoch(client, X, y, 2, 64)
    print(f"bytes the workers sent per epoch (model {model / 1e6:.2f} MB, "
          f"training data {X.nbytes / 1e6:.1f} MB):")
    for mode, n in moved.items():
        print(f"  shuffle={mode!r}: {n / 1e6:.2f} MB "
              f"({n / model:.1f} models, {n / X.nbytes:.2f} of the data)")
    runtime.shutdown()
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
