"""The callbacks' base class, and the built-ins every fit runs.

A callback is an object whose hooks the epoch loop
(:func:`dislib_nn.training._epoch_loop.run_epochs`) calls on the master,
in the order of the fit's list (see :class:`Callback`). The estimator
builds the list from its parameters (these defaults, in this order):

``failure_policy`` (:class:`FailurePolicy`)
    ``on_failure``: warn about, or stop on, workers that failed;
``learning_rate`` (:class:`LearningRate`)
    ``lr`` and ``lr_schedule``: each epoch's rate;
``history`` (:class:`History`)
    appends each record to ``history_``;
``early_stopping`` (:class:`~._early_stopping.EarlyStopping`)
    with ``early_stopping=True`` (``patience``);
``printer`` (:class:`Printer`)
    with ``verbose``;
``checkpoint`` (:class:`~._checkpoint.Checkpoint`)
    with ``checkpoint_dir``;

then the ``callbacks=`` entries, in their order. Checkpoint callbacks
run after all others (as Lightning orders them), so that a checkpoint
holds every callback's state after the epoch.
"""

import contextlib
import inspect
import sys

from dislib_nn._user_warning import warn_user
from dislib_nn.exceptions import (DivergenceError, TaskFailureWarning,
                                  TrainingTaskError)
from dislib_nn.training import _fitted
from dislib_nn.training.callbacks._progress import Ticker

__all__ = ["Callback", "FailurePolicy", "LearningRate", "History",
           "Printer", "format_record"]


