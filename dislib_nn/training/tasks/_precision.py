"""Mixed precision: which autocast and whether a gradient scaler.

``precision`` is an estimator parameter: ``"fp32"`` (no autocast),
``"bf16"`` (``torch.autocast`` with bfloat16, on CPU and CUDA) or
``"fp16"`` (autocast with float16 and a ``torch.amp.GradScaler``, CUDA
only). Weights, gradients, optimizer states and merges stay float32
whatever the precision: autocast only changes the dtype some operations
compute in.

:func:`amp_plan` is the pure choice a training task makes from the
precision and its device's type. The master checks ``"fp16"`` twice
before any training task: against the ``device`` parameter with the
other parameters (:func:`check_device_parameter`, which needs nothing
but the parameters, so that ``load`` on a machine without GPUs accepts
what a GPU fit saved), and, when a fit's epochs are set up, against the
devices its training tasks will get (:func:`check_tasks_device`).
"""

import torch

from dislib_nn import runtime
from dislib_nn.exceptions import InvalidParameterError

__all__ = ["PRECISIONS", "amp_plan", "tasks_device_type",
           "check_device_parameter", "check_tasks_device"]

PRECISIONS = ("fp32", "bf16", "fp16")

_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def amp_plan(precision, device_type):
    """``(autocast_dtype, use_scaler)`` for ``precision`` on a device of
    type ``device_type`` (``"cpu"``, ``"cuda"``).

    ``autocast_dtype`` is None for ``"fp32"`` (no autocast). Only
    ``"fp16"`` uses a gradient scaler, and only on CUDA: elsewhere it
    raises :class:`InvalidParameterError`.
    """
    if precision not in _DTYPES:
        raise InvalidParameterError(
            f"precision must be one of {PRECISIONS}. Got {precision!r} "
            f"instead.")
    if precision == "fp16" and device_type != "cuda":
        raise InvalidParameterError(_fp16_message(device_type))
    return _DTYPES[precision], precision == "fp16"


def tasks_device_type(device):
    """The device type (``"cpu"``, ``"cuda"``...) the training tasks of
    ``device`` will run on, as the master can tell before any task runs.

    ``"auto"`` is CUDA where the runtime says training tasks will see a
    GPU (:func:`dislib_nn.runtime.tasks_see_gpus`).
    """
    device = str(device)
    if device != "auto":
        return torch.device(device).type
    return "cuda" if runtime.tasks_see_gpus() else "cpu"


def check_device_parameter(precision, device):
    """Raise :class:`InvalidParameterError` for ``"fp16"`` with a
    ``device`` parameter that is not CUDA (``"auto"`` passes: where it
    runs is known only where the fit runs)."""
    if precision == "fp16" and str(device) != "auto":
        kind = torch.device(str(device)).type
        if kind != "cuda":
            raise InvalidParameterError(_fp16_message(kind, device))


def check_tasks_device(precision, device):
    """Raise :class:`InvalidParameterError` when ``precision`` cannot run
    on the device the training tasks of ``device`` will get."""
    if precision == "fp16":
        kind = tasks_device_type(device)
        if kind != "cuda":
            raise InvalidParameterError(_fp16_message(kind, device))


def _fp16_message(device_type, device=None):
    where = "" if device is None else f" (device={str(device)!r})"
    return (f"precision='fp16' needs a CUDA device (float16 autocast with "
            f"a gradient scaler), but the training tasks run on "
            f"{device_type!r}{where}. Use precision='bf16' (CPU and CUDA) "
            f"or 'fp32' there, or a CUDA device.")
