"""What the defaults adapt to: merges and learning rate from replica steps.

With ``P`` replicas of batch ``b`` on ``N`` rows, each replica makes
``S = N / (P b)`` optimizer steps an epoch, and one merge per epoch
makes the merged model move like large-batch SGD at the small-batch
learning rate: it falls behind single-process training once ``S`` is
small (docs/benchmarks.md, "Accuracy from 2 to 64 replicas": one merge
per epoch held to 94 steps a replica and lost 20 points at 23). What
kept the accuracy there was the learning rate scaled by ``sqrt(P)``,
made safe by four merges an epoch, with half the scaled rate in the
first epoch. With ``MERGES_PER_EPOCH`` steps or fewer the defaults merge
after every step, which is large-batch SGD, at the given rate: with so
few steps the scaled rate has no room to warm up, and it diverged (the
CNN at 64 replicas of 3 steps: chance level at ``lr * 8``, 0.37 at
``lr``; digits at 16 replicas of 3 steps: no better than ``lr``).

:func:`plan` turns the ``sync_every="auto"`` and ``lr_scaling="auto"``
defaults into that rule, for ``MIN_WORKERS`` replicas or more making
fewer than ``MIN_STEPS`` steps an epoch; explicit values are taken as
given. A strategy may adapt ``"auto"`` parameters of its own to the
same condition (the asynchronous strategy's ``max_lag``: see
:meth:`dislib_nn.training.strategies.EpochStrategy.adapt`). A plain record
(:class:`Plan`) says what was chosen and why: ``verbose`` prints it and
``history_`` records it.
"""

import math
import numbers

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training._param_validation import (EpochFraction, Interval,
                                                  Options)

__all__ = ["Plan", "plan", "sync_every_at", "MIN_STEPS", "MIN_WORKERS",
           "MERGES_PER_EPOCH", "LR_SCALINGS"]

#: Fewer optimizer steps per replica and epoch than this and the
#: defaults merge more often and scale the learning rate.
MIN_STEPS = 64
#: ... and at least this many replicas: two replicas keep one merge per
#: epoch at the given rate whatever their steps (they lose little: 1.5
#: points at 22 steps on digits, see docs/strategies.md).
MIN_WORKERS = 4
#: Merges per epoch the defaults pick then (at most one per step).
MERGES_PER_EPOCH = 4
LR_SCALINGS = ("auto", "none", "sqrt", "linear")


_EPOCH_VALUES = (Interval(numbers.Integral, 1, None), EpochFraction(),
                 Options("step"))


def sync_every_at(sync_every, epoch):
    """The merges of ``epoch`` (0-based, counted across fits):
    ``sync_every`` itself, or what a callable ``sync_every`` returns for
    the epoch (a schedule such as post-local SGD's: frequent merges
    first, rarer ones later), checked."""
    if not callable(sync_every):
        return sync_every
    value = sync_every(epoch)
    if not any(c.is_satisfied_by(value) for c in _EPOCH_VALUES):
        raise InvalidParameterError(
            f"The 'sync_every' callable must return an int in the range "
            f"[1, inf), a fraction 1/k of an epoch (0.5, 0.25, 0.1, ...) "
            f"or 'step' for every epoch. sync_every({epoch}) returned "
            f"{value!r} instead.")
    return value


