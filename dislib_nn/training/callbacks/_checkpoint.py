"""The Checkpoint callback: the state of a fit after each merge, on disk.

With ``checkpoint_dir`` set, the :class:`Checkpoint` callback of the
epoch loop writes ``checkpoint.pt`` in that directory after every merged
epoch (the layout, and resuming from it: :mod:`.._resume`).

Writing never stalls training: when an epoch is submitted, a small task
(:func:`~..tasks._snapshot.snapshot`) copies the merged parts into one
object; the master waits for it when it reads that epoch's scalars, one
epoch (the strategy's scalar lag) behind. The copy is waited for, never
the futures the next epoch reads. The file is written to a temporary
name in the same directory, flushed and fsync'ed, then renamed over the
previous checkpoint, so that a crash at any point leaves either the old
or the new checkpoint, whole.
"""

import glob
import numbers
import os
import shutil

from dislib_nn import runtime
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training import _plain
from dislib_nn.training._resume import (FILE_NAME, FORMAT, describe_params,
                                        qualified, shapes, write)
from dislib_nn.training.callbacks._core import Callback
from dislib_nn.training.callbacks._records import monitored

__all__ = ["Checkpoint"]

BEST_FILE = "checkpoint-best.pt"
_TEMP_PREFIX = ".checkpoint-"


class Checkpoint(Callback):
    """Write a checkpoint of the fit every ``every`` merged epochs.

    ``checkpoint_dir=DIR`` is the shortcut for the default
    ``Checkpoint(DIR)``. Each checkpoint is ``DIR/checkpoint.pt``,
    replaced atomically: the model, what the strategy carries, the epoch
    count, the seed, the parameters, ``history_`` and every callback's
    :meth:`~._core.Callback.state_dict` (early stopping's best model and
    counters among them), which ``fit(X, y, resume=True)`` reads back.
    Checkpoint callbacks run after the others, so that the epoch's
    record and every callback's state are in it.

    Parameters
    ----------
    dirname : str or path-like
        The directory (created if needed).
    every : int, default=1
        Write after every ``every``-th merged epoch (counted across
        fits), and after the last epoch of a fit when it merged.
    keep_last : int or None, default=1
        Besides ``checkpoint.pt``, keep the last ``keep_last`` checkpoints
        as ``checkpoint-epochNNNN.pt`` (hard links, or copies where the
        file system has none) when greater than 1; None keeps them all.
    keep_best : str or None, default=None
        A history key (``"valid_loss"``): also keep the checkpoint where
        it was best so far, among those written, as
        ``checkpoint-best.pt``.
    mode : {"min", "max"}, default="min"
        Whether lower or higher ``keep_best`` is better.

    Examples
    --------
    >>> from dislib_nn.callbacks import Checkpoint
    >>> Checkpoint("ckpt", every=2, keep_last=3).initialize().every
    2
    """

    wants_checkpoint = True

    def __init__(self, dirname, every=1, keep_last=1, keep_best=None,
                 mode="min"):
        self.dirname = dirname
        self.every = every
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.mode = mode

    @property
    def directory(self):
        return os.fspath(self.dirname)

    def initialize(self):
        _check_checkpoint(self)
        self.best_ = None
        return self

    def state_dict(self):
        return {"best": self.best_}

    def load_state_dict(self, state):
        self.best_ = state.get("best")

    def on_fit_begin(self, state):
        os.makedirs(self.directory, exist_ok=True)
        # Temporary files of a writer killed mid-write: never complete.
        for path in glob.glob(os.path.join(self.directory,
                                           _TEMP_PREFIX + "*.tmp")):
            _unlink(path)

    def on_epoch_end(self, state, record, handle):
        if handle.checkpoint is None or not self._due(state, record):
            return False
        states = {name: cb.state_dict() for name, cb in state.callbacks}
        for name, value in states.items():
            # What resuming reads with weights_only=True, checked here.
            _plain.check_plain(value, f"Callback {name!r}'s state_dict()")
        parts = runtime.wait_on(handle.checkpoint)
        best = self._improved(record)
        if best:
            self.best_ = float(record[self.keep_best])
        est = state.estimator
        write(self.directory, {
            "format": FORMAT,
            "estimator": qualified(type(est)),
            "params": describe_params(est),
            "n_workers_": int(est.n_workers_),
            "keys": shapes(parts["model"]),
            "model": parts["model"],
            "optimizer_states": parts["optimizer_states"],
            "carried": parts["carried"],
            "n_epochs_": int(est.n_epochs_),
            "seed": int(est._seed),
            "history_": list(est.history_),
            "callbacks": states,
        })
        self._keep(record.epoch, best)
        return False

    def _due(self, state, record):
        merged = sum(1 for r in state.estimator.history_ if r["merged"])
        last = state.stop or record.epoch >= state.total
        return last or merged % self.every == 0

    def _improved(self, record):
        if self.keep_best is None:
            return False
        value = monitored(record, self.keep_best,
                          "Checkpoint keeps the best")
        if value is None or value != value:
            return False
        return self.best_ is None or (value < self.best_ if self.mode
                                      == "min" else value > self.best_)

    def _keep(self, epoch, best):
        latest = os.path.join(self.directory, FILE_NAME)
        if best:
            _link(latest, os.path.join(self.directory, BEST_FILE))
        if self.keep_last == 1:
            return
        _link(latest, os.path.join(self.directory,
                                   f"checkpoint-epoch{epoch:04d}.pt"))
        kept = sorted(glob.glob(os.path.join(
            self.directory, "checkpoint-epoch[0-9]*.pt")))
        if self.keep_last is not None:
            for old in kept[:-self.keep_last]:
                _unlink(old)


def _check_checkpoint(cb):
    name = "Checkpoint"
    if not isinstance(cb.dirname, (str, os.PathLike)):
        raise InvalidParameterError(
            f"The 'dirname' argument of {name} must be a str or a path. "
            f"Got {cb.dirname!r} instead.")
    for arg, none_ok in (("every", False), ("keep_last", True)):
        value = getattr(cb, arg)
        if value is None and none_ok:
            continue
        if isinstance(value, bool) or not isinstance(
                value, numbers.Integral) or value < 1:
            raise InvalidParameterError(
                f"The {arg!r} argument of {name} must be an int in the "
                f"range [1, inf){' or None' if none_ok else ''}. Got "
                f"{value!r} instead.")
    if cb.keep_best is not None and not isinstance(cb.keep_best, str):
        raise InvalidParameterError(
            f"The 'keep_best' argument of {name} must be a history key (a "
            f"str) or None. Got {cb.keep_best!r} instead.")
    if cb.mode not in ("min", "max"):
        raise InvalidParameterError(
            f"The 'mode' argument of {name} must be 'min' or 'max'. Got "
            f"{cb.mode!r} instead.")


def _link(source, target):
    """``target`` becomes ``source``'s content, atomically."""
    tmp = os.path.join(os.path.dirname(target), _TEMP_PREFIX
                       + os.path.basename(target) + ".tmp")
    _unlink(tmp)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
