"""Checkpoints: the state of a fit after each merge, on disk, atomically.

With ``checkpoint_dir`` set, the :class:`Checkpoint` callback of the
epoch loop writes ``checkpoint.pt`` in that directory after every merged
epoch: the global model, what the strategy carries (its
:class:`~dislib_nn.training.strategies._interface.Carry`: the optimizer
states the next epoch starts from, per worker with
``optimizer_state="keep"``, averaged with ``"average"``, and the
strategy's own state, such as the outer optimizer's, stored whole under
``"carried"``), the epoch count, the base seed every random draw derives
from (:mod:`._seeds`), the estimator's parameters (described as text)
and ``history_``.

Writing never stalls training: when an epoch is submitted, a small task
(:func:`snapshot`) copies the merged parts into one object; the master
waits for it when it reads that epoch's scalars, one epoch (the
strategy's scalar lag) behind. The copy is waited for, never the
futures the next epoch reads. The file is written to a temporary name in
the same directory, flushed and fsync'ed, then renamed over the previous
checkpoint, so that a crash at any point leaves either the old or the new
checkpoint, whole.

``fit(X, y, resume=True)`` reads it back (:func:`load`) and checks that
it was written by the same estimator class, parameters and module
(:func:`check_params`, :func:`check_model`, :func:`check_workers`).
"""

import glob
import numbers
import os
import pickle
import shutil

import numpy as np
import torch

from dislib_nn import runtime
from dislib_nn.exceptions import (CheckpointMismatchError,
                                  InvalidParameterError, UnsafeFileError)
from dislib_nn.runtime import COLLECTION_IN, Depth, Type, task
from dislib_nn.training import _atomic_file, _fitted, _plain
from dislib_nn.training.callbacks._core import Callback
from dislib_nn.training.callbacks._named import PREFIX, name_callbacks
from dislib_nn.training.callbacks._records import monitored

__all__ = ["FILE_NAME", "Checkpoint", "snapshot", "write", "load",
           "check_params", "check_model", "check_workers", "describe",
           "to_resume", "restore", "fetch_copy", "restore_callbacks"]

FILE_NAME = "checkpoint.pt"
BEST_FILE = "checkpoint-best.pt"
_TEMP_PREFIX = ".checkpoint-"
_FORMAT = 1
#: parameters a resumed fit may change: they do not alter the epochs
#: already run (n_epochs only says where the fit ends; a checkpoint holds
#: the model before any BatchNorm recompute; scoring changes the
#: valid_score of the epochs still to run).
FREE_PARAMS = ("n_epochs", "verbose", "warm_start", "checkpoint_dir",
               "on_failure", "max_retries", "task_timeout",
               "recompute_batchnorm", "scoring")
_COLLECTION = {Type: COLLECTION_IN, Depth: 1}


@task(returns=1, optims=_COLLECTION, values=_COLLECTION)
def _snapshot(model, optims, has_optims, names, values):
    """One copy of a merged epoch's parts, for the master to fetch."""
    return {"model": model,
            "optimizer_states": list(optims) if has_optims else None,
            "carried": dict(zip(names, values))}


def snapshot(model, carry):
    """Submit the copy of a merged epoch's parts; its future.

    ``carry`` is the strategy's :class:`Carry` (futures or values).
    Collections hold no None and are never empty, so an absent list travels
    as ``[model]`` with ``has_optims=False``, and no carried state as
    ``[model]`` with no names.
    """
    optims = carry.optimizer_states
    has_optims = optims is not None
    names = sorted(carry.state)
    return _snapshot(model, list(optims) if has_optims else [model],
                     has_optims, names,
                     [carry.state[k] for k in names] or [model])


@task(returns=1)
def _copied(value):
    """A copy of ``value`` for the master to fetch."""
    return value


def fetch_copy(value):
    """The value of a future (or plain value), fetched through a copy
    task: waiting on a future ends it (as ``compss_wait_on`` does), and
    the future itself may still be the input of later tasks or the
    model a fit keeps."""
    if isinstance(value, dict) and all(torch.is_tensor(v)
                                       for v in value.values()):
        return value
    return runtime.wait_on(_copied(value))


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
            "format": _FORMAT,
            "estimator": _qualified(type(est)),
            "params": describe_params(est),
            "n_workers_": int(est.n_workers_),
            "keys": _shapes(parts["model"]),
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


def write(directory, payload):
    """Write ``payload`` as ``directory/checkpoint.pt``, whole or not at
    all, with the mode ``save()`` gives its files (the user's umask)."""
    _atomic_file.write(os.path.join(directory, FILE_NAME),
                       lambda f: torch.save(payload, f), "the checkpoint")


def load(directory):
    """The checkpoint in ``directory``, or None when there is none."""
    path = os.path.join(os.fspath(directory), FILE_NAME)
    if not os.path.exists(path):
        return None
    # Tensors, numbers, strings, lists and dicts only: nothing to unpickle
    # that could run code.
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeFileError(
            f"{path} holds objects that only unpickling can rebuild: not a "
            f"checkpoint dislib_nn wrote, or one changed since. Nothing in "
            f"it was run; resuming reads data only ({exc}).") from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise CheckpointMismatchError(
            f"{path} is not a dislib_nn checkpoint of format {_FORMAT}.")
    return payload


