"""One epoch of minibatch training, and batched inference: plain PyTorch.

This is what a training task runs once its arguments have arrived; it
asks the runtime one thing only (whether an error is the task running
out of time), so it can be read (and debugged) as an ordinary PyTorch
loop. :func:`run_train_task` wraps it with what a task
owes the runtime: choosing the device, sizing torch threads under
COMPSs, seeding, returning CPU tensors, timing itself, and letting the
task's time-out through to the runtime.
"""

import contextlib
import copy
import os
import time
import traceback

import torch

from dislib_nn import runtime
from dislib_nn.training.merge import _payload, _shards, _sums
from dislib_nn.training.tasks._device import resolve_device, size_threads
from dislib_nn.training.tasks._precision import amp_plan
from dislib_nn.training.tasks._report import TrainStats

__all__ = ["EpochSettings", "run_train_task", "train_one_epoch",
           "share_of_batches", "share_rows", "forward_batches", "to_cpu",
           "concat_blocks"]

_BATCH_NORMS = (torch.nn.modules.batchnorm._BatchNorm,
                torch.nn.SyncBatchNorm)


class EpochSettings:
    """What a training task needs to know besides the model and the data.

    Parameters
    ----------
    lr : float
        The learning rate of this epoch (the schedule is applied by the
        master and reaches every worker's optimizer through this value).
    batch_size : int
    seed : int
        Seeds dropout and the order of rows (same seed, same result).
    shuffle_rows : bool
        Visit the worker's rows in a new random order.
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"``...
    optimizer_state : {"keep", "reset", "average"}
    output : OutputAdapter
    on_failure : {"retry", "skip", "raise"}, default="raise"
        With ``"retry"`` an epoch that raises or diverges runs again (see
        :func:`run_train_task`); the master applies the rest.
    max_retries : int, default=0
        With ``"retry"``: how many times an epoch that raised runs again.
    share : (int, int) or None, default=None
        ``(k, K)``: train on the ``k``-th of ``K`` consecutive shares of
        the epoch's optimizer steps, in the epoch's row order (the same
        for every share), for ``K`` merges per epoch; None: the whole
        epoch.
    grad_clip_norm, grad_clip_value : float or None, default=None
        Clip the gradients' total norm (``clip_grad_norm_``), then each
        gradient element (``clip_grad_value_``), before every optimizer
        step.
    accumulate_grad_batches : int, default=1
        Step the optimizer every that many batches, on the sum of their
        gradients of ``loss / accumulate_grad_batches``.
    precision : {"fp32", "bf16", "fp16"}, default="fp32"
        Autocast dtype of the forward pass and the loss (see
        :mod:`._precision`).
    step_schedule : StepSchedule or None, default=None
        A per-step schedule placed at the global step of this task's
        first optimizer step (see :mod:`._step_schedule`): its factor of
        each step multiplies ``lr``. None: ``lr`` for every step.
    merge_precision : {"fp32", "bf16"}, default="fp32"
        What the task returns for the merge that follows it: ``"fp32"``
        the trained state dict, ``"bf16"`` its update from the model the
        round started from, a :class:`~._payload.Delta` of bf16 tensors
        (see :func:`run_train_task`). The strategy sets ``"fp32"`` for a
        task no merge follows.
    """

    def __init__(self, lr, batch_size, seed, shuffle_rows, device,
                 optimizer_state, output, on_failure="raise", max_retries=0,
                 share=None, grad_clip_norm=None, grad_clip_value=None,
                 accumulate_grad_batches=1, precision="fp32",
                 step_schedule=None, merge_precision="fp32"):
        self.step_schedule = step_schedule
        self.merge_precision = merge_precision
        self.share = share
        self.grad_clip_norm = grad_clip_norm
        self.grad_clip_value = grad_clip_value
        self.accumulate_grad_batches = accumulate_grad_batches
        self.precision = precision
        self.on_failure = on_failure
        self.max_retries = max_retries
        self.lr = lr
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle_rows = shuffle_rows
        self.device = device
        self.optimizer_state = optimizer_state
        self.output = output


