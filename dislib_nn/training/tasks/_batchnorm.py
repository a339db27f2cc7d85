"""BatchNorm statistics recomputed on the merged model (SWAP).

Averaging replicas averages their BatchNorm buffers too, but the mean of
``P`` running variances is not the variance of the merged model's
activations: the weights changed under them. At the end of a fit with
``recompute_batchnorm`` on (:func:`wanted`), :func:`submit_recompute`
submits one :func:`_batchnorm_statistics` task per worker, which runs
the final model in train mode over the worker's rows of the fit's last
epoch, and one :func:`_merge_statistics` task, which averages what they
found into the final state (Gupta et al. 2020, "Stochastic Weight
Averaging in Parallel"). Plain data in and out: state dicts, tensors,
batch counts.
"""

import torch

from dislib_nn import runtime
from dislib_nn.runtime import COLLECTION_IN, Depth, Type, constraint, task
from dislib_nn.training._adaptive import MIN_WORKERS
from dislib_nn.training.tasks._device import (resolve_device, size_threads,
                                              wants_gpu)
from dislib_nn.training.tasks._torch_loop import concat_blocks

__all__ = ["wanted", "has_batch_norm", "submit_recompute"]

_COLLECTION = {Type: COLLECTION_IN, Depth: 1}
_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def wanted(recompute, n_workers, module):
    """Whether a fit of ``n_workers`` replicas of ``module`` recomputes
    its BatchNorm statistics: never without BatchNorm layers tracking
    running statistics; with them, always for True, and for ``"auto"``
    from ``MIN_WORKERS`` replicas on."""
    if not has_batch_norm(module):
        return False
    if isinstance(recompute, str):          # "auto"
        return n_workers >= MIN_WORKERS
    return bool(recompute)


def has_batch_norm(module):
    """Whether ``module`` has BatchNorm layers tracking running stats."""
    return any(_tracks(m) for m in module.modules())


def submit_recompute(setup, model, epoch, blocks):
    """Submit the recompute; the future of the model it gives.

    Parameters
    ----------
    setup : FitSetup
    model : future or dict
        The fit's final model.
    epoch : int
        The fit's last epoch (0-based): it seeds the tasks' dropout.
    blocks : list of (x_blocks, y_blocks)
        Each worker's blocks in that epoch.
    """
    p = setup.params
    task_fn = _statistics_task_for(p.device)
    statistics, counts = [], []
    for w, (x_blocks, _) in enumerate(blocks):
        found, n_batches = task_fn(
            setup.task_components, model, x_blocks, p.batch_size,
            setup.output, str(p.device),
            setup.data.train_seed(epoch, w))
        statistics.append(found)
        counts.append(n_batches)
    merged = _merge_statistics(model, statistics, counts)
    setup.lifetimes.release(statistics, counts)
    return setup.lifetimes.keep(merged)


# ------------------------------------------------------------------ tasks
@constraint(**runtime.CPU_TASK)
@task(returns=2, x_blocks=_COLLECTION)
def _batchnorm_statistics(components, state, x_blocks, batch_size, output,
                          device, seed):
    """One worker's BatchNorm statistics of ``state`` (see statistics)."""
    return statistics(components, state, x_blocks, batch_size, output,
                      device, seed)


@constraint(**runtime.GPU_TASK)
@task(returns=2, x_blocks=_COLLECTION)
def _batchnorm_statistics_gpu(components, state, x_blocks, batch_size,
                              output, device, seed):
    """``_batchnorm_statistics`` for tasks the runtime should give a GPU."""
    return statistics(components, state, x_blocks, batch_size, output,
                      device, seed)


@task(returns=1, statistics=_COLLECTION, counts=_COLLECTION)
def _merge_statistics(state, statistics, counts):
    """``state`` with the workers' statistics averaged into it (see
    merge_statistics)."""
    return merge_statistics(state, statistics, counts)


# ------------------------------------------------------------ the bodies
def statistics(components, state, x_blocks, batch_size, output, device,
               seed):
    """``(buffers, n_batches)`` of the model ``state`` over ``x_blocks``.

    The model runs in train mode under ``torch.no_grad()`` (in float32,
    whatever the training ``precision``), in minibatches of
    ``batch_size`` rows in order, after ``reset_running_stats()`` and
    with ``momentum=None`` on every BatchNorm layer, so that each layer
    ends with the plain mean of its batches' statistics. A last batch of
    one row is left out, as in training. ``buffers`` holds the layers'
    ``running_mean``, ``running_var`` and ``num_batches_tracked`` on the
    CPU, under their ``state_dict`` names.
    """
    size_threads()
    dev = resolve_device(device)
    torch.manual_seed(seed)
    model = components.build_module(state)
    model.to(dev)
    model.train()
    layers = [(name, m) for name, m in model.named_modules() if _tracks(m)]
    for _, layer in layers:
        layer.reset_running_stats()
        layer.momentum = None
    x = concat_blocks(x_blocks)
    n = len(x)
    if n % batch_size == 1:
        n -= 1                  # BatchNorm cannot normalise one row
    n_batches = 0
    with torch.no_grad():
        for start in range(0, n, batch_size):
            output.forward(model, x[start:min(start + batch_size, n)].to(
                device=dev, dtype=output.x_dtype))
            n_batches += 1
    buffers = {}
    for name, layer in layers:
        prefix = f"{name}." if name else ""
        for key in _BUFFERS:
            buffers[prefix + key] = getattr(layer, key).detach().cpu()
    return buffers, n_batches


def merge_statistics(state, statistics, counts):
    """A copy of ``state`` whose BatchNorm buffers are the workers'.

    ``running_mean`` and ``running_var`` are the means of the workers'
    weighted by their batch counts (the mean over all batches, as one
    pass over every row would give), ``num_batches_tracked`` the sum. A
    worker with no batch adds nothing; with none at all, ``state`` is
    returned as it is. Every other entry is ``state``'s.
    """
    used = [(s, int(c)) for s, c in zip(statistics, counts) if int(c) > 0]
    out = dict(state)
    if not used:
        return out
    total = sum(c for _, c in used)
    for key in used[0][0]:
        if key.endswith("num_batches_tracked"):
            value = sum(s[key].to(torch.int64) for s, _ in used)
        else:
            value = sum(s[key].to(torch.float64) * c for s, c in used) / total
        out[key] = value.to(state[key].dtype).reshape(state[key].shape)
    return out


# --------------------------------------------------------------- helpers
def _statistics_task_for(device):
    """The CPU or GPU declaration, by the rule of ``train_task_for``."""
    return _batchnorm_statistics_gpu if wants_gpu(device) \
        else _batchnorm_statistics


def _tracks(module):
    return isinstance(module, torch.nn.modules.batchnorm._BatchNorm) \
        and module.track_running_stats

