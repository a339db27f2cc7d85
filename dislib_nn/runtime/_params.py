"""The PyCOMPSs parameter vocabulary and the parsed form of a ``@task``.

The names and their spelling follow ``pycompss.api.parameter`` so that a
task written for dislib_nn reads exactly as a PyCOMPSs task. Under the
compss backend the real pycompss objects replace these.
"""

import inspect

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
# backends accept them so that one script runs everywhere; they take
# effect only under COMPSs.
TASK_OPTIONS = frozenset({
    "returns", "priority", "on_failure", "time_out", "is_replicated",
    "is_distributed", "cache_returns", "target_direction", "processes",
    "processes_per_node", "numba",
})


def _direction(name):
    return _DIRECTIONS[name]


class TaskSpec:
    """What a ``@task`` declaration says about one function.

    Attributes
    ----------
    name : str
        The function's qualified name, used in every error message.
    returns : int
        Number of values the task returns (0 means none).
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
        if "returns" not in options:
            raise TaskDefinitionError(
                f"@task on {self.name}() must give 'returns' explicitly "
                f"(returns=0 for a task without result): PyCOMPSs would "
                f"guess it from the source, so be explicit.")
        self.returns = _parse_returns(self.name, options["returns"])
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


def _parse_returns(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TaskDefinitionError(
            f"@task on {name}(): 'returns' must be an int >= 0. "
            f"Got {value!r} instead.")
    return value


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
