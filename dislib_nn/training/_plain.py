"""Estimator parameters and fitted attributes as data that runs no code.

``save`` writes, and ``load`` reads, a file that ``torch.load`` opens
with ``weights_only=True``: tensors, numbers, strings, bytes, lists,
tuples and dicts, nothing else. What is not data is written as a tagged
record of data:

* a numpy array or scalar, a set, a ``numpy.random.RandomState``: its
  values;
* a class or function that can be imported: its name (``"module:name"``);
* an instance of an ``nn.Module``, ``Callback`` or ``Strategy`` class
  that can be imported (a ``module=`` instance, a callback, a
  ``strategy=`` instance): its class's name and its ``__dict__``, as
  data again;
* anything else (a class defined in ``__main__``, a lambda, a closure):
  by value, in one cloudpickle blob that only ``trusted=True`` unpickles.

Reading follows a policy (:class:`Decoder`): a name resolves only to a
subclass of ``nn.Module``, ``torch.optim.Optimizer``, a torch learning-
rate scheduler, ``Callback`` or ``Strategy``, or to a function of
torch, numpy, math or dislib_nn; its module must be imported already or belong to one of
those packages (importing a module runs its code); an instance is only
rebuilt for a class that passes the same rules, without calling its
``__init__``. Anything else is refused with :class:`UnsafeFileError`,
which names what the file wants to run and how to allow it.
"""

import collections
import importlib
import sys
import types

import numpy as np
import torch

from dislib_nn.exceptions import UnsafeFileError

__all__ = ["Encoder", "Decoder", "check_plain"]

_TAG = "__dislib_nn__"
_ATOMS = (type(None), bool, int, float, complex, str, bytes, torch.dtype,
          torch.device, torch.Size)
#: numpy dtypes whose arrays travel as tensors (others as lists).
_TENSOR_DTYPES = {np.dtype(t) for t in (
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16",
    "float32", "float64")} | {np.dtype(t).newbyteorder(">") for t in (
    "int16", "int32", "int64", "float16", "float32", "float64")}
#: Packages whose modules may be imported to resolve a name.
_SAFE_PACKAGES = {"torch", "numpy", "sklearn", "dislib_nn", "math"}
#: Packages whose functions a name may resolve to.
_SAFE_FUNCTIONS = {"torch", "numpy", "math", "dislib_nn"}


def _bases():
    return (torch.nn.Module, torch.optim.Optimizer,
            torch.optim.lr_scheduler.LRScheduler) + _instance_bases()[1:]


def _instance_bases():
    from dislib_nn.training.callbacks._core import Callback
    from dislib_nn.training.strategies._template import Strategy
    return (torch.nn.Module, Callback, Strategy)


class Encoder:
    """Turns a value into data; what must travel by value is gathered in
    :attr:`by_value` (pickled by :meth:`code`)."""

    def __init__(self):
        self.by_value = []

    def encode(self, obj):
        kind = type(obj)
        if kind in _ATOMS:
            return obj
        if kind is torch.Tensor:
            return obj.detach().cpu()
        if kind is torch.nn.Parameter:
            return torch.nn.Parameter(obj.detach().cpu(),
                                      obj.requires_grad)
        if isinstance(obj, np.ndarray):
            return self._array(obj)
        if isinstance(obj, np.generic):
            return {_TAG: "npscalar", "dtype": obj.dtype.str,
                    "value": obj.item()}
        if kind in (list, tuple):
            return kind(self.encode(v) for v in obj)
        if kind in (dict, collections.OrderedDict):
            if _TAG in obj or not all(type(k) in _ATOMS for k in obj):
                return {_TAG: "dict", "ordered": kind is not dict,
                        "items": [(self.encode(k), self.encode(v))
                                  for k, v in obj.items()]}
            return kind((k, self.encode(v)) for k, v in obj.items())
        if kind in (set, frozenset):
            return {_TAG: kind.__name__,
                    "items": [self.encode(v) for v in obj]}
        if kind is np.random.RandomState:
            return {_TAG: "RandomState",
                    "state": self.encode(obj.get_state())}
        if isinstance(obj, (type, types.FunctionType,
                            types.BuiltinFunctionType)):
            name = _importable_name(obj)
            if name is not None:
                return {_TAG: "ref", "name": name}
            return self._by_value(obj)
        if isinstance(obj, _instance_bases()) and \
                _importable_name(kind) is not None and \
                hasattr(obj, "__dict__"):
            return {_TAG: "object", "class": _importable_name(kind),
                    "state": self.encode(dict(vars(obj)))}
        return self._by_value(obj)

    def code(self):
        """The values that travel by value, as cloudpickle bytes (None
        when there are none)."""
        if not self.by_value:
            return None
        import cloudpickle
        return cloudpickle.dumps(self.by_value)

    def _array(self, obj):
        if obj.dtype in _TENSOR_DTYPES:
            native = obj.astype(obj.dtype.newbyteorder("="))
            data = torch.from_numpy(np.ascontiguousarray(native)
                                    .reshape(-1)).clone()
        else:
            data = [self.encode(v) for v in obj.ravel().tolist()]
        return {_TAG: "ndarray", "dtype": obj.dtype.str,
                "shape": tuple(obj.shape), "data": data}

    def _by_value(self, obj):
        self.by_value.append(obj)
        return {_TAG: "code", "index": len(self.by_value) - 1,
                "what": _describe(obj)}


