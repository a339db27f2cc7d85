"""The training task: one epoch (or share of one) of one replica.

Tasks are module-level functions that take and return plain data
(state dicts of CPU tensors, numbers), as the runtime requires. The
training task comes in four declarations with the same body, so that a
site without GPUs never sees a GPU constraint, and so that the runtime's
own failure management matches the estimator's ``on_failure``:

* ``_train_epoch`` asks the runtime for CPUs (``runtime.CPU_TASK``);
* ``_train_epoch_gpu`` for CPUs and GPUs (``runtime.GPU_TASK``); which
  ones it was given it learns from the runtime (``_device``);
* ``_train_epoch_once`` and ``_train_epoch_gpu_once`` are the same with
  ``on_failure="FAIL"``, for ``on_failure="raise"``.

``state`` is a list: the replica's state dict, or every shard of the
model it starts from (``merge="sharded"``), joined in the task.

``base``, given only with ``merge_precision="bf16"`` to a task that ends
a round it did not start (``sync_every`` > 1), is the model the round
started from: the task returns its update from it.

The body applies the estimator's policy to an epoch that raises or
diverges (:func:`run_train_task`): it reruns it under ``"retry"``, and
otherwise returns the replica flagged, for the merges to leave out and
the master to skip or stop on; so an exception does the same on every
backend, and the task itself does not fail. What the runtime's policy
adds is the one thing the body cannot see: an execution that failed
(the worker process died, a node was lost). ``"retry"`` and ``"skip"``
leave that to the runtime's ``RETRY`` (COMPSs runs the task again, on
another node if need be; the local backends run it once more);
``"raise"`` asks for ``FAIL``. ``IGNORE`` with ``@on_failure`` defaults
would add nothing for ``"skip"``: the defaults stand in only for an
exception, which never leaves the body, and an execution that died
leaves no outputs under ``IGNORE``, so the merge that reads them could
not run.

:func:`train_task_for` picks one from the ``device`` and ``on_failure``
parameters. The local and sequential backends record the constraints
and ignore them.
"""

from dislib_nn import runtime
from dislib_nn.runtime import COLLECTION_IN, Depth, Type, constraint, task
from dislib_nn.training.tasks._device import wants_gpu
from dislib_nn.training.tasks._torch_loop import run_train_task

__all__ = ["train_task_for"]

_COLLECTION = {Type: COLLECTION_IN, Depth: 1}


@constraint(**runtime.CPU_TASK)
@task(returns=4, state=_COLLECTION, x_blocks=_COLLECTION,
      y_blocks=_COLLECTION, priority=True)
def _train_epoch(components, state, optim_state, x_blocks, y_blocks,
                 settings, base=None):
    """One epoch of one replica on its blocks (see run_train_task)."""
    return run_train_task(components, state, optim_state, x_blocks,
                          y_blocks, settings, base)


@constraint(**runtime.GPU_TASK)
@task(returns=4, state=_COLLECTION, x_blocks=_COLLECTION,
      y_blocks=_COLLECTION, priority=True)
def _train_epoch_gpu(components, state, optim_state, x_blocks, y_blocks,
                     settings, base=None):
    """``_train_epoch`` for tasks the runtime should give a GPU."""
    return run_train_task(components, state, optim_state, x_blocks,
                          y_blocks, settings, base)


@constraint(**runtime.CPU_TASK)
@task(returns=4, state=_COLLECTION, x_blocks=_COLLECTION,
      y_blocks=_COLLECTION, on_failure="FAIL", priority=True)
def _train_epoch_once(components, state, optim_state, x_blocks, y_blocks,
                      settings, base=None):
    """``_train_epoch`` that the runtime never runs twice."""
    return run_train_task(components, state, optim_state, x_blocks,
                          y_blocks, settings, base)


@constraint(**runtime.GPU_TASK)
@task(returns=4, state=_COLLECTION, x_blocks=_COLLECTION,
      y_blocks=_COLLECTION, on_failure="FAIL", priority=True)
def _train_epoch_gpu_once(components, state, optim_state, x_blocks,
                          y_blocks, settings, base=None):
    """``_train_epoch_gpu`` that the runtime never runs twice."""
    return run_train_task(components, state, optim_state, x_blocks,
                          y_blocks, settings, base)


def train_task_for(device, on_failure="retry"):
    """The training task to submit for the ``device`` and ``on_failure``
    parameters.

    ``"cpu"`` takes a CPU task; a CUDA device a GPU task; ``"auto"`` a GPU
    task only where training tasks ask the runtime for GPUs
    (``runtime.gpus_per_task()``), since on a CPU-only site a GPU
    constraint could never be met. ``on_failure="raise"`` takes the
    declaration the runtime never reruns.
    """
    gpu = wants_gpu(device)
    if on_failure == "raise":
        return _train_epoch_gpu_once if gpu else _train_epoch_once
    return _train_epoch_gpu if gpu else _train_epoch
