"""The PyCOMPSs parameter vocabulary and the parsed form of a ``@task``.

The names and their spelling follow ``pycompss.api.parameter`` so that a
task written for dislib_nn reads exactly as a PyCOMPSs task. Under the
compss backend the real pycompss objects replace these.
"""

import ast
import inspect
import math
import numbers
import textwrap
import typing

from dislib_nn.exceptions import TaskDefinitionError


class Direction:
    """One parameter direction (``IN``, ``INOUT``, ...)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name

    def __reduce__(self):
        return (_direction, (self.name,))


IN = Direction("IN")
INOUT = Direction("INOUT")
COMMUTATIVE = Direction("COMMUTATIVE")
COLLECTION_IN = Direction("COLLECTION_IN")
COLLECTION_OUT = Direction("COLLECTION_OUT")

_DIRECTIONS = {d.name: d for d in (IN, INOUT, COMMUTATIVE, COLLECTION_IN,
                                   COLLECTION_OUT)}

# Keys of the dictionary form ``{Type: COLLECTION_IN, Depth: 2}``.
Type = "type"
Depth = "depth"

# @task options PyCOMPSs knows that are not parameter names. The local
# backends accept them so that one script runs everywhere; those parsed
# below (returns, priority, on_failure, time_out) take effect on every
# backend, the others only under COMPSs.
TASK_OPTIONS = frozenset({
    "returns", "priority", "on_failure", "time_out", "is_replicated",
    "is_distributed", "cache_returns", "target_direction", "processes",
    "processes_per_node", "numba",
})


# on_failure values, as PyCOMPSs spells them: RETRY (the default) runs a
# failed task again, FAIL stops, IGNORE gives its outputs default values,
# CANCEL_SUCCESSORS cancels the tasks that read its outputs.
FAILURE_POLICIES = ("RETRY", "FAIL", "IGNORE", "CANCEL_SUCCESSORS")


def _direction(name):
    return _DIRECTIONS[name]


class TaskSpec:
    """What a ``@task`` declaration says about one function.

    Attributes
    ----------
    name : str
        The function's qualified name, used in every error message.
    returns : int
        Number of values the task returns (0 means none). Omitted or 0,
        it is inferred from the function as PyCOMPSs infers it.
    on_failure : str
        One of :data:`FAILURE_POLICIES` (``@on_failure`` may change it).
    time_out : float or None
        Seconds an execution may run before it fails with
        :class:`~dislib_nn.exceptions.TaskTimeoutError`; None: no limit
        of its own (``runtime.time_out`` may give one).
    defaults : dict
        ``@on_failure`` defaults: ``returns`` and parameter names.
    directions : dict
        Parameter name to ``(Direction, depth)``; parameters not listed
        are ``IN``.
    signature : inspect.Signature
    """

    def __init__(self, fn, options):
        self.fn = fn
        self.name = fn.__qualname__
        self.signature = inspect.signature(fn)
        self.constraints = {}
        self.directions = {}
        params = self.signature.parameters
        self.returns = _parse_returns(self.name, options.get("returns"),
                                      fn)
        self.on_failure = _parse_on_failure(
            self.name, options.get("on_failure", "RETRY"))
        self.priority = _parse_priority(self.name,
                                        options.get("priority", False))
        self.time_out = parse_time_out(f"@task on {self.name}()",
                                       options.get("time_out"))
        # What an IGNORE'd task's outputs become: set by @on_failure.
        self.defaults = {}
        for key, value in options.items():
            if key in TASK_OPTIONS:
                continue
            if key not in params:
                raise TaskDefinitionError(
                    f"@task on {self.name}() declares a direction for "
                    f"'{key}', which is neither a parameter of "
                    f"{self.name}{self.signature} nor a task option.")
            self.directions[key] = _parse_direction(self.name, key, value)

    def direction(self, param):
        return self.directions.get(param, (IN, 0))


def _parse_priority(name, value):
    """``priority=True``: among the tasks ready at once, this one starts
    first (PyCOMPSs's meaning)."""
    if not isinstance(value, bool):
        raise TaskDefinitionError(
            f"@task on {name}(): 'priority' must be True or False. Got "
            f"{value!r} instead.")
    return value


def parse_time_out(where, value, error=TaskDefinitionError,
                   argument="time_out"):
    """A time-out: seconds (a positive finite number), or None for no
    time-out; 0 means None too, as it does for PyCOMPSs (its default).
    ``where`` starts the message ("@task on f()"), which names
    ``argument``."""
    if value is None or (isinstance(value, numbers.Real)
                         and not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value < 0:
        raise error(
            f"{where}: '{argument}' must be a positive finite number of "
            f"seconds (or None, or 0: no time-out). Got {value!r} "
            f"instead.")
    return float(value)


def _parse_on_failure(name, value):
    if value not in FAILURE_POLICIES:
        raise TaskDefinitionError(
            f"@task on {name}(): 'on_failure' must be one of "
            f"{', '.join(map(repr, FAILURE_POLICIES))}. Got {value!r} "
            f"instead.")
    return value


def check_failure_defaults(spec, management, defaults):
    """Check ``@on_failure`` keywords against the task they decorate."""
    name = spec.name
    if management not in FAILURE_POLICIES:
        raise TaskDefinitionError(
            f"@on_failure on {name}(): 'management' must be one of "
            f"{', '.join(map(repr, FAILURE_POLICIES))}. Got "
            f"{management!r} instead.")
    params = [p for p in spec.signature.parameters]
    unknown = sorted(set(defaults) - set(params) - {"returns"})
    if unknown:
        raise TaskDefinitionError(
            f"@on_failure on {name}() gives defaults for {unknown}, which "
            f"are neither 'returns' nor parameters of "
            f"{name}{spec.signature}.")
    given = [p for p in params if p in defaults]
    missing = [p for p in params if p not in defaults]
    if given and missing:
        # PyCOMPSs's worker looks up a default for every parameter as
        # soon as one is given: a missing one fails the task for good.
        raise TaskDefinitionError(
            f"@on_failure on {name}() gives defaults for {given} but not "
            f"for {missing}: when any parameter has a default, PyCOMPSs "
            f"needs one for every parameter (IN ones too).")
    if "returns" in defaults and spec.returns > 1:
        value = defaults["returns"]
        if not isinstance(value, (list, tuple)) or \
                len(value) != spec.returns:
            raise TaskDefinitionError(
                f"@on_failure on {name}(): the default 'returns' of a task "
                f"with returns={spec.returns} must be a list or tuple of "
                f"{spec.returns} values. Got {value!r} instead.")


def _parse_returns(name, value, fn):
    """The number of results, read as PyCOMPSs's master reads ``returns``.

    An int is a count; a type means one result; a tuple or list of types
    one result per entry. Omitted, ``None``, ``0`` or ``False`` all mean
    "not given": PyCOMPSs then looks at the function itself (see
    :func:`_inferred_returns`), and so do we, so that a PyCOMPSs task runs
    here unchanged.
    """
    if value is None or value is False or (
            isinstance(value, int) and not isinstance(value, bool)
            and value == 0):
        return _inferred_returns(fn)
    if isinstance(value, bool) or (isinstance(value, int) and value < 0):
        raise TaskDefinitionError(
            f"@task on {name}(): 'returns' must be an int >= 0, a type or "
            f"a tuple of types. Got {value!r} instead.")
    if isinstance(value, int):
        return value
    if isinstance(value, type):
        return 1
    if isinstance(value, (tuple, list)):
        return len(value)
    raise TaskDefinitionError(
        f"@task on {name}(): 'returns' must be an int >= 0, a type or a "
        f"tuple of types. Got {value!r} instead.")


def _inferred_returns(fn):
    """How many results PyCOMPSs gives a task declared without ``returns``.

    Its rule (``update_return_if_no_returns`` in the master): a return
    type hint gives ``len(hint)`` results, or one when the hint has no
    length (``-> None`` included); otherwise every ``return`` statement
    in the source counts, a bare ``return`` too: none gives 0 results, a
    tuple of n values gives n (the largest n found), anything else 1.
    """
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable hints: read the source
        hints = {}
    if "return" in hints:
        hint = hints["return"]
        try:
            return len(hint) if hasattr(hint, "__len__") else 1
        except TypeError:
            return 1
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise TaskDefinitionError(
            f"@task on {fn.__qualname__}() gives no 'returns', and its "
            f"source cannot be read to infer it (PyCOMPSs reads the "
            f"source too). Give returns= explicitly.") from None
    returns = [node for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Return)]
    if not returns:
        return 0
    widths = [len(node.value.elts) for node in returns
              if isinstance(node.value, (ast.Tuple, ast.List, ast.Set))]
    return max(widths) if widths else 1


def _parse_direction(name, param, value):
    if isinstance(value, Direction):
        if value in (COLLECTION_IN, COLLECTION_OUT):
            return value, 1
        return value, 0
    if isinstance(value, dict):
        unknown = set(value) - {Type, Depth}
        if unknown or Type not in value:
            raise TaskDefinitionError(
                f"@task on {name}(): parameter '{param}' must be a "
                f"direction or {{Type: ..., Depth: ...}}. Got {value!r}.")
        direction = value[Type]
        if direction not in (COLLECTION_IN, COLLECTION_OUT):
            raise TaskDefinitionError(
                f"@task on {name}(): the dictionary form for '{param}' is "
                f"for COLLECTION_IN and COLLECTION_OUT. Got {direction!r}.")
        depth = value.get(Depth, 1)
        if isinstance(depth, bool) or not isinstance(depth, int) \
                or depth < 1:
            raise TaskDefinitionError(
                f"@task on {name}(): Depth of '{param}' must be an int >= "
                f"1. Got {depth!r} instead.")
        return direction, depth
    raise TaskDefinitionError(
        f"@task on {name}(): parameter '{param}' has an unknown direction "
        f"{value!r}; use IN, INOUT, COMMUTATIVE, COLLECTION_IN or "
        f"COLLECTION_OUT.")
