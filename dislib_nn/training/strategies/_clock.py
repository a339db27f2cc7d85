"""The fit's clock: its rounds and optimizer steps, epoch by epoch.

A round is what the replicas train between two merges: an epoch,
``sync_every`` epochs, or a share of an epoch (``sync_every`` a fraction
or ``"step"``). :meth:`FitClock.rounds` lists an epoch's rounds for
every strategy; :meth:`FitClock.settings` is what one replica's task of
one of them trains (its rows, seed, learning-rate schedule placed at
its global step). The unit of the global step is the steps per epoch of
the fit's first epoch, so a per-step schedule goes on through
``warm_start``, ``partial_fit`` and resumes, whose epochs count on
across fits.
"""

from typing import NamedTuple

from dislib_nn.training._adaptive import sync_every_at
from dislib_nn.training.tasks._torch_loop import (EpochSettings,
                                                  share_of_batches, share_rows)

__all__ = ["FitClock", "RoundPlan", "steps_per_epoch", "merges_after"]


class RoundPlan(NamedTuple):
    """One round of an epoch, as :meth:`FitClock.rounds` plans it.

    Attributes
    ----------
    share : (int, int) or None
        ``(k, K)``: the round is share ``k`` of ``K`` of the epoch; None
        for a whole epoch.
    merges : bool
        Whether the replicas merge after it: after every share but the
        epoch's last, and after the last every ``sync_every`` epochs and
        at the end of the fit.
    ends_epoch : bool
        Whether it is the epoch's last round.
    last : bool
        Whether it is the fit's last round.
    rows : int
        The rows all workers train on in it.
    """

    share: tuple
    merges: bool
    ends_epoch: bool
    last: bool
    rows: int


def merges_after(epoch, sync_every, last):
    """Whether replicas merge after ``epoch`` (0-based, across fits):
    every ``sync_every`` epochs; after every epoch when they merge within
    epochs (a fraction, or ``"step"``)."""
    if sync_every == "step" or sync_every < 1:
        return True
    return last or (epoch + 1) % sync_every == 0


def steps_per_epoch(data, params, epoch):
    """Optimizer steps in ``epoch`` of the worker with the most rows of
    ``data`` (an ``EpochData``), a step every ``accumulate_grad_batches``
    batches of ``batch_size`` (``params``, a ``FitParams``)."""
    return max(1, max(_steps(n, params) for n in data.rows(epoch)))


def _steps(rows, params):
    """Optimizer steps of a worker with ``rows`` rows in an epoch."""
    batches = -(-rows // params.batch_size)
    return -(-batches // params.accumulate_grad_batches)


class FitClock:
    """The rounds and steps of one fit.

    Parameters
    ----------
    data : EpochData
        The blocks of each worker, epoch by epoch.
    params : FitParams
        The estimator's parameters as the fit runs them (``FitSetup``'s).
    output : OutputAdapter
        What the training tasks make of the module's output.
    step_schedule : StepSchedule or None, default=None
        A per-step learning-rate schedule (see
        :mod:`dislib_nn.training.tasks._step_schedule`), sized here to
        the fit's ``n_epochs``. Each training task gets it placed at the
        global step of its first optimizer step (:meth:`first_step`).
    first_epoch : int, default=0
        The fit's first epoch (epochs count across fits): its steps per
        epoch are the clock's unit for the whole fit.

    Its fields are set once; each answer is computed from them and the
    epoch asked about.
    """

    def __init__(self, data, params, output, step_schedule=None,
                 first_epoch=0):
        self.data = data
        self.params = params
        self.output = output
        self.epoch_steps = self.steps_per_epoch(first_epoch)
        self.step_schedule = None if step_schedule is None else \
            step_schedule.with_total(params.n_epochs * self.epoch_steps)

    def rounds(self, epoch, last):
        """The :class:`RoundPlan` of each round of ``epoch`` (``last``:
        the fit's last epoch), in order. With fewer batches than shares
        some shares have no rows (:attr:`RoundPlan.rows` 0): the
        synchronous strategies skip them, the asynchronous one counts
        them as rounds."""
        n_shares = self.shares(epoch)
        merges_at_end = merges_after(epoch, self.sync_every(epoch), last)
        plans = []
        for k in range(n_shares):
            share = (k, n_shares) if n_shares > 1 else None
            ends = k == n_shares - 1
            plans.append(RoundPlan(
                share, merges_at_end if ends else True, ends, last and ends,
                self.round_rows(epoch, share)))
        return plans

    def settings(self, epoch, worker, lr, share=None, merged=False):
        """The :class:`EpochSettings` of one replica's epoch (its
        ``share=(k, K)`` of it when it merges ``K`` times an epoch);
        ``merged``: a merge follows the task, which then returns its
        update in ``merge_precision`` (the full float32 state when no
        merge follows: the replica continues from it)."""
        p = self.params
        return EpochSettings(
            lr=lr, batch_size=p.batch_size,
            seed=self.data.train_seed(epoch, worker),
            shuffle_rows=p.shuffle == "local", device=str(p.device),
            optimizer_state=p.optimizer_state, output=self.output,
            on_failure=p.on_failure, max_retries=p.max_retries,
            share=share, grad_clip_norm=p.grad_clip_norm,
            grad_clip_value=p.grad_clip_value,
            accumulate_grad_batches=p.accumulate_grad_batches,
            precision=p.precision,
            step_schedule=self._step_schedule(epoch, worker, share),
            merge_precision=p.merge_precision if merged else "fp32")

    def steps_per_epoch(self, epoch):
        """Optimizer steps in ``epoch`` of the worker with the most rows
        (a step every ``accumulate_grad_batches`` batches)."""
        return steps_per_epoch(self.data, self.params, epoch)

    def _steps(self, rows):
        return _steps(rows, self.params)

    def first_step(self, epoch, worker, share=None):
        """The global optimizer step of a task's first step: ``epoch *
        S`` plus the steps ``worker`` made earlier in the epoch (its
        shares before ``share``), ``S`` being :meth:`steps_per_epoch` of
        the fit's first epoch (epochs count across fits, so the clock
        goes on through ``warm_start``, ``partial_fit`` and resumes)."""
        steps = self.epoch_steps
        first = 0
        if share is not None:
            mine = self._steps(self.data.rows(epoch)[worker])
            first = share_of_batches(mine, *share)[0]
        return epoch * steps + first

    def _step_schedule(self, epoch, worker, share):
        if self.step_schedule is None:
            return None
        return self.step_schedule.starting_at(
            self.first_step(epoch, worker, share))

    def shares(self, epoch):
        """Merges within ``epoch``: 1 for ``sync_every`` of whole epochs,
        ``1 / sync_every`` for a fraction, and for ``"step"`` one per
        optimizer step of the worker with the most batches (a step
        every ``accumulate_grad_batches`` batches)."""
        every = self.sync_every(epoch)
        if every == "step":
            return self.steps_per_epoch(epoch)
        if every < 1:
            return int(round(1 / every))
        return 1

    def sync_every(self, epoch):
        """``sync_every`` in ``epoch`` (0-based, across fits): the
        parameter, or what it gives for the epoch when it is callable."""
        return sync_every_at(self.params.sync_every, epoch)

    def round_rows(self, epoch, share=None):
        """The rows all workers train on in ``share`` of ``epoch`` (the
        whole epoch for None): what one round of merges covers."""
        step_rows = self.params.batch_size \
            * self.params.accumulate_grad_batches
        return sum(share_rows(n, share, step_rows)
                   for n in self.data.rows(epoch))
