"""Saving a fitted estimator and loading it; pickling an estimator.

A file written by ``save`` holds the estimator's parameters, the fitted
attributes (classes, input shape, feature names, history, and what the
strategy carries to the next fit: the optimizer states and the outer
step's state; see :func:`._fitted.for_file`) and the module's
``state_dict``, as CPU tensors; nothing of the training data. It is
written whole or not at all (:mod:`._atomic_file`): a crash, even a
SIGKILL, leaves the previous file and no temporary beside it, and a
full disk says so, naming the path.

A saved model is data: the file is read with ``torch.load(...,
weights_only=True)``, and parameters and attributes are written as data
(:mod:`._plain`): classes and functions by name, a class defined in
``__main__`` (a script, a notebook) by value in a blob that ``load``
unpickles only with ``trusted=True``. So ``load(path)`` runs no code
from the file; what it refuses, it names. Files of the formats before
(1 and 2: parameters pickled) load only with ``trusted=True``.

Pickling an estimator (``pickle``, ``copy.deepcopy``) is Python's
pickle, with cloudpickle for the state (:func:`reduce_estimator`): a
class defined in ``__main__`` travels by value, and unpickling runs
whatever the pickle holds, as every pickle does. When a class cannot be
found where a pickle is read, the error names the class and the module.
Tensors on a GPU are written as CPU tensors, so they load on a machine
without one.
"""

import io
import os
import pickle
import re
import sys
import types

import torch

from dislib_nn.exceptions import NotFittedError, ShapeError, UnsafeFileError
from dislib_nn.training import _atomic_file, _fitted, _input_dtype, _plain
from dislib_nn.training._component_args import inferable_arguments
from dislib_nn.training._components import first_float_dtype, materialize
from dislib_nn.training._several_inputs import InputLayout, \
    materialize_several

__all__ = ["PersistMixin", "save_estimator", "load_estimator",
           "load_weights", "reduce_estimator"]

_FORMAT = "dislib_nn.estimator"
#: 1: parameters and attributes pickled inside the file by reference;
#: 2: each of them cloudpickle bytes, with the modules they refer to;
#: 3: data only (:mod:`._plain`), by-value code in one blob apart.
_VERSION = 3
_READS = (1, 2, 3)
#: The formats whose parameters are pickles: read only when trusted.
_PICKLED = (1, 2)


class PersistMixin:
    """``save``, ``load``, pickling and copies of an estimator."""

    def save(self, path):
        """Write the fitted model's weights and parameters to ``path``.

        The file holds the parameters, the fitted attributes (the
        optimizer states and the outer optimizer's state included) and
        the module's ``state_dict`` as CPU tensors (no training data);
        see :meth:`load`. A
        module class defined in ``__main__`` (a script, a notebook) is
        stored by value: the file loads where it is not defined.
        """
        save_estimator(self, path)

    def load(self, path, trusted=False):
        """Load weights saved with :meth:`save`; return ``self``.

        This estimator's parameters build the module that receives the
        weights (an estimator built with ``module=None`` takes every
        parameter from the file), so a module of another architecture
        is refused with an error naming the keys that differ; a class
        whose module cannot be imported here, with an ImportError naming
        both. The loaded estimator predicts, and trains on with
        ``partial_fit`` or ``warm_start`` from the optimizer states and
        outer state it was saved with.

        The file runs no code: it is read as data, and what it names
        must be a module, optimizer, scheduler or callback class (or a
        function of torch, numpy, math or dislib_nn) whose module is
        imported here or belongs to those packages. Anything else (a
        class saved by value from ``__main__``, which an estimator built
        with ``module=None`` would need, a file of an earlier format)
        raises :class:`~dislib_nn.exceptions.UnsafeFileError` naming it;
        ``trusted=True`` loads it, running the code the file holds: only
        for files you trust.
        """
        if not isinstance(trusted, bool):
            # Strict: trusted="False" must not mean True.
            raise TypeError(f"load()'s trusted must be True or False. Got "
                            f"{trusted!r} instead.")
        return load_estimator(self, path, self._module_for_load, trusted)

    def __reduce__(self):
        """Pickle (and ``copy.deepcopy``) with cloudpickle: a module class
        defined in ``__main__`` (a script, a notebook) travels by value,
        and weights on a GPU as CPU tensors."""
        return reduce_estimator(self)

    def __copy__(self):
        # A shallow copy stays shallow (__reduce__ would copy it all).
        copy = type(self).__new__(type(self))
        copy.__dict__.update(vars(self))
        return copy

    def _module_for_load(self, inferred, sample_shape, input_kind,
                         input_layout=None):
        self._validate_params()
        # Sizes fit inferred, for the arguments this module takes.
        names = inferable_arguments(self.module)
        inferred = {k: v for k, v in (inferred or {}).items()
                    if k in names}
        with torch.random.fork_rng(devices=[]):
            module = self._components(inferred).build_module()
            if input_layout is not None:
                materialize_several(module, InputLayout.from_plain(
                    input_layout).packed(first_float_dtype(module)))
            else:
                materialize(module, sample_shape,
                            _input_dtype.module_input_dtype(
                                input_kind, first_float_dtype(module)))
        return module


