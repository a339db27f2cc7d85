"""The epoch loop's callbacks: history, schedule, early stopping, printing.

The loop (:func:`dislib_nn.training._epoch_loop.run_epochs`) calls every
callback of its list, in order, at four points:

``on_fit_begin(loop)``
    before the first epoch is submitted;
``on_epoch_begin(loop, epoch)``
    before epoch ``epoch`` (0-based, counted across fits) is submitted;
    may set ``loop.lr``, the learning rate every worker gets;
``on_epoch_end(loop, record, handle)``
    once the epoch's scalars were read (one or more epochs later: see
    ``needs_current_epoch``). ``record`` is the epoch's history dict, to
    read or add keys to; ``handle.model`` is the future of the model
    after the epoch (merged epochs, when some callback ``wants_model``).
    Return True to stop after this epoch;
``on_fit_end(loop)``
    after the last epoch was read; may set ``loop.final_model`` to the
    future of the model the fit should keep.
``waiting(loop, handle)``
    a context manager the loop enters while it waits for the scalars of
    ``handle``'s epoch (the printer's progress line on a terminal).

Class attributes say what a callback needs from the loop:
``needs_current_epoch`` (the next epoch cannot be submitted before this
one's record is read: early stopping, a plateau schedule) and
``wants_model`` (the epoch's model future is needed: validation, early
stopping) and ``wants_checkpoint`` (``handle.checkpoint``, the future of
a copy of the merged model, optimizer states and momentum buffer, is
needed: :class:`~._checkpoint.Checkpoint`).

The ``loop`` object has the attributes ``estimator``, ``total`` (the
epoch count the fit ends at), ``lr``, ``final_model`` and ``strategy``.
"""

import contextlib
import sys

from dislib_nn._user_warning import warn_user
from dislib_nn.exceptions import (DivergenceError, TaskFailureWarning,
                                  TrainingTaskError)
from dislib_nn.training import _fitted
from dislib_nn.training.callbacks._progress import Ticker

__all__ = ["Callback", "FailurePolicy", "LearningRate", "History",
           "EarlyStopping", "Printer", "format_record"]


class Callback:
    """Base class: every hook does nothing."""

    needs_current_epoch = False
    wants_model = False
    wants_checkpoint = False

    def on_fit_begin(self, loop):
        pass

    def on_epoch_begin(self, loop, epoch):
        pass

    def on_epoch_end(self, loop, record, handle):
        return False

    def on_fit_end(self, loop):
        pass

    def waiting(self, loop, handle):
        """A context manager entered while the master waits for the
        scalars of ``handle``'s epoch (a progress display, say)."""
        return contextlib.nullcontext()


class FailurePolicy(Callback):
    """Applies ``on_failure`` on the master to what the training tasks
    reported: workers whose training raised (after the task's reruns
    under ``"retry"``) and workers whose epoch diverged (a non-finite
    loss or state). The merges left both out already.

    ``"skip"`` lets ``history_`` record them (``skipped``, ``diverged``)
    and warns for each worker that raised, saying what it raised. The
    others stop the fit: :class:`~dislib_nn.exceptions.TrainingTaskError`
    for an epoch that raised, :class:`~dislib_nn.exceptions.DivergenceError`
    for one that diverged (under ``"retry"``, after its rerun diverged
    too).
    """

    def __init__(self, on_failure, max_retries=0):
        self.on_failure = on_failure
        self.max_retries = max_retries

    def on_epoch_end(self, loop, record, handle):
        epoch = record["epoch"]
        errors = record.get("errors") or {}
        if errors and self.on_failure != "skip":
            worker, error = next(iter(errors.items()))
            runs = 1 + (self.max_retries if worker in record["retried"]
                        else 0)
            raise _training_error(self.on_failure, epoch, worker, error,
                                  record["tracebacks"][worker], runs)
        for worker, error in errors.items():
            warn_user(
                f"Worker {worker}'s training in epoch {epoch} raised "
                f"{error}; on_failure='skip' left its update out of the "
                f"merge (history_ lists it under 'skipped').",
                TaskFailureWarning)
        workers = record.get("diverged") or []
        if workers and self.on_failure != "skip":
            again = (" after a retry from its starting state"
                     if workers[0] in record["retried"] else "")
            raise DivergenceError(
                f"Worker {workers[0]} diverged in epoch {epoch}"
                f"{again}: its loss or weights are not finite (workers "
                f"{workers} diverged). Lower lr, or pass on_failure='skip' "
                f"to drop a diverged worker's update and go on.",
                epoch=epoch, workers=workers)
        return False


