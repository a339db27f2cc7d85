"""Checkpoints: the state of a fit after each merge, on disk, atomically.

With ``checkpoint_dir`` set, the :class:`Checkpoint` callback of the
epoch loop writes ``checkpoint.pt`` in that directory after every merged
epoch: the global model, the optimizer states the next epoch starts from
(per worker with ``optimizer_state="keep"``, averaged with
``"average"``), the outer momentum buffer, the epoch count, the base
seed every random draw derives from (:mod:`._seeds`), the estimator's
parameters (described as text) and ``history_``.

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
import os
import tempfile

import numpy as np
import torch

from dislib_nn import runtime
from dislib_nn.exceptions import (CheckpointMismatchError,
                                  InvalidParameterError)
from dislib_nn.runtime import COLLECTION_IN, Depth, Type, task
from dislib_nn.training import _fitted
from dislib_nn.training.callbacks._core import Callback

__all__ = ["FILE_NAME", "Checkpoint", "snapshot", "write", "load",
           "check_params", "check_model", "check_workers", "describe",
           "to_resume", "restore"]

FILE_NAME = "checkpoint.pt"
_TEMP_PREFIX = ".checkpoint-"
_FORMAT = 1
#: parameters a resumed fit may change: they do not alter the epochs
#: already run (n_epochs only says where the fit ends).
FREE_PARAMS = ("n_epochs", "verbose", "warm_start", "checkpoint_dir",
               "on_failure", "max_retries")
_COLLECTION = {Type: COLLECTION_IN, Depth: 1}


@task(returns=1, optims=_COLLECTION)
def _snapshot(model, velocity, optims, has_optims):
    """One copy of a merged epoch's parts, for the master to fetch."""
    return {"model": model, "velocity": velocity,
            "optimizer_states": list(optims) if has_optims else None}


def snapshot(model, velocity, optimizer_states):
    """Submit the copy of a merged epoch's parts; its future.

    ``optimizer_states`` is a list (futures or values) or None.
    Collections hold no None, so an absent list travels as ``[model]``
    with ``has_optims=False``.
    """
    has_optims = optimizer_states is not None
    return _snapshot(model, velocity,
                     list(optimizer_states) if has_optims else [model],
                     has_optims)


class Checkpoint(Callback):
    """Writes the checkpoint of every merged epoch once its scalars are
    read (after :class:`~._core.History`, so ``history_`` holds the
    epoch's record)."""

    wants_checkpoint = True

    def __init__(self, directory):
        self.directory = os.fspath(directory)

    def on_fit_begin(self, loop):
        os.makedirs(self.directory, exist_ok=True)
        # Temporary files of a writer killed mid-write: never complete.
        for path in glob.glob(os.path.join(self.directory,
                                           _TEMP_PREFIX + "*.tmp")):
            _unlink(path)

    def on_epoch_end(self, loop, record, handle):
        if handle.checkpoint is None:
            return False
        parts = runtime.wait_on(handle.checkpoint)
        est = loop.estimator
        write(self.directory, {
            "format": _FORMAT,
            "estimator": _qualified(type(est)),
            "params": describe_params(est),
            "n_workers_": int(est.n_workers_),
            "keys": _shapes(parts["model"]),
            "model": parts["model"],
            "optimizer_states": parts["optimizer_states"],
            "velocity": parts["velocity"],
            "n_epochs_": int(est.n_epochs_),
            "seed": int(est._seed),
            "history_": list(est.history_),
        })
        return False


def write(directory, payload):
    """Write ``payload`` as ``directory/checkpoint.pt``, atomically."""
    fd, tmp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(directory, FILE_NAME))
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_directory(directory)


def load(directory):
    """The checkpoint in ``directory``, or None when there is none."""
    path = os.path.join(os.fspath(directory), FILE_NAME)
    if not os.path.exists(path):
        return None
    # Tensors, numbers, strings, lists and dicts only: nothing to unpickle
    # that could run code.
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise CheckpointMismatchError(
            f"{path} is not a dislib_nn checkpoint of format {_FORMAT}.")
    return payload


def to_resume(estimator, resume):
    """The checkpoint ``fit(resume=True)`` continues (or None) and its
    path; checked against the parameters before any task runs."""
    name = type(estimator).__name__
    if not isinstance(resume, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The 'resume' argument of {name}.fit must be an instance "
            f"of 'bool'. Got {resume!r} instead.")
    if not resume:
        return None, None
    if estimator.checkpoint_dir is None:
        raise InvalidParameterError(
            f"{name}.fit(resume=True) needs checkpoint_dir, the "
            f"directory to resume from. Got checkpoint_dir=None.")
    checkpoint = load(estimator.checkpoint_dir)
    path = os.path.join(os.fspath(estimator.checkpoint_dir), FILE_NAME)
    if checkpoint is not None:
        check_params(estimator, checkpoint, path)
    return checkpoint, path


def restore(estimator, checkpoint):
    """Continue from a checkpoint (the estimator's model is built)."""
    _fitted.resume(estimator, checkpoint["model"], checkpoint["n_epochs_"],
                   checkpoint["history_"], checkpoint["optimizer_states"],
                   checkpoint["velocity"])


def check_params(estimator, checkpoint, path):
    """Refuse a checkpoint of another estimator class or parameters."""
    name = _qualified(type(estimator))
    if checkpoint["estimator"] != name:
        raise CheckpointMismatchError(
            f"The checkpoint {path} was written by "
            f"{checkpoint['estimator']}, not {name}.")
    ours, theirs = describe_params(estimator), checkpoint["params"]
    diffs = [f"{k}: checkpoint {theirs.get(k, '(unset)')}, estimator "
             f"{ours.get(k, '(unset)')}"
             for k in sorted(set(ours) | set(theirs))
             if ours.get(k) != theirs.get(k)]
    if diffs:
        raise CheckpointMismatchError(
            f"The checkpoint {path} was written with other parameters "
            f"than {type(estimator).__name__}'s: " + "; ".join(diffs)
            + ". Resume with the same parameters, or use another "
            "checkpoint_dir.")


def check_model(estimator, checkpoint, path):
    """Refuse a checkpoint whose model has other entries or shapes."""
    ours = _shapes(estimator.module_.state_dict())
    theirs = checkpoint["keys"]
    diffs = [f"{k}: checkpoint {theirs.get(k, 'absent')}, module "
             f"{ours.get(k, 'absent')}"
             for k in sorted(set(ours) | set(theirs))
             if ours.get(k) != theirs.get(k)]
    if diffs:
        raise CheckpointMismatchError(
            f"The checkpoint {path} holds another module's weights: "
            + "; ".join(diffs) + ".")


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
    left out (classes by name: a checkpoint is read by another
    process)."""
    return {k: describe(v)
            for k, v in estimator.get_params(deep=False).items()
            if k not in FREE_PARAMS}


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


def _fsync_directory(directory):
    """Make the rename durable (where directories can be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