class Callback:
    """Base class of the callbacks: every hook does nothing.

    Subclass it and override the hooks you need. They run on the master
    (never in a task), so a callback class may live in a script's
    ``__main__`` or a notebook, on every backend, and may print, write
    files or keep any Python object.

    Hooks, called in this order (``state`` is the fit's
    :class:`~._records.FitState`):

    ``on_fit_begin(state)``
        Before the fit's first epoch is submitted.
    ``on_epoch_begin(state, epoch)``
        Before epoch ``epoch`` (0-based, counted across fits) is
        submitted. May set ``state.lr``, the rate every worker trains
        the epoch at.
    ``on_merge(state, merge)``
        For each merge of an epoch (a :class:`~._records.MergeRecord`),
        once the master has read the epoch, before its ``on_epoch_end``.
        Tasks report nothing until they end, so a merge is seen when its
        epoch's scalars arrive, not as it happens.
    ``on_epoch_end(state, record, handle)``
        Once the epoch's scalars were read (an epoch later, unless some
        callback has ``needs_current_epoch``). ``record`` is the epoch's
        :class:`~._records.EpochRecord` (``history_`` holds its dict);
        ``handle`` is the strategy's handle of the epoch (internal; use
        ``record``). Return True, or set ``state.stop``, to stop the fit
        after this epoch.
    ``on_fit_end(state)``
        After the last epoch was read. May set ``state.final_model`` to
        the ``record.model`` of an earlier epoch: the model the fit
        keeps.

    Class attributes say what a callback needs from the loop:

    ``needs_current_epoch`` : bool, default=False
        Epoch ``e + 1`` is not submitted before ``on_epoch_end`` ran for
        epoch ``e`` (so a stop takes effect at once; a schedule may use
        the epoch's loss). Costs the overlap of reading and training.
    ``wants_model`` : bool, default=False
        ``record.model`` is set for merged epochs.
    ``wants_checkpoint`` : bool, default=False
        Internal: the epoch's checkpoint parts are copied (the
        :class:`~._checkpoint.Checkpoint` callback).
    ``changes_training`` : bool, default=True
        False for a callback that only observes (a logger, a progress
        bar): ``fit(resume=True)`` accepts a checkpoint written with
        such callbacks added, removed or configured otherwise.

    A callback's constructor should store each argument under its own
    name, as scikit-learn estimators do: :meth:`get_params` reads them
    back, so that ``clone`` and ``set_params(callbacks__NAME__arg=...)``
    work. What it learns during a fit is reset by :meth:`initialize`,
    which the estimator calls before each fit; what a resumed fit needs
    is :meth:`state_dict`, written into checkpoints.
    """

    needs_current_epoch = False
    wants_model = False
    wants_checkpoint = False
    changes_training = True

    # ------------------------------------------------------ parameters
    def initialize(self):
        """Forget what an earlier fit left (called before each fit);
        returns ``self``."""
        return self

    def get_params(self, deep=True):
        """The constructor's arguments, read from the attributes of the
        same names (and, for a constructor taking ``**kwargs``, the items
        of the instance's ``kwargs`` dict, as ``LRScheduler`` keeps
        them)."""
        params = {}
        for name in _init_arguments(type(self)):
            try:
                params[name] = getattr(self, name)
            except AttributeError:
                raise TypeError(
                    f"{type(self).__name__}.__init__ takes {name!r}, but "
                    f"the instance has no attribute {name!r}: store each "
                    f"constructor argument under its own name, so that "
                    f"get_params, set_params and clone can read it."
                ) from None
        params.update(self._kwargs())
        return params

    def set_params(self, **params):
        """Set constructor arguments (``set_params(patience=3)``)."""
        valid = _init_arguments(type(self))
        kwargs = self._kwargs()
        for name, value in params.items():
            if name not in valid and name in kwargs:
                self.kwargs[name] = value
                continue
            if name not in valid:
                raise ValueError(
                    f"{type(self).__name__} has no parameter {name!r}; its "
                    f"parameters are {sorted(valid + list(kwargs))}.")
            setattr(self, name, value)
        return self

    def _kwargs(self):
        takes = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(
            type(self).__init__).parameters.values())
        kwargs = vars(self).get("kwargs") if takes else None
        return kwargs if isinstance(kwargs, dict) else {}

    def state_dict(self):
        """What a resumed fit needs to go on as if uninterrupted: plain
        data (numbers, strings, None, lists, dicts, tensors). ``{}`` by
        default; written into checkpoints after each checkpointed
        epoch."""
        return {}

    def load_state_dict(self, state):
        """Take back what :meth:`state_dict` returned (after
        :meth:`initialize`, when a fit resumes from a checkpoint)."""

    # ----------------------------------------------------------- hooks
    def on_fit_begin(self, state):
        pass

    def on_epoch_begin(self, state, epoch):
        pass

    def on_merge(self, state, merge):
        pass

    def on_epoch_end(self, state, record, handle):
        return False

    def on_fit_end(self, state):
        pass

    def waiting(self, state, handle):
        """A context manager entered while the master waits for the
        scalars of ``handle``'s epoch (a progress display, say)."""
        return contextlib.nullcontext()

    def __repr__(self):
        try:
            args = ", ".join(f"{k}={v!r}"
                             for k, v in self.get_params().items())
        except TypeError:
            args = "..."
        return f"{type(self).__name__}({args})"