def save_estimator(est, path):
    """Write ``est``'s parameters, fitted attributes and weights."""
    if not est.__sklearn_is_fitted__():
        raise NotFittedError(
            f"This {type(est).__name__} instance is not fitted yet: there "
            f"are no weights to save. Call 'fit' first.")
    encoder = _plain.Encoder()
    content = {"format": _FORMAT, "version": _VERSION,
               "estimator": _class_name(type(est)),
               "params": encoder.encode(est.get_params(deep=False)),
               "fitted": encoder.encode(_fitted.for_file(est)),
               "weights": {k: v.detach().cpu().clone() for k, v in
                           est.module_.state_dict().items()}}
    content["code"] = encoder.code()
    _atomic_file.write(path, lambda f: torch.save(content, f),
                       f"the {type(est).__name__} model")


def load_estimator(est, path, build_module, trusted=False):
    """Give ``est`` the fitted state saved in ``path``.

    ``est``'s own parameters decide the module (``build_module(inferred,
    sample_shape, input_kind, input_layout)`` builds it); an estimator whose ``module`` is None
    takes every parameter from the file first. A failed load leaves
    ``est`` as it was. Nothing in the file runs unless ``trusted``.
    """
    source = repr(os.fspath(path))
    content = _read(path, trusted)
    saved_class = content["estimator"]
    if saved_class != _class_name(type(est)):
        raise TypeError(
            f"{source} holds a {saved_class}; it cannot be "
            f"loaded into a {_class_name(type(est))}.")
    if content["version"] in _PICKLED:
        if not trusted:
            raise UnsafeFileError(
                f"{source} was written by an earlier dislib_nn (format "
                f"version {content['version']}), whose parameters are "
                f"pickles: loading it could run any code it holds. If you "
                f"trust the file, load it with trusted=True, then save() "
                f"writes it in the format that runs no code.")

        def decode(part):
            return _loads(part, source)
    else:
        decode = _plain.Decoder(content.get("code"), trusted,
                                source).decode
    before = _fitted.snapshot(est)
    try:
        fitted = decode(content["fitted"])
        if est.module is None:
            est.set_params(**decode(content["params"]))
        kind = fitted.get("_input_kind", _input_dtype.FLOAT)
        _input_dtype.check_saved_kind(kind)
        module = build_module(fitted.get("_inferred"),
                              fitted.get("_sample_shape"), kind,
                              fitted.get("_input_layout"))
        load_weights(module, content["weights"], source=source)
        _fitted.loaded(est, fitted, module)
    except BaseException:
        before.restore()
        raise
    return est


def reduce_estimator(est):
    """``__reduce__`` of an estimator: its class and ``__dict__`` as
    cloudpickle bytes (``__main__`` classes by value, CPU tensors)."""
    return _rebuild, (_dumps((type(est), dict(vars(est)))),)


def _rebuild(blob):
    cls, state = _loads(blob, "the pickled estimator")
    est = cls.__new__(cls)
    est.__setstate__(state)
    return est


def load_weights(module, state, source="the saved weights"):
    """``module.load_state_dict(state)``, with an error naming what differs."""
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = {k: (tuple(state[k].shape), tuple(own[k].shape))
              for k in sorted(set(own) & set(state))
              if tuple(state[k].shape) != tuple(own[k].shape)}
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"keys the module has and {source} lacks: "
                         f"{missing}")
        if unexpected:
            parts.append(f"keys {source} has and the module lacks: "
                         f"{unexpected}")
        if shapes:
            parts.append("different shapes (saved, module): " + ", ".join(
                f"{k} {a} vs {b}" for k, (a, b) in shapes.items()))
        raise ShapeError(
            f"{source} do not fit module {type(module).__name__} (another "
            f"architecture?): " + "; ".join(parts) + ".")
    module.load_state_dict(state)


def _read(path, trusted):
    source = repr(os.fspath(path))
    try:
        content = torch.load(os.fspath(path), map_location="cpu",
                             weights_only=True)
    except FileNotFoundError:
        raise
    except pickle.UnpicklingError as exc:
        if "weights_only" not in str(exc).lower().replace(" ", "_"):
            raise ValueError(f"{source} is not a file written by "
                             f"save(): {exc}") from exc
        if not trusted:
            raise UnsafeFileError(
                f"{source} holds objects that only unpickling can rebuild "
                f"(a file of format 1, or not one save() wrote): loading "
                f"it could run any code it holds. If you trust the file, "
                f"load it with trusted=True.") from None
        return _read_pickled(path, source)
    except Exception as exc:  # noqa: BLE001 - any unreadable file
        raise ValueError(f"{source} is not a file written by "
                         f"save(): {exc}") from exc
    return _checked(content, source)


