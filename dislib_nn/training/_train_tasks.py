"""The tasks of training: one epoch of one replica, and merges.

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
from dislib_nn.training import _merge
from dislib_nn.training._torch_loop import run_train_task

__all__ = ["train_task_for", "submit_merge"]

_COLLECTION = {Type: COLLECTION_IN, Depth: 1}
_PARTIAL = {"finite": True}


@constraint(**runtime.CPU_TASK)
@task(returns=4, x_blocks=_COLLECTION, y_blocks=_COLLECTION)
def _train_epoch(components, state, optim_state, x_blocks, y_blocks,
                 settings):
    """One epoch of one replica on its blocks (see run_train_task)."""
    return run_train_task(components, state, optim_state, x_blocks,
                          y_blocks, settings)


@constraint(**runtime.GPU_TASK)
@task(returns=4, x_blocks=_COLLECTION, y_blocks=_COLLECTION)
def _train_epoch_gpu(components, state, optim_state, x_blocks, y_blocks,
                     settings):
    """``_train_epoch`` for tasks the runtime should give a GPU."""
    return run_train_task(components, state, optim_state, x_blocks,
                          y_blocks, settings)


@constraint(**runtime.CPU_TASK)
@task(returns=4, x_blocks=_COLLECTION, y_blocks=_COLLECTION,
      on_failure="FAIL")
def _train_epoch_once(components, state, optim_state, x_blocks, y_blocks,
                      settings):
    """``_train_epoch`` that the runtime never runs twice."""
    return run_train_task(components, state, optim_state, x_blocks,
                          y_blocks, settings)


@constraint(**runtime.GPU_TASK)
@task(returns=4, x_blocks=_COLLECTION, y_blocks=_COLLECTION,
      on_failure="FAIL")
def _train_epoch_gpu_once(components, state, optim_state, x_blocks,
                          y_blocks, settings):
    """``_train_epoch_gpu`` that the runtime never runs twice."""
    return run_train_task(components, state, optim_state, x_blocks,
                          y_blocks, settings)


@task(returns=1, models=_COLLECTION, counts=_COLLECTION,
      stats=_COLLECTION)
def _merge_pair(models, counts, stats, root, previous):
    """Combine two replicas or partial sums; divide only at the root.

    ``models`` holds two state dicts or :class:`WeightedSum`; ``counts``
    the sample count of each raw state dict (ignored for weighted sums);
    ``stats`` the training task's statistics of each raw state dict,
    whose ``finite`` flag leaves a diverged replica out. Collections hold
    no None: the runtime serializes every element. At the root, when every
    replica diverged, the model is ``previous``.
    """
    total = _sum_models(models, counts, stats)
    if not root:
        return total
    return _merge.mean_or_previous(total, previous)[0]


@task(returns=2, models=_COLLECTION, optims=_COLLECTION,
      counts=_COLLECTION, stats=_COLLECTION)
def _merge_pair_with_optims(models, optims, counts, stats, root, previous):
    """``_merge_pair`` that also merges the optimizer states alike (over
    every replica when all diverged: each then returned the state it
    started from)."""
    total = _sum_models(models, counts, stats)
    optim_total = _sum_optims(optims, counts, stats)
    if not root:
        return total, optim_total
    if not optim_total[0].entries:
        optim_total = _sum_optims(optims, counts, None)
    merged_optim = _merge.unflatten_optimizer_state(
        _merge.mean(optim_total[0]), optim_total[1])
    return _merge.mean_or_previous(total, previous)[0], merged_optim


@task(returns=1)
def _keep_finite(model, stat, previous):
    """A single replica's model, or ``previous`` when it diverged."""
    return model if stat["finite"] else previous


@task(returns=2)
def _outer_step(previous, averaged, velocity, lr, momentum, keys):
    """The server step of FedAvgM / DiLoCo (see ``_merge.outer_step``)."""
    return _merge.outer_step(previous, averaged, velocity, lr, momentum,
                             keys)


def _sum_models(models, counts, stats):
    """The weighted sum of the finite replicas (an empty one if none)."""
    return _merge.finite_sum(zip(models, counts,
                                 [s["finite"] for s in stats]))


def _sum_optims(optims, counts, stats):
    """``_sum_models`` for optimizer states (every one when ``stats`` is
    None)."""
    parts, skeleton = [], None
    for i, (optim, count) in enumerate(zip(optims, counts)):
        finite = stats is None or stats[i]["finite"]
        if isinstance(optim, tuple):        # a partial sum
            part, skel = optim
        elif finite:
            part, skel = _merge.flatten_optimizer_state(optim)
        else:
            continue
        skeleton = skeleton or skel
        parts.append((part, count, True))
    return _merge.finite_sum(parts), skeleton


def train_task_for(device, on_failure="retry"):
    """The training task to submit for the ``device`` and ``on_failure``
    parameters.

    ``"cpu"`` takes a CPU task; a CUDA device a GPU task; ``"auto"`` a GPU
    task only where training tasks ask the runtime for GPUs
    (``runtime.gpus_per_task()``), since on a CPU-only site a GPU
    constraint could never be met. ``on_failure="raise"`` takes the
    declaration the runtime never reruns.
    """
    device = str(device)
    gpu = device.startswith("cuda") or (
        device == "auto" and runtime.gpus_per_task() > 0)
    if on_failure == "raise":
        return _train_epoch_gpu_once if gpu else _train_epoch_once
    return _train_epoch_gpu if gpu else _train_epoch


def submit_merge(models, optims, counts, lifetimes, stats, previous):
    """Submit the binary tree of merge tasks over the replicas.

    Returns futures of the merged state dict and of the merged optimizer
    state, or None for it when ``optims`` is None. Replicas whose
    ``stats`` (futures of the training tasks' fourth results) say they
    diverged are left out; when all did, the model is ``previous``. With
    one replica only that check is submitted. The tree has
    depth ceil(log2(len(models))). Partial sums are released through
    ``lifetimes`` (anything with a ``release(obj)`` method) once consumed.
    """
    if len(models) == 1:
        return (_keep_finite(models[0], stats[0], previous),
                None if optims is None else optims[0])
    with_optims = optims is not None
    # (model, optimizer state, count, stats, is a partial sum of this tree)
    leaves = [(m, o, c, s, False) for m, o, c, s in
              zip(models, optims if with_optims else models, counts, stats)]

    def pair(a, b, root):
        last = previous if root else None
        if with_optims:
            model, optim = _merge_pair_with_optims(
                [a[0], b[0]], [a[1], b[1]], [a[2], b[2]], [a[3], b[3]],
                root, last)
        else:
            model = optim = _merge_pair([a[0], b[0]], [a[2], b[2]],
                                        [a[3], b[3]], root, last)
        for child in (a, b):
            if child[4]:    # a partial sum is consumed here, and only here
                lifetimes.release(child[0])
                if with_optims:
                    lifetimes.release(child[1])
        # A partial sum carries its weights inside; its count, 0, and
        # stats are ignored (task collections hold no None).
        return model, optim, 0, _PARTIAL, True

    model, optim, _, _, _ = _merge.tree_reduce(leaves, pair)
    return model, optim if with_optims else None
