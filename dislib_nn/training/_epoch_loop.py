"""The epoch loop: submit epochs ahead, read their scalars behind.

:func:`run_epochs` drives a strategy (:mod:`.strategies._interface`) and
a list of callbacks (:mod:`.callbacks._core`), which receive the fit's
:class:`~.callbacks._records.FitState`, each epoch's
:class:`~.callbacks._records.EpochRecord` and each merge's
:class:`~.callbacks._records.MergeRecord`. Epoch ``e``'s scalars are
waited for after epoch ``e + lag`` is submitted (``lag`` is the
strategy's :attr:`~.strategies._interface.EpochStrategy.scalar_lag`, asked
after each submission, or 0 when a callback needs each epoch's record
before the next is submitted), so workers never idle while the master
reads them. The loop itself waits for scalars only (sample counts, loss
sums, task times, validation statistics), never weights, in one
``wait_on`` per epoch; a callback may wait for more (the Checkpoint
callback fetches the model of the epochs it writes). Every task the
epochs submit runs under the estimator's ``task_timeout`` (a
``runtime.time_out`` block): one that runs longer fails as the
runtime's time-outs do, and its ``on_failure`` applies.
"""

import contextlib
import time

from dislib_nn import runtime
from dislib_nn.exceptions import TaskTimeoutError
from dislib_nn.training import _metrics
from dislib_nn.training._scoring import scorer_of
from dislib_nn.training.callbacks._records import (EpochRecord, FitState,
                                                   merges_of)

__all__ = ["FitState", "run_epochs"]


def run_epochs(estimator, strategy, callbacks, first, total, lr,
               validation=None):
    """Run epochs ``first`` to ``total - 1``; the model future to keep.

    Parameters
    ----------
    estimator : the estimator being fitted
    strategy : EpochStrategy
    callbacks : list of (str, Callback)
        The fit's named callbacks, in running order, initialized
        (:meth:`~.callbacks._core.Callback.initialize`) by the caller.
    first, total : int
        Epochs are numbered from 0 across fits.
    lr : float
        The learning rate when no callback sets one.
    validation : callable or None
        ``validation(model) -> list of futures`` of per-block statistics
        of a merged model on the validation data.
    """
    with runtime.time_out(estimator.task_timeout):
        return _run(estimator, strategy, callbacks, first, total, lr,
                    validation)


def _run(estimator, strategy, callbacks, first, total, lr, validation):
    state = FitState(estimator, strategy, first, total, lr, callbacks)
    callbacks = [cb for _, cb in callbacks]
    needs_current = any(cb.needs_current_epoch for cb in callbacks)
    want_model = any(cb.wants_model for cb in callbacks)
    want_checkpoint = any(cb.wants_checkpoint for cb in callbacks)
    for cb in callbacks:
        cb.on_fit_begin(state)
    clock = [time.time()]
    in_flight = []
    for epoch in range(first, total):
        state.lr = lr
        for cb in callbacks:
            cb.on_epoch_begin(state, epoch)
        last = epoch == total - 1
        handle = strategy.submit_epoch(epoch, state.lr, last, want_model,
                                       validation is not None)
        if handle.merged and want_checkpoint:
            handle.checkpoint = strategy.checkpoint_parts()
        valid = []
        if handle.merged and validation is not None:
            valid = validation(handle.readable)
        in_flight.append((handle, valid))
        # Asked every epoch: a strategy may read sooner at first.
        # On a backend that runs tasks at submission the epoch has run
        # already: reading it now costs nothing, and a checkpoint of it is
        # written before the next epoch runs.
        lag = 0 if needs_current or runtime.runs_at_submission() \
            else strategy.scalar_lag
        while in_flight and (len(in_flight) > lag or last):
            _read(state, callbacks, clock, *in_flight.pop(0))
        if state.stop:
            break
    while in_flight:
        _read(state, callbacks, clock, *in_flight.pop(0))
    for cb in callbacks:
        cb.on_fit_end(state)
    return state.final_model if state.final_model is not None \
        else strategy.final_model()


def _timed_out(estimator, epoch, exc):
    """The error of a fit stopped by a task that ran out of time."""
    return TaskTimeoutError(
        f"{exc} {type(estimator).__name__} stopped in epoch {epoch + 1} "
        f"(task_timeout={estimator.task_timeout!r}, on_failure="
        f"{estimator.on_failure!r}).", task_name=exc.task_name,
        time_out=exc.time_out)


def _read(state, callbacks, clock, handle, valid):
    """Wait for one epoch's scalars (never weights); run the callbacks."""
    with contextlib.ExitStack() as waiting:
        for cb in callbacks:
            waiting.enter_context(cb.waiting(state, handle))
        try:
            # wait_on leaves tuples alone (as PyCOMPSs does): the
            # record's fields go as a list.
            values, valid_stats = runtime.wait_on(list(handle.scalars),
                                                  valid)
        except TaskTimeoutError as exc:
            raise _timed_out(state.estimator, handle.epoch, exc) from exc
        scalars = handle.scalars._make(values)
    reading = state.strategy.read(handle, scalars)
    end = reading.end_s
    history = {"epoch": handle.epoch + 1,
               "train_loss": reading.train_loss,
               "valid_loss": None, "valid_score": None,
               "lr": float(handle.lr), "merged": bool(handle.merged),
               "dur_s": max(0.0, end - clock[0]),
               "batchnorm_recomputed": False}
    clock[0] = end
    if valid_stats:
        stats = _metrics.combine_all(valid_stats)
        history["valid_loss"] = _metrics.mean_loss(stats)
        history["valid_score"] = scorer_of(state.estimator)(stats)
    history.update(reading.fields)
    record = EpochRecord(history, merges_of(handle.epoch + 1, history),
                         handle.model if handle.merged else None)
    for merge in record.merges:
        for cb in callbacks:
            cb.on_merge(state, merge)
    for cb in callbacks:
        if cb.on_epoch_end(state, record, handle):
            state.stop = True
