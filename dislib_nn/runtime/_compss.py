"""The compss backend: the real PyCOMPSs API, passed through unchanged.

This is the only module of dislib_nn that imports ``pycompss``. It is
imported only when the script runs inside the COMPSs runtime (master or
worker), so every decorator, direction and API call below is PyCOMPSs's
own: COMPSs schedules, transfers, checkpoints and retries the tasks.
:func:`task` makes PyCOMPSs's own declaration too; it only checks
``time_out`` first and keeps the declarations that have none, for
``runtime.time_out`` blocks.
"""

import os
import threading

import torch
from pycompss.api.api import (compss_barrier, compss_delete_object,
                              compss_wait_on)
from pycompss.api.constraint import constraint  # noqa: F401
from pycompss.api.on_failure import on_failure  # noqa: F401
from pycompss.api.parameter import (  # noqa: F401
    COLLECTION_IN, COLLECTION_OUT, COMMUTATIVE, IN, INOUT, Depth, Type)
from pycompss.api.task import task as _pycompss_task
from pycompss.util.exceptions import TimeOutError

from dislib_nn.runtime import _compss_task, _time_out
from dislib_nn.runtime._params import parse_time_out

__all__ = ["task", "constraint", "on_failure", "wait_on", "barrier",
           "delete_object", "n_compss_workers", "shared_empty", "IN",
           "INOUT", "COMMUTATIVE",
           "COLLECTION_IN", "COLLECTION_OUT", "Type", "Depth"]


# PyCOMPSs's declarations (Task objects) of the tasks declared without a
# time-out, and the time-out a runtime.time_out() block gives them now.
_undeclared = []
_given = {"seconds": None}
_lock = threading.Lock()


def task(**options):
    """PyCOMPSs's ``@task``: the function it returns is PyCOMPSs's own.

    ``time_out`` is checked as on the other backends (a positive finite
    number of seconds) and given to PyCOMPSs in whole seconds, rounded up
    (its C extension takes an int; its worker counts with ``alarm``). A
    declaration without one is kept, for :func:`_give_time_out`.
    """
    def decorate(fn):
        seconds = parse_time_out(f"@task on {fn.__qualname__}()",
                                 options.get("time_out"))
        given = dict(options, time_out=_time_out.whole_seconds(seconds)
                     or 0)
        declaration = _pycompss_task(**given)
        decorated = declaration(fn)
        if seconds is None:
            with _lock:
                _undeclared.append(declaration)
                _set(declaration, _given["seconds"])
        return decorated
    return decorate


def _give_time_out(seconds):
    """A ``runtime.time_out`` block began or ended: ``seconds`` (None:
    none) becomes the time-out of every task declared without one.

    PyCOMPSs reads a task's time-out from its declaration each time the
    task is called (``TaskMaster.call`` hands the declaration's
    ``decorator_arguments`` to ``binding.process_task``, which sends
    their ``time_out`` with that task), as its ``@on_failure`` sets the
    declaration's ``on_failure`` for each call: so the block's value
    reaches the tasks called while it lasts, from any thread.
    """
    with _lock:
        _given["seconds"] = seconds
        for declaration in _undeclared:
            _set(declaration, seconds)


def _set(declaration, seconds):
    declaration.decorator_arguments.time_out = \
        _time_out.whole_seconds(seconds) or 0


def use_time_outs():
    """Make ``runtime.time_out`` blocks and ``runtime.is_time_out`` use
    PyCOMPSs's declarations and its ``TimeOutError`` (the package does,
    when it chooses this backend)."""
    _time_out.use_process_wide(_give_time_out, (TimeOutError,))


def wait_on(*objs):
    """``compss_wait_on``: one argument gives one value, several a list."""
    return compss_wait_on(*objs)


def barrier():
    compss_barrier()


def delete_object(obj):
    """``compss_delete_object`` of one object; False if it was untracked."""
    try:
        return compss_delete_object(obj)
    except Exception:  # noqa: BLE001 - e.g. the runtime has stopped
        return False


def n_compss_workers():
    """Training tasks the job's resources run at once.

    ``compss_get_number_of_resources()`` counts worker *nodes*; each node
    runs as many training tasks as its CPUs (or GPUs, for GPU tasks) hold
    tasks of the size the constraint asks for (``ComputingUnits``,
    ``ComputingUnitsGPUs``). PyCOMPSs does not tell the master the size
    of the nodes, so the master's own node stands in for them (the nodes
    of a SLURM job are alike); set ``DISLIB_NN_WORKERS`` where they
    differ, or on a workstation whose ``resources.xml`` declares fewer
    computing units than the machine has.
    """
    try:
        from pycompss.api.api import compss_get_number_of_resources
        nodes = max(1, int(compss_get_number_of_resources()))
    except Exception:  # noqa: BLE001 - an API without it: one node
        nodes = 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    gpus = torch.cuda.device_count() if _compss_task.gpus_per_task() else 0
    return nodes * _compss_task.slots_per_node(os.environ, cpus, gpus)


def shared_empty(shape, dtype=torch.float32):
    """``torch.empty``: under COMPSs results travel through files, so the
    shared memory the local backend hands over would only cost a
    descriptor per buffer (and room in a container's small /dev/shm)."""
    return torch.empty(tuple(shape), dtype=dtype)
