"""What COMPSs tells a task about its resources, read from the environment.

A COMPSs executor is a long-lived process that runs one task after
another. For each task it sets ``COMPSS_NUM_THREADS`` (the CPUs the
constraint asked for) and, only for a task whose constraint was given
GPUs, ``COMPSS_BINDED_GPUS`` and ``CUDA_VISIBLE_DEVICES`` (node-local GPU
ids, comma-separated), unsetting them afterwards. CUDA, however, reads
``CUDA_VISIBLE_DEVICES`` once per process, at its first use. So a task
must neither trust ``torch.cuda.is_available()`` (a task without GPUs
still sees every GPU of the node) nor ``cuda:0`` (in a reused executor
it is whichever GPU an earlier task was given). :func:`cuda_devices`
answers from ``COMPSS_BINDED_GPUS`` and maps those ids to this process's
CUDA indices.

Nothing here imports pycompss; the functions take the environment as an
argument so that they can be tested without COMPSs.
"""

import os

__all__ = ["task_threads", "gpus_per_task", "cuda_devices", "slots_per_node",
           "visible_at_cuda_init"]

_UNKNOWN = object()
# CUDA_VISIBLE_DEVICES in force when this process first used CUDA, as a
# list of ids (None: every GPU visible, in PCI bus order).
_cuda_base = _UNKNOWN


def task_threads(environ=os.environ):
    """The CPUs COMPSs gave the running task (``COMPSS_NUM_THREADS``)."""
    return _positive_int(environ.get("COMPSS_NUM_THREADS"))


def gpus_per_task(environ=os.environ):
    """GPUs each training task asks for (``ComputingUnitsGPUs``, default 0).

    The variable is the site's knob for the GPU constraint of dislib_nn's
    training tasks; COMPSs resolves it from the master's environment.
    """
    return _positive_int(environ.get("ComputingUnitsGPUs")) or 0


def slots_per_node(environ, node_cpus, node_gpus):
    """How many training tasks one node runs at once.

    With GPU tasks (``ComputingUnitsGPUs`` > 0): the node's GPUs divided
    by the GPUs per task; otherwise its CPUs divided by
    ``ComputingUnits`` (CPUs per task, default 1). At least 1.
    """
    gpus = gpus_per_task(environ)
    if gpus:
        return max(1, node_gpus // gpus)
    cpus = _positive_int(environ.get("ComputingUnits")) or 1
    return max(1, node_cpus // cpus)


def binded_gpus(environ=os.environ):
    """Node-local GPU ids COMPSs gave the running task (``[]``: none)."""
    return _parse_ids(environ.get("COMPSS_BINDED_GPUS"))


def cuda_devices(environ=os.environ):
    """This process's CUDA indices for the GPUs given to the running task.

    ``[]`` when the task was given no GPU: it must run on the CPU even if
    the node has GPUs. The first call in a process that has not used CUDA
    yet initialises CUDA with every GPU visible, in PCI bus order, so
    that a node-local id is the CUDA index whatever later tasks get.
    """
    ids = binded_gpus(environ)
    if not ids:
        return []
    return map_to_cuda(ids, visible_at_cuda_init())


def map_to_cuda(ids, base):
    """CUDA indices of node-local GPU ``ids`` for a process whose CUDA
    started with ``base`` visible (a list of ids, or None for all)."""
    if base is None:
        return list(ids)
    missing = [i for i in ids if i not in base]
    if missing:
        raise RuntimeError(
            f"COMPSs gave this task GPU(s) {ids}, but this process started "
            f"CUDA with CUDA_VISIBLE_DEVICES={','.join(map(str, base))}, "
            f"which hides {missing}: something in the executor used CUDA "
            f"before dislib_nn did. Leave CUDA_VISIBLE_DEVICES to COMPSs.")
    return [base.index(i) for i in ids]


def visible_at_cuda_init():
    """The GPUs this process's CUDA sees (None: all), starting CUDA if
    nothing has yet, with every GPU visible."""
    global _cuda_base
    if _cuda_base is _UNKNOWN:
        import torch
        if torch.cuda.is_initialized():
            _cuda_base = _parse_visible(os.environ.get("CUDA_VISIBLE_DEVICES"))
        else:
            saved = os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            try:
                if torch.cuda.is_available():
                    torch.cuda.init()
            finally:
                if saved is not None:
                    os.environ["CUDA_VISIBLE_DEVICES"] = saved
            _cuda_base = None
    return _cuda_base


def _parse_ids(raw):
    if raw is None or raw.strip() in ("", "-"):
        return []
    return [int(part) for part in raw.replace(" ", ",").split(",")
            if part.strip()]


def _parse_visible(raw):
    if raw is None:
        return None
    return _parse_ids(raw)


def _positive_int(raw):
    try:
        value = int(str(raw).strip())
    except (TypeError, ValueError):
        return None
    return value if value >= 1 else None