def to_cpu(obj):
    """``obj`` with every tensor inside moved to the CPU (and detached)."""
    if torch.is_tensor(obj):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return type(obj)((k, to_cpu(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_cpu(v) for v in obj)
    return obj


def run_train_task(components, state, optim_state, x_blocks, y_blocks,
                   settings, base=None):
    """Train one replica for one epoch on its blocks, under its policy.

    ``state`` is a list: the state dict the replica starts from, or every
    :class:`~dislib_nn.training.merge._shards.Shard` of it.

    With ``settings.on_failure="retry"``, an epoch that raises runs again
    from its starting state, with the same seed, up to
    ``settings.max_retries`` times, and one that diverges (a loss, a
    weight or an optimizer state that is not finite) runs again once.
    An epoch that still raises returns its starting state flagged with
    the error, so that the merges leave it out and the master applies
    the policy when it reads the epoch (``"skip"`` goes on, the others
    stop the fit naming the worker). The task itself does not fail: the
    runtime reruns a task only when its execution failed (a worker that
    died), never for an error the policy already dealt with.

    With ``settings.merge_precision="bf16"`` the task returns, instead of
    the trained state, its update ``trained - base`` (``base``: the
    model the round started from, by default ``state``) with every
    floating-point entry cast to bfloat16 (:func:`._payload.encode`);
    the finite check is on the trained state itself.

    Returns
    -------
    state : dict of CPU tensors, or Delta
        The replica's full ``state_dict`` after the epoch (its
        :class:`~._payload.Delta` from ``base`` with a merge precision).
    optim_state : dict or None
        The optimizer's state (CPU tensors), or None when
        ``optimizer_state="reset"``.
    n_samples : int
        The rows trained on (the merge weight of the replica).
    stats : TrainStats
        The task's record (:mod:`._report`): loss sum, compute time, end
        time, whether the replica is finite (one that is not is left out
        of the merge, and its optimizer state is the one it started
        from), runs, and what the last run raised, if it raised.
    """
    started = time.perf_counter()
    state = _shards.model_from(state)
    start = state
    size_threads()
    device = resolve_device(settings.device)
    start_optim = copy.deepcopy(optim_state)

    def attempt(runs):
        optim = optim_state if runs == 1 else copy.deepcopy(start_optim)
        return _attempt(components, state, optim, x_blocks, y_blocks,
                        settings, device)

    out, error, runs = _run_under_policy(attempt, settings)
    if error is not None:
        rows = share_rows(sum(len(b) for b in x_blocks), settings.share,
                          settings.batch_size
                          * settings.accumulate_grad_batches)
        out = (state, start_optim, rows, 0.0, False)
    state, optim, n, loss_sum, finite = out
    if not finite:
        optim = start_optim if optim is not None else None
    if settings.merge_precision != "fp32":
        state = _payload.encode(state, start if base is None else base,
                                settings.merge_precision)
    stats = TrainStats(loss_sum=loss_sum,
                       compute_s=time.perf_counter() - started,
                       end_s=time.time(), finite=finite, runs=runs)
    if error is not None:
        stats.error = f"{type(error).__name__}: {error}"
        stats.traceback = _user_traceback(error)
    return state, optim, n, stats


def _run_under_policy(attempt, settings):
    """Run ``attempt(runs)`` until the policy is satisfied.

    Returns its last result (None when it raised), the exception of the
    last run (None when it returned) and the number of runs. The task
    running out of time (its ``time_out``, raised inside it under COMPSs
    and on the sequential backend) is no error of the epoch: it goes on
    to the runtime, whose failure management handles it as on the other
    backends, where the worker is killed.
    """
    retries = settings.max_retries if settings.on_failure == "retry" else 0
    diverged_before = False
    runs = 0
    while True:
        runs += 1
        try:
            out = attempt(runs)
        except Exception as exc:  # noqa: BLE001 - the policy decides
            if runtime.is_time_out(exc):
                raise   # the task ran out of time: the runtime's failure
            if runs <= retries:
                continue
            return None, exc, runs
        finite = out[-1]
        if finite or diverged_before or runs > retries:
            return out, None, runs
        diverged_before = True      # a diverged epoch runs again once


def _user_traceback(exc):
    """The traceback of ``exc`` from the first frame outside dislib_nn's
    training loop: where the user's module or criterion raised."""
    tb, ours = exc.__traceback__, os.path.dirname(os.path.abspath(__file__))
    while tb.tb_next is not None and os.path.dirname(
            os.path.abspath(tb.tb_frame.f_code.co_filename)) == ours:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _attempt(components, state, optim_state, x_blocks, y_blocks, settings,
             device):
    """One run of the epoch: state, optimizer state, rows, loss sum and
    whether all of them are finite."""
    torch.manual_seed(_share_seed(settings))
    model = components.build_module(state)
    model.to(device)
    model.train()
    criterion = components.build_criterion().to(device)
    optimizer = _optimizer(components, model, settings, optim_state)
    x = concat_blocks(x_blocks)
    y = concat_blocks(y_blocks)
    generator = None
    if settings.shuffle_rows:
        generator = torch.Generator().manual_seed(settings.seed)
    n, loss_sum = train_one_epoch(
        model, optimizer, criterion, x, y, settings.batch_size, generator,
        device, settings.output, share=settings.share,
        grad_clip_norm=settings.grad_clip_norm,
        grad_clip_value=settings.grad_clip_value,
        accumulate_grad_batches=settings.accumulate_grad_batches,
        precision=settings.precision,
        step_schedule=settings.step_schedule)
    keep = settings.optimizer_state != "reset"
    state = to_cpu(model.state_dict())
    optim = to_cpu(optimizer.state_dict()) if keep else None
    finite = _sums.is_finite(state, loss_sum) and (
        optim is None or _sums.is_finite(optim["state"]))
    return state, optim, n, loss_sum, finite


def train_one_epoch(model, optimizer, criterion, x, y, batch_size,
                    generator, device, output, share=None,
                    grad_clip_norm=None, grad_clip_value=None,
                    accumulate_grad_batches=1, precision="fp32",
                    step_schedule=None):
    """Minibatch training over ``x`` and ``y``; ``(n_samples, loss_sum)``.

    Rows are visited in order, or in a random order drawn from
    ``generator`` when it is given; the last batch may be short. When the
    module has BatchNorm layers in training mode, a last batch of exactly
    one row is left out (BatchNorm cannot normalise a single sample):
    ``n_samples`` counts the rows trained on. With ``share=(k, K)`` only
    the ``k``-th of ``K`` consecutive runs of optimizer steps trains (see
    :func:`share_of_batches`).

    The optimizer steps every ``accumulate_grad_batches`` batches (and
    after the last one) on the sum of their gradients of ``loss / k``,
    after clipping them (:func:`_clip`). The forward pass and the loss run
    under the autocast of ``precision``; with ``"fp16"`` the loss is
    scaled by a gradient scaler of this call's own, whose skipped steps
    (gradients that overflowed) leave the weights and the optimizer state
    as they were, and whose batches with a loss that is not finite add
    nothing to ``loss_sum``.

    With a ``step_schedule`` (:class:`._step_schedule.StepSchedule`) the
    optimizer's rates follow it from its ``first_step``: it is attached
    before the first batch and steps once per optimizer step (a step the
    fp16 scaler skipped included, as in torch's AMP recipe).
    """
    k = accumulate_grad_batches
    device = torch.device(device)
    autocast_dtype, use_scaler = amp_plan(precision, device.type)
    scaler = torch.amp.GradScaler(device.type) if use_scaler else None
    n = len(x)
    order = None if generator is None else torch.randperm(
        n, generator=generator)
    total = torch.zeros((), dtype=torch.float64, device=device)
    x_dtype, y_dtype = output.x_dtype, output.y_dtype()
    starts = range(0, n, batch_size)
    if share is not None:
        first, stop = share_of_batches(-(-len(starts) // k), *share)
        starts = starts[first * k:stop * k]
    if _has_batch_norm(model):
        if batch_size == 1:
            raise ValueError(
                "batch_size=1, but the module has BatchNorm layers, which "
                "cannot train on batches of one row. Use batch_size >= 2.")
        if n % batch_size == 1:
            n -= 1              # the one-row batch BatchNorm leaves out
    batches = [(a, min(a + batch_size, n)) for a in starts
               if min(a + batch_size, n) > a]
    trained = 0
    stepper = None if step_schedule is None else \
        step_schedule.attach(optimizer)
    optimizer.zero_grad(set_to_none=True)
    for i, (start, end) in enumerate(batches):
        trained += end - start
        if order is None:
            xb, yb = x[start:end], y[start:end]
        else:
            idx = order[start:end]
            xb, yb = x[idx], y[idx]
        xb = xb.to(device=device, dtype=x_dtype)
        yb = yb.to(device=device, dtype=y_dtype)
        with _autocast(device, autocast_dtype):
            loss = output.loss(output.forward(model, xb), criterion, yb)
        scaled = loss / k
        (scaled if scaler is None else scaler.scale(scaled)).backward()
        if (i + 1) % k == 0 or i == len(batches) - 1:
            if scaler is not None:
                scaler.unscale_(optimizer)
            _clip(model, grad_clip_norm, grad_clip_value)
            if scaler is None:
                optimizer.step()
            else:
                scaler.step(optimizer)      # skipped on inf/nan gradients
                scaler.update()
            optimizer.zero_grad(set_to_none=True)
            if stepper is not None:
                stepper.step()
        loss = loss.detach().to(torch.float64)
        if scaler is None or torch.isfinite(loss):
            total += loss * len(xb)
    return trained, float(total.item())


def _autocast(device, dtype):
    """The autocast context of a forward pass (none for fp32)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _clip(model, max_norm, max_value):
    """Clip the gradients' total norm, then each element, when asked."""
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if max_value is not None:
        torch.nn.utils.clip_grad_value_(model.parameters(), max_value)


def share_of_batches(n_batches, k, n_shares):
    """The batches ``[first, stop)`` of the ``k``-th of ``n_shares``
    consecutive shares of ``n_batches``: as even as whole batches allow,
    the longer shares last; a share may be empty when there are fewer
    batches than shares. With gradient accumulation the units are
    optimizer steps (groups of ``accumulate_grad_batches`` batches), so
    that a merge never falls inside a group."""
    return (k * n_batches // n_shares, (k + 1) * n_batches // n_shares)


def share_rows(n, share, step_rows):
    """The rows of ``n`` that ``share`` ``(k, K)`` of the epoch covers
    (all of them for None), ``step_rows`` rows per optimizer step."""
    if share is None:
        return n
    first, stop = share_of_batches(-(-n // step_rows), *share)
    return max(0, min(stop * step_rows, n) - first * step_rows)


def _share_seed(settings):
    """The seed of dropout and the like: the epoch's, or one per share
    (the row order always follows the epoch's seed)."""
    if settings.share is None:
        return settings.seed
    return (settings.seed + 104729 * settings.share[0]) % 2 ** 31


def forward_batches(model, x, batch_size, device, output):
    """The module's output on ``x`` in eval mode, batch by batch, on CPU."""
    model.eval()
    outs = []
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            xb = x[start:start + batch_size].to(device=device,
                                                dtype=output.x_dtype)
            outs.append(output(output.forward(model, xb)).cpu())
    if not outs:
        return torch.empty((0,))
    return torch.cat(outs)


def loss_of_batches(model, x, y, batch_size, device, output, criterion):
    """The summed loss (mean times rows, batch by batch) of the module
    on ``x`` against ``y`` in eval mode, for ``loss_input="all"``, whose
    criterion takes all the forward returns."""
    model.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            xb = x[start:start + batch_size].to(device=device,
                                                dtype=output.x_dtype)
            yb = y[start:start + batch_size].to(device)
            total += float(output.loss(output.forward(model, xb),
                                       criterion, yb)) * len(xb)
    return total


def _has_batch_norm(model):
    return any(isinstance(m, _BATCH_NORMS) and m.training
               for m in model.modules())


def _optimizer(components, model, settings, optim_state):
    optimizer = components.build_optimizer(model.parameters(), settings.lr)
    if optim_state is not None and settings.optimizer_state != "reset":
        # Per-parameter state (momentum, Adam moments) persists; the
        # hyperparameters always come from the estimator's parameters.
        fresh = [{k: v for k, v in g.items() if k != "params"}
                 for g in optimizer.param_groups]
        optimizer.load_state_dict(optim_state)
        for group, values in zip(optimizer.param_groups, fresh):
            group.update(values)
    for group in optimizer.param_groups:
        group["lr"] = settings.lr
    return optimizer


def concat_blocks(blocks):
    """A worker's blocks as one tensor (an empty one for no blocks)."""
    blocks = [b if torch.is_tensor(b) else torch.as_tensor(b)
              for b in blocks]
    if not blocks:
        return torch.empty((0,))
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks)