def _read_pickled(path, source):
    """A file of format 1, unpickled (``trusted=True`` only)."""
    try:
        content = torch.load(os.fspath(path), map_location="cpu",
                             weights_only=False)
    except (ImportError, AttributeError) as exc:
        # A class it refers to is not found here.
        raise _missing_class(exc, {}, source) from exc
    except Exception as exc:  # noqa: BLE001 - any unreadable file
        raise ValueError(f"{source} is not a file written by "
                         f"save(): {exc}") from exc
    return _checked(content, source)


def _checked(content, source):
    if not isinstance(content, dict) or content.get("format") != _FORMAT:
        raise ValueError(f"{source} is not a file written by "
                         f"an estimator's save().")
    if content.get("version") not in _READS:
        raise ValueError(
            f"{source} was written in format version "
            f"{content.get('version')!r}; this dislib_nn reads versions "
            f"{', '.join(map(str, _READS))}.")
    return content


def _dumps(obj):
    """``obj`` as cloudpickle bytes, with the modules whose classes and
    functions it refers to by name (for the error, if one is missing
    where it is read)."""
    buffer = io.BytesIO()
    pickler = _pickler_class()(buffer)
    pickler.dump(obj)
    return {"pickle": buffer.getvalue(),
            "references": {m: sorted(names)
                           for m, names in pickler.references.items()}}


def _loads(blob, source):
    """What :func:`_dumps` pickled (a format-1 file holds it as is)."""
    if not (isinstance(blob, dict) and set(blob) == {"pickle",
                                                     "references"}):
        return blob
    try:
        return pickle.loads(blob["pickle"])
    except (ImportError, AttributeError) as exc:
        raise _missing_class(exc, blob["references"], source) from exc


_PICKLER = []


def _pickler_class():
    """cloudpickle's Pickler, noting the globals it writes by reference
    and writing GPU tensors as CPU ones (cloudpickle is imported at the
    first save or pickle)."""
    if _PICKLER:
        return _PICKLER[0]
    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def __init__(self, file):
            super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
            self.references = {}

        def reducer_override(self, obj):
            if type(obj) is torch.Tensor and obj.device.type not in (
                    "cpu", "meta"):
                return obj.detach().cpu().requires_grad_(
                    obj.requires_grad).__reduce_ex__(
                        pickle.HIGHEST_PROTOCOL)
            if isinstance(obj, (type, types.FunctionType)):
                module = getattr(obj, "__module__", None)
                if module not in (None, "__main__", "builtins") \
                        and module in sys.modules:
                    self.references.setdefault(module, set()).add(
                        getattr(obj, "__qualname__", repr(obj)))
            return super().reducer_override(obj)

    _PICKLER.append(Pickler)
    return Pickler


_NO_ATTRIBUTE = re.compile(r"Can't get attribute '([^']+)' on "
                           r"<module '([^']+)'")


def _missing_class(exc, references, source):
    """The error for a class or function not found where it is loaded."""
    found = _NO_ATTRIBUTE.search(str(exc))
    if found is not None and found.group(2) == "__main__":
        name = found.group(1)
        return ImportError(
            f"{source} cannot be loaded here: it refers to {name!r} of "
            f"module '__main__' (the script or notebook that wrote it) by "
            f"name, and this process's __main__ has no {name!r}. Files and "
            f"pickles written by this version of dislib_nn carry such "
            f"classes by value: define (or import) {name!r} in __main__ "
            f"before loading this one, then save it again.")
    if found is not None:
        name, module = found.groups()
        return ImportError(
            f"{source} cannot be loaded here: it refers to {name!r} of "
            f"module {module!r}, which here has no {name!r} (another "
            f"version of {module!r}?). Load it where {module!r} defines "
            f"{name!r}.")
    module = getattr(exc, "name", None)
    if not module:
        return ImportError(f"{source} cannot be loaded here: {exc}. A "
                           f"class or function it refers to by name is "
                           f"not found.")
    names = [f"{m}.{n}" for m, ns in sorted(references.items())
             if m == module or m.startswith(module + ".") for n in ns]
    what = (f"{', '.join(names)} (module {module!r})" if names
            else f"module {module!r}")
    return ImportError(
        f"{source} cannot be loaded here: it refers by name to {what}, "
        f"which cannot be imported in this process ({exc}). Make "
        f"{module!r} importable where you load (install it, or add its "
        f"folder to sys.path or PYTHONPATH); a class defined in the "
        f"script or notebook that saves (its __main__) is saved by value "
        f"and needs no import.")


def _class_name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"
