"""Checkpoint files, and resuming a fit from one.

A checkpoint (``checkpoint.pt``, written by the
:class:`~.callbacks._checkpoint.Checkpoint` callback with :func:`write`)
holds the global model, what the strategy carries (its
:class:`~dislib_nn.training.strategies._interface.Carry`: the optimizer
states the next epoch starts from, and the strategy's own state under
``"carried"``), the epoch count, the base seed every random draw derives
from (:mod:`._seeds`), the estimator's parameters (described as text),
``history_`` and every callback's state.

``fit(X, y, resume=True)`` reads it back (:func:`to_resume`, with
:func:`load`, which unpickles nothing that could run code) and checks
that it was written by the same estimator class, parameters and module
(:func:`check_params`, :func:`check_model`, :func:`check_workers`)
before any task runs; :func:`restore` and :func:`restore_callbacks`
then give the fit what the checkpoint held.
"""

import os
import pickle

import numpy as np
import torch

from dislib_nn.exceptions import (CheckpointMismatchError,
                                  InvalidParameterError, UnsafeFileError)
from dislib_nn.training import _atomic_file, _fitted
from dislib_nn.training.callbacks._named import PREFIX, name_callbacks
from dislib_nn.training.strategies._template import Strategy

__all__ = ["FILE_NAME", "FORMAT", "FREE_PARAMS", "write", "load",
           "to_resume", "restore", "restore_callbacks", "check_params",
           "check_model", "check_workers", "describe_params", "describe",
           "qualified", "shapes"]

FILE_NAME = "checkpoint.pt"
#: The version of the checkpoint's layout.
FORMAT = 1
#: parameters a resumed fit may change: they do not alter the epochs
#: already run (n_epochs only says where the fit ends; a checkpoint holds
#: the model before any BatchNorm recompute; scoring changes the
#: valid_score of the epochs still to run).
FREE_PARAMS = ("n_epochs", "verbose", "warm_start", "checkpoint_dir",
               "on_failure", "max_retries", "task_timeout",
               "recompute_batchnorm", "scoring")


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
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointMismatchError(
            f"{path} is not a dislib_nn checkpoint of format {FORMAT}.")
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
    name = qualified(type(estimator))
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
                         shapes(estimator.module_.state_dict()),
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
        return qualified(value)
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
    if isinstance(value, Strategy):
        # A strategy= instance: its class and its parameters.
        return f"{qualified(type(value))}({describe(value.get_params())})"
    return f"a {qualified(type(value))}"


def qualified(obj):
    return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"


def shapes(state):
    return {k: tuple(int(n) for n in v.shape) for k, v in state.items()}