class Decoder:
    """Turns what :class:`Encoder` wrote back into values, under the
    reading policy (module docstring).

    Parameters
    ----------
    code : bytes or None
        The file's by-value blob.
    trusted : bool
        Unpickle by-value code, and resolve any importable name.
    source : str
        The file, for messages.
    """

    def __init__(self, code, trusted, source):
        self.code = code
        self.trusted = bool(trusted)
        self.source = source
        self._values = None

    def decode(self, obj):
        kind = type(obj)
        if kind in (list, tuple):
            return kind(self.decode(v) for v in obj)
        if kind in (dict, collections.OrderedDict):
            tag = obj.get(_TAG) if kind is dict else None
            if tag is None:
                return kind((k, self.decode(v)) for k, v in obj.items())
            return self._tagged(tag, obj)
        return obj

    def _tagged(self, tag, obj):
        if tag == "dict":
            kind = collections.OrderedDict if obj["ordered"] else dict
            return kind((self.decode(k), self.decode(v))
                        for k, v in obj["items"])
        if tag in ("set", "frozenset"):
            return (set if tag == "set" else frozenset)(
                self.decode(v) for v in obj["items"])
        if tag == "ndarray":
            dtype, data = np.dtype(obj["dtype"]), obj["data"]
            if isinstance(data, torch.Tensor):
                return data.numpy().astype(dtype).reshape(obj["shape"])
            out = np.empty(len(data), dtype=dtype)
            for i, value in enumerate(data):
                out[i] = self.decode(value)
            return out.reshape(obj["shape"])
        if tag == "npscalar":
            return np.dtype(obj["dtype"]).type(obj["value"])
        if tag == "RandomState":
            state = np.random.RandomState()
            state.set_state(self.decode(obj["state"]))
            return state
        if tag == "ref":
            return self._resolve(obj["name"])
        if tag == "object":
            cls = self._resolve(obj["class"])
            if not (isinstance(cls, type)
                    and issubclass(cls, _instance_bases())):
                raise self._refused(
                    f"an instance of {obj['class']}, which is not an "
                    f"nn.Module, a Callback or a Strategy")
            instance = cls.__new__(cls)
            instance.__dict__.update(self.decode(obj["state"]))
            return instance
        if tag == "code":
            return self._by_value(obj)
        raise UnsafeFileError(f"{self.source} holds a record of unknown "
                              f"kind {tag!r}: not a file save() wrote.")

    def _resolve(self, name):
        module_name, _, qualname = str(name).partition(":")
        top = module_name.partition(".")[0]
        if module_name not in sys.modules and top not in _SAFE_PACKAGES \
                and not self.trusted:
            raise self._refused(
                f"{module_name}.{qualname}, whose module {module_name!r} "
                f"is not imported here (importing it would run its code)",
                f"import {module_name} before loading")
        try:
            obj = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ImportError(
                f"{self.source} cannot be loaded here: it refers by name "
                f"to {module_name}.{qualname} (module {module_name!r}), "
                f"which cannot be imported in this process ({exc}). Make "
                f"{module_name!r} importable where you load (install it, "
                f"or add its folder to sys.path or PYTHONPATH).") from exc
        if not self.trusted and not _allowed(obj):
            raise self._refused(
                f"{module_name}.{qualname}, which is not an nn.Module, "
                f"optimizer, scheduler, Callback or Strategy class, nor a "
                f"function "
                f"of {', '.join(sorted(_SAFE_FUNCTIONS))}")
        return obj

    def _by_value(self, obj):
        if not self.trusted:
            raise self._refused(f"code stored by value ({obj['what']})")
        if self._values is None:
            import pickle
            self._values = pickle.loads(self.code)
        return self._values[obj["index"]]

    def _refused(self, what, first=None):
        how = "if you trust the file, load it with trusted=True"
        if first:
            how = f"{first}, or, {how}"
        return UnsafeFileError(
            f"{self.source} wants to run {what}. A loaded file runs no "
            f"code unless you say so: {how}.")


def check_plain(value, where):
    """Raise ``TypeError`` naming ``where`` (and the path inside
    ``value``) unless ``value`` is what ``torch.load(weights_only=True)``
    reads back: tensors, numbers, strings, bytes, lists, tuples, dicts."""
    path = _first_unplain(value, [])
    if path is None:
        return
    keys, bad = path
    inside = "".join(f"[{k!r}]" for k in keys)
    raise TypeError(
        f"{where} holds {type(bad).__module__}.{type(bad).__qualname__} "
        f"{_short(bad)} at {inside or 'its top'}: a checkpoint holds only "
        f"tensors, numbers, strings, lists and dicts, so that resuming "
        f"runs no code. Convert it (to a float, a string...) in "
        f"state_dict() and back in load_state_dict().")


def _first_unplain(value, keys):
    kind = type(value)
    if kind in _ATOMS or kind in (torch.Tensor, torch.nn.Parameter):
        return None
    if kind in (list, tuple):
        items = enumerate(value)
    elif kind in (dict, collections.OrderedDict):
        for k in value:
            if type(k) not in _ATOMS:
                return keys + [k], k
        items = value.items()
    else:
        return keys, value
    for k, v in items:
        found = _first_unplain(v, keys + [k])
        if found is not None:
            return found
    return None


def _allowed(obj):
    if isinstance(obj, type):
        return issubclass(obj, _bases())
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)):
        module = getattr(obj, "__module__", None) or ""
        return module.partition(".")[0] in _SAFE_FUNCTIONS
    return False


def _importable_name(obj):
    """``"module:qualname"`` when importing that gives ``obj`` back."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or module == "__main__" or \
            "<" in qualname or module not in sys.modules:
        return None
    found = sys.modules[module]
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return f"{module}:{qualname}" if found is obj else None


def _describe(obj):
    what = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return f"{module}.{what}"


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
