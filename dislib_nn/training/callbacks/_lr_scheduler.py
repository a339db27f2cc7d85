"""The learning-rate scheduler callback: per epoch or per optimizer step.

``LRScheduler(policy, step_every="epoch")`` is the estimator's
``lr_schedule`` parameter as a callback: the master computes each
epoch's rate (:class:`~._schedule.LRSchedule`) and every worker trains
the epoch at it. ``step_every="batch"`` moves the schedule into the
training tasks: each task follows it step by step from the global
optimizer step it starts at (:mod:`dislib_nn.training.tasks._step_schedule`),
so it goes on across merges, tasks and fits as one scheduler stepped
after every optimizer step of a single process would.

The callback does nothing in the epoch loop per batch: the estimator
base asks :func:`step_schedule_of` for the record the tasks follow, and
hands it to the strategy as :attr:`FitSetup.step_schedule
<dislib_nn.training.strategies._interface.FitSetup>`.
"""

import numbers

import torch

from dislib_nn.training.callbacks._core import Callback
from dislib_nn.training.callbacks._schedule import (LRSchedule,
                                                    is_scheduler_class)
from dislib_nn.training.tasks._step_schedule import (StepSchedule,
                                                     build_scheduler,
                                                     check_policy)

__all__ = ["LRScheduler", "step_schedule_of"]

_STEP_EVERY = ("epoch", "batch")


class LRScheduler(Callback):
    """Follow a learning-rate schedule, per epoch or per optimizer step.

    Parameters
    ----------
    policy : torch scheduler class or callable
        A ``torch.optim.lr_scheduler`` class (``OneCycleLR``,
        ``LinearLR``, ``CosineAnnealingLR``, ...), built with ``kwargs``
        on an optimizer whose rate is the epoch's; or a callable
        ``count -> factor`` (the rate is the epoch's rate times the
        factor, as with ``LambdaLR``), ``count`` being the epoch or the
        global optimizer step, from 0.
    step_every : {"epoch", "batch"}, default="epoch"
        ``"epoch"``: what the estimator's ``lr_schedule`` does (the rate
        changes between epochs; ``ReduceLROnPlateau`` included).
        ``"batch"``: the scheduler steps after every optimizer step (one
        per ``accumulate_grad_batches`` batches) inside the training
        tasks, on a clock shared by every worker: global step = epoch *
        S + the steps the worker made earlier in the epoch, S being the
        optimizer steps per epoch of the worker with the most rows. Its
        factor multiplies the epoch's rate (``lr``, or ``lr_schedule``'s
        rate). ``OneCycleLR``'s ``total_steps`` and
        ``CosineAnnealingLR``'s ``T_max``, when not given, are
        ``n_epochs * S``.
    **kwargs
        The scheduler's arguments (not its optimizer), parameters of the
        callback like the others (``get_params``, ``set_params``).

    The arguments are checked when a fit starts, before any task: a
    ``step_every`` other than the two, arguments the scheduler class
    rejects (a ``TypeError`` naming it), ``ReduceLROnPlateau`` per batch.

    Examples
    --------
    >>> import torch
    >>> from dislib_nn.callbacks import LRScheduler
    >>> warm_up = LRScheduler(torch.optim.lr_scheduler.LinearLR,
    ...                       step_every="batch", start_factor=0.1,
    ...                       total_iters=100)
    >>> warm_up.get_params()["total_iters"]
    100
    """

    def __init__(self, policy, step_every="epoch", **kwargs):
        self.policy = policy
        self.step_every = step_every
        self.kwargs = dict(kwargs)
        self._schedule = None

    def __repr__(self):
        args = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return (f"LRScheduler({_name(self.policy)}, "
                f"step_every={self.step_every!r}{args})")

    # ------------------------------------------------------ parameters
    def get_params(self, deep=True):
        """``policy``, ``step_every`` and the scheduler's arguments."""
        params = super().get_params(deep=deep)
        params.update(self.kwargs)
        return params

    def set_params(self, **params):
        """Set ``policy``, ``step_every`` or a scheduler argument."""
        for name, value in params.items():
            if name in ("policy", "step_every"):
                setattr(self, name, value)
            else:
                self.kwargs[name] = value
        return self

    def initialize(self):
        """Check the arguments (before any task of the fit); forget the
        previous fit's schedule."""
        self._check()
        self._schedule = None
        return self

    @property
    def needs_current_epoch(self):
        """``ReduceLROnPlateau`` per epoch steps on the epoch's loss."""
        return self.step_every == "epoch" and isinstance(
            self.policy, type) and issubclass(
                self.policy, torch.optim.lr_scheduler.ReduceLROnPlateau)

    def _check(self):
        if not isinstance(self.step_every, str) or \
                self.step_every not in _STEP_EVERY:
            raise ValueError(
                f"The 'step_every' argument of LRScheduler must be a str "
                f"among {{'epoch', 'batch'}}. Got {self.step_every!r} "
                f"instead.")
        if self.step_every == "batch":
            check_policy(self.policy, self.kwargs, "LRScheduler")
            self._check_built(StepSchedule(self.policy, self.kwargs)
                              .with_total(1).kwargs)
        else:
            self._check_epoch_policy()

    def _check_epoch_policy(self):
        if is_scheduler_class(self.policy):
            self._check_built(self.kwargs)
        elif isinstance(self.policy, type) or not callable(self.policy):
            raise TypeError(
                f"LRScheduler takes a torch.optim.lr_scheduler class or a "
                f"callable epoch -> factor. Got {self.policy!r}.")
        elif self.kwargs:
            raise TypeError(
                f"LRScheduler got scheduler arguments "
                f"({', '.join(sorted(self.kwargs))}), but its policy is a "
                f"callable epoch -> factor, which takes none. Got "
                f"{self.policy!r}.")

    def _check_built(self, kwargs):
        """Build the scheduler on a throwaway optimizer: arguments the
        class rejects raise here, naming it."""
        if not isinstance(self.policy, type):
            return
        param = torch.zeros(1, requires_grad=True)
        build_scheduler(self.policy, torch.optim.SGD([param], lr=1.0),
                        kwargs)

    # ------------------------------------------------- the epoch loop
    def on_fit_begin(self, loop):
        if self.step_every == "epoch":
            estimator = loop.estimator
            self._schedule = LRSchedule(estimator.lr, self.policy,
                                        self.kwargs, estimator.history_)

    def on_epoch_begin(self, loop, epoch):
        if self._schedule is not None:
            loop.lr = self._schedule.lr_at(epoch)

    def on_epoch_end(self, loop, record, handle):
        if self._schedule is not None:
            self._schedule.observe(record)
        return False

    # ------------------------------------------------------ the tasks
    def step_schedule(self):
        """The :class:`StepSchedule` the training tasks follow (from step
        0; the strategy places it), or None per epoch."""
        self._check()
        if self.step_every != "batch":
            return None
        return StepSchedule(self.policy, self.kwargs)