def _init_arguments(cls):
    init = cls.__init__
    if init is object.__init__:
        return []
    return [name for name, p in inspect.signature(init).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL,
                                                 p.VAR_KEYWORD)]


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

    Failure is never silent under ``"skip"`` either: an epoch whose every
    worker was dropped merged nothing, and warns so; after
    :attr:`EMPTY_EPOCHS` such epochs in a row the fit stops (with
    ``DivergenceError`` when the last one diverged, else
    ``TrainingTaskError``), listing what each of them dropped; and a fit
    that dropped any worker's epoch ends with a warning that counts them.
    """

    #: Epochs in a row that merged nothing before a fit under ``"skip"``
    #: stops.
    EMPTY_EPOCHS = 3

    def __init__(self, on_failure, max_retries=0):
        self.on_failure = on_failure
        self.max_retries = max_retries

    def on_fit_begin(self, state):
        self.empty_ = []        # (epoch, diverged, raised) in a row
        self.dropped_ = 0       # worker-epochs left out of merges
        self.trained_ = 0

    def on_fit_end(self, state):
        if self.dropped_:
            warn_user(
                f"This fit left {self.dropped_} of {self.trained_} "
                f"worker-epochs out of the merges (on_failure='skip'; "
                f"history_ lists them under 'diverged' and 'skipped').",
                TaskFailureWarning)

    def on_epoch_end(self, state, record, handle):
        self._check(record)
        self._count(record)
        return False

    def _count(self, record):
        """Tally what ``"skip"`` dropped; warn, then stop, when an epoch
        merged nothing."""
        epoch = record["epoch"]
        diverged = list(record.get("diverged") or [])
        raised = sorted(record.get("errors") or {})
        n_workers = len(record.get("worker_samples") or ())
        dropped = set(diverged) | set(raised)
        self.dropped_ += len(dropped)
        self.trained_ += n_workers
        if not n_workers or len(dropped) < n_workers:
            self.empty_ = []
            return
        self.empty_.append((epoch, diverged, raised))
        if len(self.empty_) < self.EMPTY_EPOCHS:
            warn_user(
                f"Epoch {epoch} merged nothing: every worker's update was "
                f"left out ({_dropped(diverged, raised)}), so the model is "
                f"the one the epoch started from. After "
                f"{self.EMPTY_EPOCHS} such epochs in a row the fit stops.",
                TaskFailureWarning)
            return
        epochs = [e for e, _, _ in self.empty_]
        what = "; ".join(f"epoch {e}: {_dropped(d, r)}"
                         for e, d, r in self.empty_)
        message = (
            f"{len(epochs)} epochs in a row ({epochs[0]} to {epochs[-1]}) "
            f"merged nothing under on_failure='skip': every worker's "
            f"update was left out ({what}). The model has not changed "
            f"since epoch {epochs[0] - 1}, so the fit stops. ")
        if diverged:
            raise DivergenceError(
                message + "Lower lr (or check the data for NaN).",
                epoch=epoch, workers=diverged)
        raise TrainingTaskError(
            message + "Fix what the workers raised (the warnings and "
            "history_['errors'] say what).", epoch=epoch, worker=raised[0])

    def _check(self, record):
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


def _dropped(diverged, raised):
    parts = []
    if diverged:
        parts.append(f"workers {diverged} diverged")
    if raised:
        parts.append(f"workers {raised} raised")
    return " and ".join(parts)


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
    """Sets each epoch's learning rate from an :class:`LRSchedule`, times
    the fit's :class:`~dislib_nn.training._adaptive.Plan` factor (the
    learning-rate scaling with replicas), and records the plan in
    ``history_`` (``schedule``)."""

    def __init__(self, schedule, plan=None):
        self.schedule = schedule
        self.plan = plan
        self.needs_current_epoch = schedule.needs_metric

    def on_epoch_begin(self, state, epoch):
        factor = 1.0 if self.plan is None else self.plan.factor(epoch)
        state.lr = self.schedule.lr_at(epoch) * factor

    def on_epoch_end(self, state, record, handle):
        self.schedule.observe(record)
        if self.plan is not None:
            record["schedule"] = self.plan.as_dict(record.epoch - 1)
        return False


class History(Callback):
    """Appends each record to ``history_`` and counts ``n_epochs_``."""

    def on_epoch_end(self, state, record, handle):
        _fitted.end_epoch(state.estimator, record.as_history())
        return False


class Printer(Callback):
    """With ``verbose``: a line naming the backend and the workers at the
    start of ``fit``, then one line per epoch; on a terminal, a progress
    line while the master waits for an epoch (see :mod:`._progress`)."""

    def __init__(self, describe, stream=None):
        self.describe = describe
        self.stream = stream

    def _out(self):
        return self.stream if self.stream is not None else sys.stdout

    def on_fit_begin(self, state):
        print(self.describe, file=self._out(), flush=True)

    def waiting(self, state, handle):
        history = state.estimator.history_
        last = history[-1]["dur_s"] if history else None
        return Ticker(self._out(), f"epoch {handle.epoch + 1:>3}/"
                                   f"{state.total}", last)

    def on_epoch_end(self, state, record, handle):
        print(format_record(record, state.total), file=self._out(),
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
