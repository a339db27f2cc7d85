"""The epoch loop: submit epochs ahead, read their scalars behind.

:func:`run_epochs` drives a strategy (:mod:`.strategies._interface`) and a list of
callbacks (:mod:`.callbacks._core`). Epoch ``e``'s scalars are waited for
after epoch ``e + lag`` is submitted (``lag`` is the strategy's
:attr:`~.strategies._interface.Strategy.scalar_lag`, asked after each submission,
or 0 when a callback needs each epoch's record before the next is
submitted), so workers never idle
while the master reads them. The master waits for scalars only (sample
counts, loss sums, task times, validation statistics), never weights,
in one ``wait_on`` per epoch.
"""

import contextlib
import time

from dislib_nn import runtime
from dislib_nn.training import _metrics

__all__ = ["EpochLoop", "run_epochs"]


class EpochLoop:
    """The state callbacks see (see :mod:`.callbacks._core`)."""

    def __init__(self, estimator, strategy, total, lr):
        self.estimator = estimator
        self.strategy = strategy
        self.total = total
        self.lr = lr
        self.final_model = None


def run_epochs(estimator, strategy, callbacks, first, total, lr,
               validation=None):
    """Run epochs ``first`` to ``total - 1``; the model future to keep.

    Parameters
    ----------
    estimator : the estimator being fitted
    strategy : Strategy
    callbacks : list of Callback
    first, total : int
        Epochs are numbered from 0 across fits.
    lr : float
        The learning rate when no callback sets one.
    validation : callable or None
        ``validation(model) -> list of futures`` of per-block statistics
        of a merged model on the validation data.
    """
    loop = EpochLoop(estimator, strategy, total, lr)
    needs_current = any(cb.needs_current_epoch for cb in callbacks)
    want_model = validation is not None or any(
        cb.wants_model for cb in callbacks)
    want_checkpoint = any(cb.wants_checkpoint for cb in callbacks)
    for cb in callbacks:
        cb.on_fit_begin(loop)
    clock = [time.time()]
    in_flight = []
    stop = False
    for epoch in range(first, total):
        loop.lr = lr
        for cb in callbacks:
            cb.on_epoch_begin(loop, epoch)
        last = epoch == total - 1
        handle = strategy.submit_epoch(epoch, loop.lr, last, want_model)
        if handle.merged and want_checkpoint:
            handle.checkpoint = strategy.checkpoint_parts()
        valid = []
        if handle.merged and validation is not None:
            valid = validation(handle.model)
        in_flight.append((handle, valid))
        # Asked every epoch: a strategy may read sooner at first.
        # On a backend that runs tasks at submission the epoch has run
        # already: reading it now costs nothing, and a checkpoint of it is
        # written before the next epoch runs.
        lag = 0 if needs_current or runtime.runs_at_submission() \
            else strategy.scalar_lag
        while in_flight and (len(in_flight) > lag or last):
            stop = _read(loop, callbacks, clock, *in_flight.pop(0)) or stop
        if stop:
            break
    while in_flight:
        _read(loop, callbacks, clock, *in_flight.pop(0))
    for cb in callbacks:
        cb.on_fit_end(loop)
    return loop.final_model if loop.final_model is not None \
        else strategy.final_model()


def _read(loop, callbacks, clock, handle, valid):
    """Wait for one epoch's scalars (never weights); run the callbacks."""
    with contextlib.ExitStack() as waiting:
        for cb in callbacks:
            waiting.enter_context(cb.waiting(loop, handle))
        scalars, valid_stats = runtime.wait_on(handle.scalars, valid)
    fields = loop.strategy.read(handle, scalars)
    end = fields.pop("end_s")
    record = {"epoch": handle.epoch + 1,
              "train_loss": fields.pop("train_loss"),
              "valid_loss": None, "valid_score": None,
              "lr": float(handle.lr), "merged": bool(handle.merged),
              "dur_s": max(0.0, end - clock[0])}
    clock[0] = end
    if valid_stats:
        stats = _metrics.combine_all(valid_stats)
        record["valid_loss"] = _metrics.mean_loss(stats)
        record["valid_score"] = float(loop.estimator._targets.score(stats))
    record.update(fields)
    stop = False
    for cb in callbacks:
        stop = bool(cb.on_epoch_end(loop, record, handle)) or stop
    return stop
