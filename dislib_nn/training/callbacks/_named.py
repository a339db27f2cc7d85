"""Names of the ``callbacks=`` entries, and ``callbacks__NAME__arg``.

skorch's convention: an entry is a callback or a ``(name, callback)``
pair; an unnamed one is named after its class, and names that occur more
than once get ``_1``, ``_2``, ... in order. ``set_params(callbacks__NAME
__arg=value)`` (stored by the estimator, applied at fit) sets ``arg`` on
the callback named ``NAME``. The errors name the argument and the value.
"""

import difflib

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training.callbacks._core import Callback

__all__ = ["PREFIX", "DEFAULTS", "name_callbacks", "check_routed",
           "apply_routed", "routed_params", "check_callbacks"]

PREFIX = "callbacks"

#: The default callbacks' names (in the order they run, see
#: :mod:`._core`) -> the estimator parameters that set them. A user's
#: callback may not take these names.
DEFAULTS = {
    "failure_policy": "on_failure and max_retries",
    "learning_rate": "lr and lr_schedule",
    "history": "nothing (it always runs)",
    "early_stopping": "early_stopping and patience",
    "printer": "verbose",
    "checkpoint": "checkpoint_dir",
}


def check_callbacks(entries, params, owner):
    """Check the ``callbacks`` parameter and the ``callbacks__NAME__arg``
    ones among ``params``, set those arguments, and initialize the
    callbacks (which checks their own arguments), before any task runs.
    """
    named = name_callbacks(entries, DEFAULTS, owner)
    routed = routed_params(params)
    check_routed(routed, named, DEFAULTS, owner)
    apply_routed(routed, named)
    for _, cb in named:
        cb.get_params()     # clone and set_params will need it
        cb.initialize()
    return named


def name_callbacks(entries, reserved, owner):
    """``(name, callback)`` pairs of the ``callbacks`` parameter.

    Parameters
    ----------
    entries : None, list or tuple
    reserved : dict
        The default callbacks' names -> the parameters that set them; a
        user's callback may not take one.
    owner : str
        The estimator class's name, for the messages.
    """
    if entries is None:
        return []
    if not isinstance(entries, (list, tuple)):
        raise InvalidParameterError(
            f"The 'callbacks' parameter of {owner} must be None or a list "
            f"of Callback instances or (name, instance) pairs. Got "
            f"{entries!r} instead.")
    pairs, implicit = [], []
    for i, entry in enumerate(entries):
        if isinstance(entry, tuple):
            if len(entry) != 2 or not isinstance(entry[0], str):
                raise InvalidParameterError(
                    f"callbacks[{i}] of {owner} must be a Callback or a "
                    f"(name, Callback) pair with a str name. Got "
                    f"{entry!r} instead.")
            name, cb = entry
            _check_name(name, i, owner)
        else:
            name, cb = type(entry).__name__, entry
            implicit.append(len(pairs))
        _check_callback(cb, i, owner)
        pairs.append([name, cb])
    counts = {}
    for k in implicit:
        counts[pairs[k][0]] = counts.get(pairs[k][0], 0) + 1
    seen = {}
    for k in implicit:
        name = pairs[k][0]
        if counts[name] > 1:
            seen[name] = seen.get(name, 0) + 1
            pairs[k][0] = f"{name}_{seen[name]}"
    names = [name for name, _ in pairs]
    for name in names:
        if names.count(name) > 1:
            raise InvalidParameterError(
                f"The 'callbacks' parameter of {owner} names two callbacks "
                f"{name!r}; names must be unique. Got the names {names}.")
        if name in reserved:
            raise InvalidParameterError(
                f"The 'callbacks' parameter of {owner} names a callback "
                f"{name!r}, the name of a default callback (set by "
                f"{reserved[name]}). Name it otherwise: "
                f"callbacks=[('my_{name}', ...)].")
    return [tuple(pair) for pair in pairs]


def routed_params(params):
    """The ``callbacks__NAME__arg`` entries of ``params``."""
    return {k: v for k, v in params.items()
            if k.partition("__")[0] == PREFIX and "__" in k}


def check_routed(routed, named, reserved, owner):
    """Raise for a ``callbacks__NAME__arg`` with no such callback or
    argument (a "did you mean" hint where one is close)."""
    callbacks = dict(named)
    for key in routed:
        _, _, rest = key.partition("__")
        name, sep, arg = rest.partition("__")
        if not sep or not name or not arg:
            raise InvalidParameterError(
                f"{owner} got a parameter {key!r}: write "
                f"callbacks__<name>__<argument>=value.")
        if name in reserved:
            raise InvalidParameterError(
                f"{owner} got a parameter {key!r}, but {name!r} is a "
                f"default callback, set by {reserved[name]}: set those "
                f"parameters instead.")
        if name not in callbacks:
            close = difflib.get_close_matches(name, list(callbacks), n=1)
            hint = (f" Did you mean 'callbacks__{close[0]}__{arg}'?"
                    if close else "")
            raise InvalidParameterError(
                f"{owner} got a parameter {key!r}, but no callback is "
                f"named {name!r}; the callbacks are named "
                f"{sorted(callbacks)}.{hint}")
        valid = list(callbacks[name].get_params(deep=False))
        if arg not in valid:
            close = difflib.get_close_matches(arg, valid, n=1)
            hint = (f" Did you mean 'callbacks__{name}__{close[0]}'?"
                    if close else "")
            raise InvalidParameterError(
                f"{owner} got a parameter {key!r}, but the callback "
                f"{name!r} ({type(callbacks[name]).__name__}) takes no "
                f"argument {arg!r}; it takes {sorted(valid)}.{hint}")


def apply_routed(routed, named):
    """Set each ``callbacks__NAME__arg`` on its callback (checked)."""
    callbacks = dict(named)
    for key, value in routed.items():
        name, _, arg = key.partition("__")[2].partition("__")
        callbacks[name].set_params(**{arg: value})


def _check_name(name, i, owner):
    if not name or "__" in name:
        raise InvalidParameterError(
            f"callbacks[{i}] of {owner} has the name {name!r}: a name must "
            f"be a non-empty str without '__' (set_params reads "
            f"callbacks__<name>__<argument>).")


def _check_callback(cb, i, owner):
    if isinstance(cb, type):
        raise InvalidParameterError(
            f"callbacks[{i}] of {owner} must be a Callback instance. Got "
            f"the class {cb.__name__}: pass {cb.__name__}(...) instead.")
    if not isinstance(cb, Callback):
        raise InvalidParameterError(
            f"callbacks[{i}] of {owner} must be an instance of a subclass "
            f"of dislib_nn.callbacks.Callback. Got {cb!r} instead.")
