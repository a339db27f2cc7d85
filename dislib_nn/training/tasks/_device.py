"""Where a task trains: the device, and how many torch threads it uses.

Two small functions that every task calls before touching torch; they
ask the runtime what it gave the task.
"""

import os

import torch

from dislib_nn import runtime

__all__ = ["resolve_device", "size_threads", "wants_gpu"]


def resolve_device(device):
    """The ``torch.device`` a task runs on.

    ``"auto"`` takes a GPU the runtime gave the task (the first of
    those), whatever the node has; where the runtime assigns no GPUs
    (``runtime.task_cuda_devices()`` is None) it is the first visible
    one. ``"cuda:k"`` is then the k-th GPU given to the task.
    """
    if isinstance(device, torch.device):
        device = str(device)
    given = runtime.task_cuda_devices()
    if device == "auto":
        if given is None:
            return torch.device("cuda" if torch.cuda.is_available()
                                else "cpu")
        return torch.device("cuda", given[0]) if given else \
            torch.device("cpu")
    resolved = torch.device(device)
    if resolved.type != "cuda":
        return resolved
    if given is not None:
        k = resolved.index or 0
        if k >= len(given):
            raise RuntimeError(
                f"device={device!r} was asked for, but the runtime gave "
                f"this task {len(given)} GPU(s). Ask the runtime for "
                f"GPUs (see docs/hpc.md), or use "
                f"device='auto' to run where the task is placed.")
        return torch.device("cuda", given[k])
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
        raise RuntimeError(
            f"device={device!r} was asked for, but this task sees no CUDA "
            f"GPU (CUDA_VISIBLE_DEVICES={visible}, torch built with CUDA: "
            f"{torch.version.cuda is not None}). Use device='auto' to "
            f"fall back to the CPU.")
    return resolved


def wants_gpu(device):
    """Whether tasks for the ``device`` parameter take a GPU declaration:
    a CUDA device does, and ``"auto"`` only where training tasks ask the
    runtime for GPUs (``runtime.gpus_per_task()``), since on a CPU-only
    site a GPU constraint could never be met."""
    device = str(device)
    return device.startswith("cuda") or (
        device == "auto" and runtime.gpus_per_task() > 0)


def size_threads():
    """Use as many torch threads as the runtime gave the task."""
    n = runtime.task_threads()
    if n is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)
