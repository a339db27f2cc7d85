"""Declarative parameter validation, with scikit-learn's message shape.

Each estimator holds a table ``{parameter: [constraint, ...]}``; a value
is valid when it meets any constraint of its list. :func:`validate` runs
at the start of ``fit`` and raises
:class:`~dislib_nn.exceptions.InvalidParameterError` (a ``ValueError``
and a ``TypeError``) with the message shape scikit-learn uses: "The
'batch_size' parameter of SyncEpochAveragingClassifier must be an int in
the range [1, inf). Got 0 instead."
"""

import numbers
import os

import numpy as np
import torch

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training.tasks._precision import (PRECISIONS,
                                                 check_device_parameter)

__all__ = ["Interval", "EpochFraction", "Options", "Text", "Rates",
           "Boolean",
           "NoneValue",
           "Callable",
           "PathLike", "ModuleSpec", "DeviceSpec", "RandomState",
           "PairOfArrays", "Precision", "StrategySpec", "validate"]


class Interval:
    """An int (``kind=numbers.Integral``) or real number in a range."""

    def __init__(self, kind, left, right, closed="both"):
        self.kind, self.left, self.right, self.closed = \
            kind, left, right, closed

    def is_satisfied_by(self, value):
        if isinstance(value, (bool, np.bool_)):
            return False
        if not isinstance(value, self.kind):
            return False
        if self.kind is numbers.Real and not np.isfinite(value):
            return False
        left_ok = self.left is None or (
            value >= self.left if self.closed in ("left", "both")
            else value > self.left)
        right_ok = self.right is None or (
            value <= self.right if self.closed in ("right", "both")
            else value < self.right)
        return left_ok and right_ok

    def __str__(self):
        kind = "an int" if self.kind is numbers.Integral \
            else "a float"
        lb = "[" if self.closed in ("left", "both") and \
            self.left is not None else "("
        rb = "]" if self.closed in ("right", "both") and \
            self.right is not None else ")"
        left = "-inf" if self.left is None else self.left
        right = "inf" if self.right is None else self.right
        return f"{kind} in the range {lb}{left}, {right}{rb}"


class Options:
    """One of a fixed set of strings."""

    def __init__(self, *options):
        self.options = options

    def is_satisfied_by(self, value):
        return isinstance(value, str) and value in self.options

    def __str__(self):
        return ("a str among {"
                + ", ".join(repr(o) for o in self.options) + "}")


class Text:
    """A non-empty str."""

    def is_satisfied_by(self, value):
        return isinstance(value, str) and value != ""

    def __str__(self):
        return "a non-empty str"


class Rates:
    """A list or tuple of positive finite numbers (one per worker)."""

    def is_satisfied_by(self, value):
        return isinstance(value, (list, tuple)) and len(value) > 0 and all(
            isinstance(r, numbers.Real) and not isinstance(r, (bool,
                                                              np.bool_))
            and np.isfinite(r) and r > 0 for r in value)

    def __str__(self):
        return "a list of positive numbers, one per worker"


class EpochFraction:
    """A fraction ``1 / k`` of an epoch (``k`` an int >= 2): 0.5, 0.25,
    0.1..."""

    def is_satisfied_by(self, value):
        if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, numbers.Real) or not 0 < value < 1:
            return False
        k = 1 / float(value)
        return abs(k - round(k)) <= 1e-9 * k

    def __str__(self):
        return "a fraction 1/k of an epoch (0.5, 0.25, 0.1, ...)"


class Boolean:
    def is_satisfied_by(self, value):
        return isinstance(value, (bool, np.bool_))

    def __str__(self):
        return "an instance of 'bool'"


class NoneValue:
    def is_satisfied_by(self, value):
        return value is None

    def __str__(self):
        return "None"


class PathLike:
    def is_satisfied_by(self, value):
        return isinstance(value, (str, os.PathLike)) and str(value) != ""

    def __str__(self):
        return "a non-empty str or os.PathLike"


