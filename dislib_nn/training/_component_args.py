"""The components' keyword arguments: prefixed routing and checks.

Components take their arguments as prefixed estimator parameters, as in
skorch: ``module__hidden=64``, ``optimizer__momentum=0.9``,
``lr_schedule__T_max=50``. This module splits them by prefix, refuses a
name no component takes before anything is built (with the closest
valid one), and says which arguments fit fills in from the data.
"""

import difflib
import inspect

import torch

from dislib_nn.training._components import name_of
from dislib_nn.training.callbacks._schedule import is_scheduler_class

__all__ = ["PREFIXES", "INFERRED", "split_prefixed", "check_keywords",
           "check_arguments", "inferable_arguments"]


PREFIXES = ("module", "criterion", "optimizer", "lr_schedule",
            "outer_optimizer")

# What the prefixes that check_keywords lets through for their owners
# set, for its messages.
_ROUTED = {"callbacks": "callbacks__<name>__<argument> sets a callback "
                        "argument",
           "strategy": "strategy__<argument> sets an argument of the "
                       "strategy= given"}

# Arguments fit fills in from the data when the module class accepts them
# and the user did not give them (scikeras does the same with ``meta``).
INFERRED = ("n_features_in", "n_classes", "n_outputs")


def split_prefixed(params):
    """``{prefix: {argument: value}}`` from ``{"prefix__argument": value}``."""
    out = {prefix: {} for prefix in PREFIXES}
    for key, value in params.items():
        prefix, sep, arg = key.partition("__")
        if sep and prefix in out:
            out[prefix][arg] = value
    return out


def check_keywords(keys, valid, caller, error, more_prefixes=()):
    """Raise ``error`` for the first key neither valid nor prefixed.

    The message suggests the closest valid name or prefix ("did you
    mean"), as skorch does for mistyped prefixes. ``more_prefixes``
    (``"callbacks"``) are let through too, checked by their owners.
    """
    prefixes = tuple(PREFIXES) + tuple(more_prefixes)
    for key in keys:
        prefix, sep, arg = key.partition("__")
        if key in valid or (sep and prefix in prefixes and arg):
            continue
        if sep and prefix in prefixes:
            raise error(
                f"{caller} got a parameter {key!r} that names no argument "
                f"of {prefix}: write {prefix}__<argument>=value.")
        if sep:
            close = difflib.get_close_matches(prefix, prefixes, n=1)
            hint = (f" Did you mean '{close[0]}__{arg}'?" if close else "")
            others = "".join(f" {_ROUTED.get(p, p + '__<argument>')}."
                             for p in more_prefixes)
            raise error(
                f"{caller} got an unknown parameter {key!r}: "
                f"'{prefix}__' is not a component prefix; the prefixes "
                f"are {', '.join(p + '__' for p in PREFIXES)}.{hint}"
                f"{others}")
        close = difflib.get_close_matches(
            key, list(valid) + [p + "__" for p in prefixes], n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise error(f"{caller} got an unknown parameter {key!r}.{hint}")


def check_arguments(specs, prefixed, caller, error):
    """Raise ``error`` for a prefixed argument its component does not take.

    :func:`check_keywords` lets every ``prefix__argument`` of a known
    prefix through; this checks the argument against the component's
    signature, before anything is built, so that ``module__hiden=3``
    names the component, the arguments it takes and the closest one
    ("did you mean"), instead of a ``TypeError`` from its constructor
    once fit has started. A component whose signature cannot be read or
    that takes ``**kwargs`` accepts any name.

    Parameters
    ----------
    specs : dict
        Prefix to component: the module, the criterion (its default
        included), the optimizer, the lr_schedule and the
        outer_optimizer.
    prefixed : dict
        :func:`split_prefixed` of the estimator's parameters.
    caller : str
        The estimator, for the message.
    error : type
        The exception class raised.
    """
    for prefix in PREFIXES:
        kwargs = prefixed.get(prefix) or {}
        if not kwargs:
            continue
        spec = specs.get(prefix)
        if prefix in ("module", "criterion") and \
                isinstance(spec, torch.nn.Module):
            raise error(_instance_message(prefix, spec, kwargs))
        if prefix == "outer_optimizer" and spec is None:
            raise error(
                f"outer_optimizer__ arguments ({', '.join(sorted(kwargs))}) "
                f"were given, but outer_optimizer is None. Pass the "
                f"optimizer class too, e.g. "
                f"outer_optimizer=torch.optim.SGD.")
        if prefix == "lr_schedule" and not is_scheduler_class(spec):
            raise error(
                f"lr_schedule__ arguments ({', '.join(sorted(kwargs))}) "
                f"were given, but lr_schedule is not a torch scheduler "
                f"class. Got {spec!r}.")
        if prefix == "optimizer" and "lr" in kwargs:
            raise error(
                f"{caller} got optimizer__lr={kwargs['lr']!r}: the "
                f"optimizer's learning rate is {caller}'s own 'lr' "
                f"parameter (every epoch's rate, schedules included, is "
                f"sent to the optimizers). Pass lr={kwargs['lr']!r} "
                f"instead.")
        # The optimizers and the scheduler get their first argument (the
        # parameters, the optimizer) and the optimizer its lr from fit
        # (the outer optimizer's lr is an outer_optimizer__ argument).
        accepted = _keyword_arguments(
            spec, skip_first=prefix in ("optimizer", "lr_schedule",
                                        "outer_optimizer"),
            reserved=("lr",) if prefix == "optimizer" else ())
        if accepted is None:
            continue
        for arg in kwargs:
            if arg in accepted:
                continue
            close = difflib.get_close_matches(arg, accepted, n=1)
            hint = f" Did you mean '{prefix}__{close[0]}'?" if close else ""
            takes = (f"its arguments are {', '.join(accepted)}"
                     if accepted else "it takes no arguments")
            raise error(
                f"{caller} got {prefix}__{arg}={_short(kwargs[arg])}, an "
                f"unknown parameter: {prefix} {name_of(spec)} takes no "
                f"argument {arg!r}; {takes}.{hint}")


def _keyword_arguments(spec, skip_first, reserved):
    """The names ``spec(...)`` takes by keyword; None for any name."""
    try:
        params = list(inspect.signature(spec).parameters.values())
    except (TypeError, ValueError):
        return None
    kind = inspect.Parameter
    if any(p.kind is kind.VAR_KEYWORD for p in params):
        return None
    if skip_first and params and params[0].kind in (
            kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD):
        params = params[1:]
    return [p.name for p in params
            if p.kind in (kind.POSITIONAL_OR_KEYWORD, kind.KEYWORD_ONLY)
            and p.name not in reserved]


def _short(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _instance_message(role, spec, kwargs):
    return (f"{role}__ arguments ({', '.join(sorted(kwargs))}) were "
            f"given, but {role} is an instance "
            f"({type(spec).__name__}), which is copied as it is. Pass "
            f"the class, {role}={type(spec).__name__}, to build it "
            f"with those arguments.")


def inferable_arguments(module):
    """Which of ``INFERRED`` the module class's ``__init__`` accepts."""
    if not isinstance(module, type):
        return ()
    try:
        params = inspect.signature(module.__init__).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(name for name in INFERRED if name in params)