def _training_error(on_failure, epoch, worker, error, remote_tb, runs):
    again = f" in each of its {runs} runs" if runs > 1 else ""
    way_out = "on_failure='skip' drops a failed worker's update and goes on"
    if on_failure == "retry":
        way_out = f"a larger max_retries reruns it more; {way_out}"
    return TrainingTaskError(
        f"Worker {worker}'s training in epoch {epoch} raised {error}"
        f"{again}; on_failure={on_failure!r} stops the fit. Fix the "
        f"cause, or: {way_out}.\n\nThe worker's traceback:\n{remote_tb}",
        epoch=epoch, worker=worker)


class LearningRate(Callback):
    """Sets each epoch's learning rate from an :class:`LRSchedule`."""

    def __init__(self, schedule):
        self.schedule = schedule
        self.needs_current_epoch = schedule.needs_metric

    def on_epoch_begin(self, loop, epoch):
        loop.lr = self.schedule.lr_at(epoch)

    def on_epoch_end(self, loop, record, handle):
        self.schedule.observe(record)
        return False


class History(Callback):
    """Appends each record to ``history_`` and counts ``n_epochs_``."""

    def on_epoch_end(self, loop, record, handle):
        _fitted.end_epoch(loop.estimator, record)
        return False


class EarlyStopping(Callback):
    """Stops when the validation loss (else the training loss) has not
    improved for ``patience`` merged epochs, and keeps the best model."""

    needs_current_epoch = True
    wants_model = True

    def __init__(self, patience):
        self.patience = patience
        self.best_loss = None
        self.best = None
        self.bad = 0

    def on_epoch_end(self, loop, record, handle):
        if handle.model is None:
            return False
        loss = record["valid_loss"]
        if loss is None:
            loss = record["train_loss"]
        if self.best_loss is None or loss < self.best_loss:
            self.best_loss, self.best, self.bad = loss, handle.model, 0
            return False
        self.bad += 1
        return self.bad >= self.patience

    def on_fit_end(self, loop):
        if self.best is not None:
            loop.final_model = self.best


class Printer(Callback):
    """With ``verbose``: a line naming the backend and the workers at the
    start of ``fit``, then one line per epoch; on a terminal, a progress
    line while the master waits for an epoch (see :mod:`._progress`)."""

    def __init__(self, describe, stream=None):
        self.describe = describe
        self.stream = stream

    def _out(self):
        return self.stream if self.stream is not None else sys.stdout

    def on_fit_begin(self, loop):
        print(self.describe, file=self._out(), flush=True)

    def waiting(self, loop, handle):
        history = loop.estimator.history_
        last = history[-1]["dur_s"] if history else None
        return Ticker(self._out(), f"epoch {handle.epoch + 1:>3}/"
                                   f"{loop.total}", last)

    def on_epoch_end(self, loop, record, handle):
        print(format_record(record, loop.total), file=self._out(),
              flush=True)
        return False


def format_record(record, total):
    parts = [f"epoch {record['epoch']:>3}/{total}",
             f"train_loss {record['train_loss']:.4f}"]
    if record["valid_loss"] is not None:
        parts.append(f"valid_loss {record['valid_loss']:.4f}")
    if record["valid_score"] is not None:
        parts.append(f"valid_score {record['valid_score']:.4f}")
    parts.append(f"lr {record['lr']:.3g}")
    parts.append(f"{record['dur_s']:.2f}s")
    return "  ".join(parts)