class Callable:
    def __init__(self, what="a callable"):
        self.what = what

    def is_satisfied_by(self, value):
        return callable(value)

    def __str__(self):
        return self.what


class StrategySpec:
    """A user-written strategy: a ``dislib_nn.strategies.Strategy``
    subclass or instance."""

    def is_satisfied_by(self, value):
        from dislib_nn.training.strategies._rounds import is_user_strategy
        return is_user_strategy(value)

    def __str__(self):
        return ("a dislib_nn.strategies.Strategy subclass or instance "
                "(docs/writing_a_strategy.md)")


class CallbackList:
    """A list of callbacks, each an instance or a ``(name, instance)``
    pair (see :mod:`dislib_nn.callbacks`). Only the container is checked
    here; :func:`dislib_nn.training.callbacks._named.check_callbacks`
    checks each entry, naming it."""

    def is_satisfied_by(self, value):
        return isinstance(value, (list, tuple))

    def __str__(self):
        return ("a list of dislib_nn.callbacks.Callback instances or "
                "(name, instance) pairs")


class ModuleSpec:
    """A ``torch.nn.Module`` subclass or an instance of one."""

    def is_satisfied_by(self, value):
        return isinstance(value, torch.nn.Module) or (
            isinstance(value, type) and issubclass(value, torch.nn.Module))

    def __str__(self):
        return "a subclass of torch.nn.Module or an instance of one"


class DeviceSpec:
    """``"auto"``, or a string or ``torch.device`` that torch accepts."""

    def is_satisfied_by(self, value):
        if isinstance(value, torch.device):
            return True
        if not isinstance(value, str):
            return False
        if value == "auto":
            return True
        try:
            torch.device(value)
        except (RuntimeError, ValueError):
            return False
        return True

    def __str__(self):
        return ("'auto' or a torch device such as 'cpu', 'cuda' or "
                "'cuda:1'")


class RandomState:
    def is_satisfied_by(self, value):
        return isinstance(value, np.random.RandomState) or (
            isinstance(value, numbers.Integral)
            and not isinstance(value, (bool, np.bool_))
            and 0 <= value < 2 ** 32)

    def __str__(self):
        return ("an int in the range [0, 4294967295], an instance of "
                "'numpy.random.RandomState'")


class PairOfArrays:
    """A pair ``(X, y)``, such as ``validation_data``."""

    def is_satisfied_by(self, value):
        return isinstance(value, (tuple, list)) and len(value) == 2

    def __str__(self):
        return "a pair (X, y)"


class Precision:
    """``"fp32"``, ``"bf16"`` or ``"fp16"``; ``"fp16"`` only with a
    ``device`` parameter that is CUDA or ``"auto"``."""

    def is_satisfied_by(self, value):
        return isinstance(value, str) and value in PRECISIONS

    def check_with(self, value, params, caller):
        """What depends on other parameters: fp16 needs CUDA."""
        check_device_parameter(value, params.get("device", "auto"))

    def __str__(self):
        return "a str among {'fp32', 'bf16', 'fp16'}"


def validate(constraints, params, caller):
    """Check ``params`` against ``constraints``; raise on the first misfit.

    Parameters
    ----------
    constraints : dict of str to list
        Parameter name to the constraints it may meet (any one is enough).
    params : dict
        Parameter name to value (names missing from ``constraints`` are
        not checked).
    caller : str
        Who the parameters belong to, for the message.

    Raises
    ------
    InvalidParameterError
    """
    for name, allowed in constraints.items():
        if name not in params:
            continue
        value = params[name]
        met = next((c for c in allowed if c.is_satisfied_by(value)), None)
        if met is not None:
            # A constraint may also check the value against the other
            # parameters (checked first when listed before it).
            if hasattr(met, "check_with"):
                met.check_with(value, params, caller)
            continue
        described = [str(c) for c in allowed]
        if len(described) == 1:
            expected = described[0]
        else:
            expected = ", ".join(described[:-1]) + " or " + described[-1]
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be {expected}. "
            f"Got {_show(value)} instead.")


def _show(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
