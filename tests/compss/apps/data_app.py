"""A user's script: its own tasks and classes in __main__, and ds-tensors.

Run with plain ``python`` (local backend) and under the emulated
``runcompss``; both print the same JSON report when every rule of COMPSs
is kept. Under COMPSs it also reports how many task results PyCOMPSs's
object tracker still holds once everything made was dropped: what the
library forgets to release stays there (and on the workers' disks)
until the application ends.
"""

import gc
import json
import os
import sys
import tempfile

import numpy as np
import torch

import dislib_nn as dnn
from dislib_nn import runtime
from dislib_nn.runtime import (COLLECTION_IN, COLLECTION_OUT, COMMUTATIVE,
                               Depth, Type, constraint, task, wait_on)


class Scale:
    """A callable class defined in the script, used with map_blocks."""

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, block):
        return block * self.factor


@task()
def norm(block):
    # No returns=: inferred from this return statement, as PyCOMPSs does.
    return float(block.norm())


@task(returns=0, out={Type: COLLECTION_OUT, Depth: 1})
def halves(block, out):
    cut = len(block) // 2
    out[0] = block[:cut].clone()
    out[1] = block[cut:].clone()


@constraint(computing_units="${ComputingUnits}")
@task(returns=2, blocks={Type: COLLECTION_IN, Depth: 1}, acc=COMMUTATIVE)
def count_into(blocks, acc):
    acc.append(len(blocks))
    return len(blocks), sum(float(b.sum()) for b in blocks)


def rows(ds):
    return ds.collect().tolist()


def cycle(data, labels, path):
    """One round of everything; returns plain values only."""
    x = dnn.from_array(data, n_blocks=3)
    y = dnn.from_array(labels, n_blocks=3)
    first, second = x.collect(), x.collect()
    xs, ys = dnn.shuffle(x, y, random_state=1)
    xp, yp = dnn.partition(x, y, n_parts=2, alpha=0.5, random_state=2)
    xtr, xte, ytr, yte = dnn.train_test_split(x, y, test_size=0.25,
                                              random_state=3)
    scaled = x.map_blocks(Scale(2.0))
    loaded = dnn.load_npy(path, n_blocks=3)
    parts = [object(), object()]
    halves(torch.arange(10.0), parts)
    report = {
        "collect_twice": bool(torch.equal(first, second))
        and bool(torch.equal(first, torch.from_numpy(data))),
        # Tensors sharing x's blocks still work after x was collected.
        "slice_after_collect": rows(x[5:12]),
        "astype_after_collect": rows(x.astype(torch.float64)[:3]),
        "shuffle": [rows(xs), rows(ys)],
        "partition": [list(xp.block_sizes), rows(xp), rows(yp)],
        "split": [rows(xtr), rows(xte), rows(ytr), rows(yte)],
        "map_blocks": rows(scaled),
        "load_npy": [list(loaded.block_sizes), rows(loaded)],
        "norm": wait_on(norm(torch.ones(4))),
        "halves": [t.tolist() for t in wait_on(parts)],
        "commutative": own_tasks(),
    }
    return report


def own_tasks():
    """The script's own tasks: collections in, a commutative accumulator."""
    acc = []
    results = [count_into([torch.ones(k), torch.ones(2)], acc)
               for k in (1, 2, 3)]
    return [wait_on(results), sorted(wait_on(acc))]


def api_report():
    """Whether dislib_nn.runtime hands out PyCOMPSs's own objects."""
    if not runtime.uses_pycompss():
        return None
    import pycompss.api.constraint as pc
    import pycompss.api.parameter as pp
    import pycompss.api.task as pt

    def probe(x):
        return x
    # runtime.task checks time_out first; what it returns is PyCOMPSs's
    # own decorated function (every one shares the code of its wrapper).
    return {"task": runtime.task(returns=1)(probe).__code__
            is pt.task(returns=1)(probe).__code__,
            "constraint": runtime.constraint is pc.constraint,
            "directions": COLLECTION_IN is pp.COLLECTION_IN
            and COMMUTATIVE is pp.COMMUTATIVE and Type is pp.Type,
            "count_tasks": _count_tasks_refused()}


def _count_tasks_refused():
    """What runtime.count_tasks() raises under COMPSs, which keeps the
    task graph itself: the error's message, or None if it raised none."""
    from dislib_nn.exceptions import BackendError
    try:
        with runtime.count_tasks():
            pass
    except BackendError as exc:
        return str(exc)
    return None


def held_results():
    """Task results PyCOMPSs's object tracker holds (None off COMPSs)."""
    if not runtime.uses_pycompss():
        return None
    from pycompss.runtime.management.classes import Future
    from pycompss.runtime.management.object_tracker import OT
    gc.collect()
    return sum(isinstance(obj, Future) or type(obj) is object
               for obj in OT.obj_id_to_obj.values())


def main():
    rng = np.random.default_rng(0)
    data = rng.random((40, 3)).astype(np.float32)
    labels = np.arange(40) % 4
    path = os.path.join(tempfile.mkdtemp(), "x.npy")
    np.save(path, data)
    report = cycle(data, labels, path)
    report["backend"] = runtime.backend_name()
    report["n_workers"] = runtime.n_workers()
    report["held_results"] = held_results()
    report["api"] = api_report()
    report["optimized"] = not __debug__
    print(json.dumps(report))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
