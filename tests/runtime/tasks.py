"""Tasks the runtime tests submit (module level, so workers import them)."""

import os
import signal
import time

import torch

from dislib_nn.runtime import (COLLECTION_IN, COLLECTION_OUT, COMMUTATIVE,
                               GPU_TASK, INOUT, Depth, Type, constraint,
                               task)


@task(returns=1)
def add(a, b):
    return a + b


@task(returns=1)
def identity(x):
    return x


@task(returns=1)
def full(n, value):
    return torch.full((n,), float(value))


@task(returns=1)
def stamp(tag, seconds):
    """Sleep, then report (tag, pid, start, end)."""
    start = time.time()
    time.sleep(seconds)
    return tag, os.getpid(), start, time.time()


@task(returns=1)
def rendezvous(folder, me, other, timeout):
    """Succeed only if the task writing ``other`` runs at the same time."""
    start = time.time()
    open(os.path.join(folder, me), "w").close()
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(folder, other)):
        if time.monotonic() > deadline:
            return False, start, time.time()
        time.sleep(0.01)
    return True, start, time.time()


@task(returns=1, blocks={Type: COLLECTION_IN, Depth: 1})
def total(blocks):
    return sum(float(b.sum()) for b in blocks)


@task(returns=1, grid={Type: COLLECTION_IN, Depth: 2})
def grid_sum(grid):
    return [[float(x) for x in row] for row in grid]


@task(returns=0, out={Type: COLLECTION_OUT, Depth: 1})
def deal(x, out):
    for i in range(len(out)):
        out[i] = x[i::len(out)].clone()


@task(returns=0, out={Type: COLLECTION_OUT, Depth: 2})
def fill_grid(out):
    for i, row in enumerate(out):
        for j in range(len(row)):
            row[j] = 10 * i + j


@task(returns=0, out={Type: COLLECTION_OUT, Depth: 1})
def forget_one(out):
    out[0] = 1


@task(returns=0, acc=COMMUTATIVE)
def accumulate(acc, tag, seconds):
    start = time.time()
    time.sleep(seconds)
    acc["log"].append((tag, start, time.time()))
    acc["count"] += 1


@task(returns=1)
def after(x, seconds):
    time.sleep(seconds)
    return x


@task(returns=0, x=INOUT)
def increment(x):
    x += 1


@task(returns=1)
def mutate_everything(tensor, small, items, mapping):
    tensor.add_(100)
    small.add_(100)
    items.append("task")
    mapping["task"] = True
    return float(tensor[0])


@task(returns=2)
def pair(x):
    return x, 2 * x


@task(returns=2)
def bad_pair(x):
    return x, x, x


@task(returns=1)
def fail(message):
    raise ValueError(message)


@task(returns=1)
def die():
    os.kill(os.getpid(), signal.SIGKILL)


@task(returns=1)
def outer(x):
    # A task called from a task runs inline: a value, not a future.
    inner = add(x, 1)
    return inner * 10


@task(returns=1)
def threads():
    return torch.get_num_threads()


@task(returns=1)
def nbytes(x):
    return x.numel() * x.element_size()


@task(returns=0)
def noop():
    pass


@task(returns=1)
def apply(fn, x):
    return fn(x)


def square(x):
    return x * x


@task(returns=1)
def log_name(path, name, a, b=None):
    """Append ``name`` to the file ``path`` (the order tasks ran in)."""
    return _append_line(path, name)


@task(returns=1, priority=True)
def log_name_first(path, name, a, b=None):
    """``log_name`` declared ``priority=True``."""
    return _append_line(path, name)


def _append_line(path, name):
    with open(path, "a") as f:
        f.write(name + "\n")
    return name


@task(returns=1)
def worker_pid():
    return os.getpid()


@task(returns=1)
def environment_variable(name):
    return os.environ.get(name)


@task(returns=1)
def dask_scheduler_extensions():
    """The extensions the dask scheduler of the worker running this
    runs (``"stealing"`` among them while it steals work)."""
    import distributed
    return sorted(distributed.get_client().run_on_scheduler(
        lambda dask_scheduler: list(dask_scheduler.extensions)))


@constraint(**GPU_TASK)
@task(returns=1)
def gpu_worker_pid():
    return os.getpid()