def to_resume(estimator, resume, directory=None):
    """The checkpoint ``fit(resume=True)`` continues (or None) and its
    path; checked against the parameters before any task runs.
    ``directory``: the Checkpoint callback's, when ``checkpoint_dir`` is
    None."""
    name = type(estimator).__name__
    if not isinstance(resume, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The 'resume' argument of {name}.fit must be an instance "
            f"of 'bool'. Got {resume!r} instead.")
    if not resume:
        return None, None
    if directory is None:
        directory = estimator.checkpoint_dir
    if directory is None:
        raise InvalidParameterError(
            f"{name}.fit(resume=True) needs checkpoint_dir (or a "
            f"Checkpoint callback), the directory to resume from. Got "
            f"checkpoint_dir=None.")
    checkpoint = load(directory)
    path = os.path.join(os.fspath(directory), FILE_NAME)
    if checkpoint is not None:
        check_params(estimator, checkpoint, path)
    return checkpoint, path


def restore(estimator, checkpoint):
    """Continue from a checkpoint (the estimator's model is built)."""
    carried = checkpoint.get("carried")
    if carried is None:         # written before strategies carried a dict
        velocity = checkpoint.get("velocity")
        carried = {} if velocity is None else {"velocity": velocity}
    _fitted.resume(estimator, checkpoint["model"], checkpoint["n_epochs_"],
                   checkpoint["history_"], checkpoint["optimizer_states"],
                   carried)


def restore_callbacks(named, checkpoint):
    """Give each callback (``(name, callback)`` pairs, initialized) the
    state the checkpoint holds under its name."""
    states = checkpoint.get("callbacks") or {}
    for name, cb in named:
        if name in states:
            cb.load_state_dict(states[name])


def check_params(estimator, checkpoint, path):
    """Refuse a checkpoint of another estimator class or parameters."""
    name = _qualified(type(estimator))
    if checkpoint["estimator"] != name:
        raise CheckpointMismatchError(
            f"The checkpoint {path} was written by "
            f"{checkpoint['estimator']}, not {name}.")
    diffs = _differences(checkpoint["params"], describe_params(estimator),
                         "estimator", "(unset)")
    if diffs:
        raise CheckpointMismatchError(
            f"The checkpoint {path} was written with other parameters "
            f"than {type(estimator).__name__}'s: " + "; ".join(diffs)
            + ". Resume with the same parameters, or use another "
            "checkpoint_dir.")


def check_model(estimator, checkpoint, path):
    """Refuse a checkpoint whose model has other entries or shapes."""
    diffs = _differences(checkpoint["keys"],
                         _shapes(estimator.module_.state_dict()),
                         "module", "absent")
    if diffs:
        raise CheckpointMismatchError(
            f"The checkpoint {path} holds another module's weights: "
            + "; ".join(diffs) + ".")


def _differences(theirs, ours, what, missing):
    """``"key: checkpoint A, <what> B"`` for each key whose values differ
    between the checkpoint's dict and ours (``missing`` where a side
    lacks the key)."""
    return [f"{k}: checkpoint {theirs.get(k, missing)}, {what} "
            f"{ours.get(k, missing)}"
            for k in sorted(set(ours) | set(theirs))
            if ours.get(k) != theirs.get(k)]


def check_workers(estimator, checkpoint, path):
    """Refuse a checkpoint trained by another number of replicas."""
    if checkpoint["n_workers_"] != estimator.n_workers_:
        raise CheckpointMismatchError(
            f"The checkpoint {path} was trained by "
            f"{checkpoint['n_workers_']} workers, this fit would use "
            f"{estimator.n_workers_}: set n_workers="
            f"{checkpoint['n_workers_']} to resume it.")


def describe_params(estimator):
    """The estimator's parameters as text, those a resume may change
    left out: the free ones, and callbacks that only observe
    (``changes_training=False``) with their ``callbacks__NAME__arg``
    parameters (classes by name: a checkpoint is read by another
    process)."""
    params = estimator.get_params(deep=False)
    entries = params.get("callbacks")
    observers = set()
    if isinstance(entries, (list, tuple)):
        observers = {name for name, cb in name_callbacks(
            entries, {}, type(estimator).__name__)
            if not getattr(cb, "changes_training", True)}
        params["callbacks"] = [
            entry for entry in entries if getattr(
                entry[1] if isinstance(entry, tuple) else entry,
                "changes_training", True)]
    return {k: describe(v) for k, v in params.items()
            if k not in FREE_PARAMS and not (
                k.startswith(PREFIX + "__")
                and k.split("__")[1] in observers)}


def describe(value):
    """A process-independent description of a parameter value."""
    if value is None or isinstance(value, (bool, str, np.bool_)):
        return repr(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return repr(value.item() if hasattr(value, "item") else value)
    if isinstance(value, type) or callable(value) and hasattr(
            value, "__qualname__"):
        return _qualified(value)
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(describe(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}"
                               for k, v in sorted(value.items())) + "}"
    if hasattr(value, "shape"):
        return (f"{type(value).__name__} of shape "
                f"{tuple(int(n) for n in value.shape)}")
    if isinstance(value, torch.device):
        return repr(str(value))
    return f"a {_qualified(type(value))}"


def _qualified(obj):
    return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"


def _shapes(state):
    return {k: tuple(int(n) for n in v.shape) for k, v in state.items()}


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
