"""The compss backend: the real PyCOMPSs API, passed through unchanged.

This is the only module of dislib_nn that imports ``pycompss``. It is
imported only when the script runs inside the COMPSs runtime (master or
worker), so every decorator, direction and API call below is PyCOMPSs's
own: COMPSs schedules, transfers, checkpoints and retries the tasks.
"""

import os

import torch
from pycompss.api.api import (compss_barrier, compss_delete_object,
                              compss_wait_on)
from pycompss.api.constraint import constraint  # noqa: F401
from pycompss.api.parameter import (  # noqa: F401
    COLLECTION_IN, COLLECTION_OUT, COMMUTATIVE, IN, INOUT, Depth, Type)
from pycompss.api.task import task  # noqa: F401

from dislib_nn.runtime import _compss_task

__all__ = ["task", "constraint", "wait_on", "barrier", "delete_object",
           "n_compss_workers", "shared_empty", "IN", "INOUT", "COMMUTATIVE",
           "COLLECTION_IN", "COLLECTION_OUT", "Type", "Depth"]


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
