"""Early stopping: stop when a history key stops improving, keep the best.

``early_stopping=True`` (with ``patience``) is the shortcut for the
default ``EarlyStopping(patience=patience)``.
"""

import math
import numbers

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training.tasks._snapshot import fetch_copy
from dislib_nn.training.callbacks._core import Callback
from dislib_nn.training.callbacks._records import monitored

__all__ = ["EarlyStopping"]

_MODES = ("min", "max")


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved for ``patience`` merged
    epochs; keep the model of the best one.

    Only merged epochs count (``sync_every=2`` merges every other epoch):
    an unmerged epoch has no model to come back to. It runs before the
    next epoch is submitted (``needs_current_epoch``), so the fit stops
    at the epoch it says.

    Parameters
    ----------
    monitor : str, default="valid_loss"
        A key of ``history_``'s records. ``"valid_loss"`` in a fit
        without validation data monitors ``"train_loss"`` (what
        ``early_stopping=True`` always did).
    mode : {"min", "max"}, default="min"
        Whether lower or higher is better (``"max"`` for
        ``"valid_score"``).
    patience : int, default=5
        Merged epochs without improvement before the fit stops.
    restore_best : bool, default=True
        End the fit with the best epoch's model (else the last one's).
    min_delta : float, default=0
        An improvement must beat the best value by more than this.

    Attributes
    ----------
    best_score_ : float or None
        The best value seen.
    best_epoch_ : int or None
        Its epoch (1-based, as ``history_[i]["epoch"]``).
    bad_epochs_ : int
        Merged epochs since then.

    Examples
    --------
    >>> from dislib_nn.callbacks import EarlyStopping
    >>> stop = EarlyStopping(monitor="valid_score", mode="max", patience=2)
    >>> stop.initialize().bad_epochs_
    0
    """

    needs_current_epoch = True
    wants_model = True

    def __init__(self, monitor="valid_loss", mode="min", patience=5,
                 restore_best=True, min_delta=0.0):
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.restore_best = restore_best
        self.min_delta = min_delta

    def initialize(self):
        _check(self)
        self.best_score_ = None
        self.best_epoch_ = None
        self.bad_epochs_ = 0
        self._best_model = None
        self._fetched = None
        return self

    def on_epoch_end(self, state, record, handle):
        if record.model is None:
            return False
        score = self._score(record)
        if self._improves(score):
            self.best_score_, self.best_epoch_ = score, record.epoch
            self.bad_epochs_ = 0
            self._best_model, self._fetched = record.model, None
            return False
        self.bad_epochs_ += 1
        return self.bad_epochs_ >= self.patience

    def on_fit_end(self, state):
        if self.restore_best and self._best_model is not None:
            state.final_model = self._best_model
        # Futures and weights are the fit's, not the callback's to keep
        # (an estimator pickled after the fit pickles its callbacks).
        self._best_model = self._fetched = None

    def state_dict(self):
        """The best value, its epoch, the bad-epoch count and (with
        ``restore_best``) the best model's weights, fetched once per
        new best through a copy (the future itself stays usable)."""
        if self.restore_best and self._fetched is None \
                and self._best_model is not None:
            self._fetched = fetch_copy(self._best_model)
        return {"best_score": self.best_score_,
                "best_epoch": self.best_epoch_,
                "bad_epochs": self.bad_epochs_,
                "best_model": self._fetched if self.restore_best else None}

    def load_state_dict(self, state):
        self.best_score_ = state["best_score"]
        self.best_epoch_ = state["best_epoch"]
        self.bad_epochs_ = int(state["bad_epochs"])
        self._best_model = self._fetched = state["best_model"]

    # -------------------------------------------------------- helpers
    def _score(self, record):
        score = monitored(record, self.monitor, "EarlyStopping monitors")
        if score is None and self.monitor == "valid_loss":
            score = record["train_loss"]
        if score is None:
            raise ValueError(
                f"EarlyStopping monitors {self.monitor!r}, which is None "
                f"in epoch {record.epoch}: the fit has no validation data "
                f"(give validation_fraction or validation_data).")
        return float(score)

    def _improves(self, score):
        if math.isnan(score):
            return False
        if self.best_score_ is None:
            return True
        if self.mode == "min":
            return score < self.best_score_ - self.min_delta
        return score > self.best_score_ + self.min_delta


def _check(cb):
    if not isinstance(cb.monitor, str) or not cb.monitor:
        raise _bad("monitor", "a history key (a str)", cb.monitor)
    if cb.mode not in _MODES:
        raise _bad("mode", "'min' or 'max'", cb.mode)
    if isinstance(cb.patience, bool) or not isinstance(
            cb.patience, numbers.Integral) or cb.patience < 1:
        raise _bad("patience", "an int in the range [1, inf)", cb.patience)
    if not isinstance(cb.restore_best, bool):
        raise _bad("restore_best", "a bool", cb.restore_best)
    if isinstance(cb.min_delta, bool) or not isinstance(
            cb.min_delta, numbers.Real) or not cb.min_delta >= 0:
        raise _bad("min_delta", "a float in the range [0, inf)",
                   cb.min_delta)


def _bad(argument, expected, value):
    return InvalidParameterError(
        f"The {argument!r} argument of EarlyStopping must be {expected}. "
        f"Got {value!r} instead.")