def step_schedule_of(callbacks, components=None, module=None, lr=None,
                     lr_schedule=None):
    """The per-step schedule of a fit's callbacks, checked; or None.

    The estimator base calls it with the fit's callbacks before any task
    is submitted and builds the fit's ``FitSetup`` with the result.

    Parameters
    ----------
    callbacks : list of Callback
    components : Components, default=None
        With ``module`` and ``lr``: the scheduler is built on the fit's own
        optimizer (built on ``module``'s parameters, never stepped), so
        that a scheduler that cannot drive it (``OneCycleLR`` cycling
        momentum on an optimizer without one) raises now, and a callable
        policy is called for step 0.
    module : torch.nn.Module, default=None
    lr : float, default=None
    lr_schedule : default=None
        The estimator's ``lr_schedule``: a per-epoch ``LRScheduler``
        beside it is refused (one would silently override the other).

    Raises
    ------
    ValueError
        More than one ``LRScheduler`` of the same ``step_every``; a
        per-epoch one beside ``lr_schedule``; a scheduler that cannot
        drive the optimizer.
    TypeError
        A callable policy that does not return a number.
    """
    schedulers = [cb for cb in callbacks if isinstance(cb, LRScheduler)]
    for every in _STEP_EVERY:
        mine = [cb for cb in schedulers if cb.step_every == every]
        if len(mine) > 1:
            raise ValueError(
                f"A fit takes one LRScheduler with step_every={every!r}; "
                f"got {len(mine)}: {', '.join(map(repr, mine))}.")
        if every == "epoch" and mine and lr_schedule is not None:
            raise ValueError(
                f"{mine[0]!r} and the estimator's lr_schedule="
                f"{lr_schedule!r} both set each epoch's rate. Give one of "
                f"them (a per-batch LRScheduler combines with "
                f"lr_schedule).")
    batch = [cb for cb in schedulers if cb.step_every == "batch"]
    if not batch:
        return None
    schedule = batch[0].step_schedule()
    if components is not None and module is not None:
        _try_on_optimizer(schedule, components, module, lr)
    return schedule


def _try_on_optimizer(schedule, components, module, lr):
    """Build the scheduler on the fit's optimizer (a callable: call it
    for step 0), to raise what the tasks would."""
    if not isinstance(schedule.policy, type):
        factor = schedule.policy(0)
        if not isinstance(factor, numbers.Real) and not (
                torch.is_tensor(factor) and factor.numel() == 1):
            raise TypeError(
                f"LRScheduler's policy {_name(schedule.policy)} must "
                f"return a factor (a number) for each step. It returned "
                f"{factor!r} for step 0.")
        return
    optimizer = components.build_optimizer(list(module.parameters()), lr)
    try:
        schedule.with_total(1).attach(optimizer)
    except (ValueError, KeyError) as exc:
        raise ValueError(
            f"LRScheduler could not build {_name(schedule.policy)} with "
            f"{schedule.kwargs!r} on the optimizer "
            f"{type(optimizer).__name__}: {exc}") from exc


def _name(obj):
    return getattr(obj, "__qualname__", None) or type(obj).__name__
