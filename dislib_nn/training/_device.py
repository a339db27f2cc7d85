"""Where a task trains: the device, and how many torch threads it uses.

Two small functions that every task calls before touching torch; they
are the one place that reads what the runtime gave the task.
"""

import os

import torch

__all__ = ["resolve_device", "size_threads"]


def resolve_device(device):
    """The ``torch.device`` a task runs on; ``"auto"`` picks a visible GPU."""
    if isinstance(device, torch.device):
        device = str(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
        raise RuntimeError(
            f"device={device!r} was asked for, but this task sees no CUDA "
            f"GPU (CUDA_VISIBLE_DEVICES={visible}, torch built with CUDA: "
            f"{torch.version.cuda is not None}). Use device='auto' to "
            f"fall back to the CPU.")
    return resolved


def size_threads():
    """Under COMPSs, use as many torch threads as the task was given."""
    raw = os.environ.get("COMPSS_NUM_THREADS")
    if raw:
        try:
            n = int(raw)
        except ValueError:
            return
        if n >= 1 and torch.get_num_threads() != n:
            torch.set_num_threads(n)
