"""Sending objects by value: what a worker could not import by name.

Plain pickle stores a class or function as a reference, its module and
name, and the receiving process imports it. That fails for everything
defined in ``__main__``: under COMPSs workers are forked executors that
import only the task's own module, never the user's script as
``__main__``; a notebook or a script fed on standard input cannot be
imported by anyone. :func:`by_value` wraps such an object so that it
travels as cloudpickle bytes, classes and functions included, and comes
out on the other side as the object itself (the wrapper never reaches
the task). Objects that plain pickle carries by reference are left
alone, so an importable module costs nothing extra.

The wrapper pickles through the standard ``__reduce__`` protocol, so it
works the same under every backend, PyCOMPSs's serializer included.
"""

import io
import pickle
import types

__all__ = ["by_value", "main_reference"]

_MAIN = "__main__"


def by_value(obj):
    """``obj``, made to travel by value when a worker could not import it.

    Returns ``obj`` itself when plain pickle carries it and it refers to
    nothing defined in ``__main__``; otherwise a wrapper that pickles it
    with cloudpickle. Either way the task receives ``obj``.

    Examples
    --------
    >>> from dislib_nn.runtime import by_value
    >>> by_value(len) is len
    True
    """
    if isinstance(obj, _ByValue):
        return obj
    try:
        found = main_reference(obj)
    except Exception:  # noqa: BLE001 - plain pickle cannot: cloudpickle may
        found = True
    return _ByValue(obj) if found is not None else obj


def main_reference(obj):
    """The first class or function defined in ``__main__`` inside ``obj``.

    ``None`` when there is none. Raises what plain pickle raises when
    ``obj`` cannot be pickled at all.
    """
    probe = _Probe(_Sink())
    probe.dump(obj)
    return probe.found


def is_main_global(obj):
    """Whether ``obj`` is a class or function that lives in ``__main__``."""
    return (isinstance(obj, (type, types.FunctionType))
            and getattr(obj, "__module__", None) == _MAIN)


class _ByValue:
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __reduce__(self):
        import cloudpickle
        return (pickle.loads, (cloudpickle.dumps(
            self.obj, protocol=pickle.HIGHEST_PROTOCOL),))

    def __repr__(self):
        return f"by_value({self.obj!r})"


class _Probe(pickle.Pickler):
    """Pickles into nothing, noting the first ``__main__`` global met."""

    def __init__(self, file):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.found = None

    def reducer_override(self, obj):
        if self.found is None and is_main_global(obj):
            self.found = obj
        return NotImplemented


class _Sink(io.RawIOBase):
    def writable(self):
        return True

    def write(self, data):
        return len(data)