class Plan:
    """The merge schedule and learning-rate scaling a fit runs with.

    Attributes
    ----------
    sync_every : int, float, "step" or callable
        What the strategy runs with (never ``"auto"``); a callable gives
        each epoch's (:func:`sync_every_at`).
    lr_factor : float
        The learning rate is ``lr * lr_factor``.
    warmup : bool
        Whether the first epoch of training (epoch 0, counted across
        ``warm_start`` fits: a fit that continues does not warm up again)
        runs at half the rate (with a scaled rate and no ``lr_schedule``).
    adapted : bool
        Whether an ``"auto"`` default chose something other than one
        merge per epoch at the unscaled rate.
    steps : int
        Optimizer steps per epoch of the replica with the most rows.
    few : bool
        Whether the replicas make few steps (``MIN_WORKERS`` replicas or
        more, fewer than ``MIN_STEPS`` steps each, a strategy that merges
        within epochs): what the ``"auto"`` defaults adapt to.
    own : tuple or None
        The strategy's own parameters as they run (the record of
        :func:`~._fit_params.own_params`, its ``"auto"`` values chosen),
        or None when the plan was given none.
    strategy_params : dict
        Those the plan chose, as ``verbose`` and ``history_`` show them
        (name -> value; ``{"max_lag": 0}`` for instance).
    """

    __slots__ = ("sync_every", "lr_factor", "warmup", "adapted", "steps",
                 "few", "own", "strategy_params")

    def __init__(self, sync_every, lr_factor, warmup, adapted, steps,
                 few=False, own=None, given=None):
        self.sync_every = sync_every
        self.lr_factor = float(lr_factor)
        self.warmup = bool(warmup)
        self.adapted = bool(adapted)
        self.steps = int(steps)
        self.few = bool(few)
        self.own = own
        self.strategy_params = {} if own is None else {
            name: value for name, value, before in zip(
                own._fields, own, given or own) if value is not before}

    def factor(self, epoch):
        """The factor of epoch ``epoch`` (0-based, across fits)."""
        if self.warmup and epoch == 0:
            return 0.5 * self.lr_factor
        return self.lr_factor

    def at(self, epoch):
        """The merges of epoch ``epoch`` (0-based, across fits)."""
        return sync_every_at(self.sync_every, epoch)

    def describe(self):
        """One line for ``verbose``: the schedule and why."""
        every = self.sync_every
        if callable(every):
            merges = "merges as the sync_every callable gives them, epoch " \
                     "by epoch"
        elif every == "step":
            merges = "a merge after every optimizer step"
        elif every < 1:
            merges = f"{round(1 / every)} merges per epoch"
        elif every == 1:
            merges = "one merge per epoch"
        else:
            merges = f"a merge every {every} epochs"
        rate = "" if self.lr_factor == 1.0 else \
            f", lr x{self.lr_factor:.3g}"
        if self.warmup:
            rate += " (half of it in the first epoch)"
        rate += "".join(f", {name}={value!r}" for name, value
                        in self.strategy_params.items())
        why = ""
        if self.adapted or (self.few and self.strategy_params):
            auto = "sync_every='auto'" if self.adapted else "'auto'"
            why = (f" ({auto}: {self.steps} optimizer steps per "
                   f"replica and epoch, fewer than {MIN_STEPS})")
        return f"{merges}{rate}{why}"

    def as_dict(self, epoch=None):
        """The plan as plain data; ``sync_every`` that of ``epoch`` when
        it comes from a callable (``"callable"`` without an epoch), and
        ``warmup`` whether ``epoch`` itself ran at half the rate
        (whether the plan warms up, without an epoch)."""
        every = self.sync_every
        if callable(every):
            every = "callable" if epoch is None else self.at(epoch)
        warmup = self.warmup and (epoch is None or epoch == 0)
        return dict({"sync_every": every, "lr_factor": self.lr_factor,
                     "warmup": warmup, "adapted": self.adapted,
                     "steps": self.steps}, **self.strategy_params)


def plan(sync_every, lr_scaling, n_workers, steps, fractions=True,
         has_schedule=False, own=None, adapt=None):
    """The :class:`Plan` for the parameters and the replicas' steps.

    Parameters
    ----------
    sync_every : "auto", int, float or "step"
    lr_scaling : {"auto", "none", "sqrt", "linear"}
    n_workers : int
    steps : int
        Optimizer steps per epoch of the replica with the most rows.
    fractions : bool
        Whether the strategy merges within epochs (both built-in ones
        do); without, ``"auto"`` keeps one merge per epoch and the rate.
    has_schedule : bool
        Whether the user gave an ``lr_schedule`` (then no warm-up is
        added to it).
    own : tuple, optional
        The strategy's own parameters as the estimator holds them (the
        record of :func:`~._fit_params.own_params`).
    adapt : callable, optional
        ``(own, few) -> own``: the strategy's own parameters with their
        ``"auto"`` values chosen, given whether the replicas make few
        steps (:attr:`Plan.few`); the strategy class's ``adapt``.
    """
    few = n_workers >= MIN_WORKERS and steps < MIN_STEPS and fractions
    adapted = False
    if sync_every == "auto":
        sync_every = 1
        if few:
            adapted = True
            sync_every = "step" if steps <= MERGES_PER_EPOCH \
                else 1 / MERGES_PER_EPOCH
    if lr_scaling == "auto":
        lr_scaling = "sqrt" if adapted and sync_every != "step" \
            else "none"
    factor = {"none": 1.0, "sqrt": math.sqrt(n_workers),
              "linear": float(n_workers)}[lr_scaling]
    warmup = factor > 1.0 and not has_schedule
    chosen = own if adapt is None or own is None else adapt(own, few)
    return Plan(sync_every, factor, warmup, adapted, steps, few, chosen,
                own)
