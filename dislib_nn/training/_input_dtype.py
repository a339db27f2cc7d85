"""The dtype a module receives its inputs in, from the dtype of X.

Floating-point X reaches the module in the module's own floating dtype
(float32 unless the user made the module float64, say), as before.
Integer X reaches it as int64 and boolean X as bool, never cast to a
float: token ids and category codes stay exact (float32 holds integers
exactly only up to 2**24), and an ``nn.Embedding`` gets the Long indices
it needs, as in plain PyTorch, skorch and Lightning.

What a fit learned is one of three *kinds* (``"float"``, ``"int"``,
``"bool"``), a string kept with the fitted estimator (``_input_kind``)
and written by ``save``. Later data must be of a kind the model can take:
a model fitted on integers refuses floating-point X rather than truncate
it; integer or boolean X given to a model fitted on floats are cast to
its floating dtype.

Integer X is often a count or a code meant as a number, and the module
built of ``nn.Linear`` layers that a user trains on it cannot take
int64. So the first fit tries one zero sample through the module in
int64 (or bool) and, only if its forward raises, in the module's
floating dtype (:func:`settle`): if that works the fit takes X as
floats, with a ``DataConversionWarning`` that names the error and says
how to choose (cast X, or make the module take integers); if neither
works the integer error stands, and the one-sample trial names it.
"""

import numpy as np
import torch

from dislib_nn._user_warning import warn_user
from dislib_nn.training._components import first_float_dtype, materialize

__all__ = ["FLOAT", "INT", "BOOL", "SEVERAL", "kind_of", "module_input_dtype",
           "numpy_dtype", "check_kind", "check_saved_kind", "settle"]

FLOAT, INT, BOOL = "float", "int", "bool"
#: The kind of X packed from several inputs (each of its own kind: see
#: :mod:`._several_inputs`): rows of bytes.
SEVERAL = "several"
_TORCH = {INT: torch.int64, BOOL: torch.bool}


def kind_of(dtype):
    """The kind of a numpy or torch dtype: ``"bool"``, ``"int"`` or
    ``"float"`` (complex counts as floating, as before)."""
    if isinstance(dtype, torch.dtype):
        if dtype == torch.bool:
            return BOOL
        if dtype.is_floating_point or dtype.is_complex:
            return FLOAT
        return INT
    kind = np.dtype(dtype).kind
    if kind == "b":
        return BOOL
    if kind in "iu":
        return INT
    return FLOAT


def module_input_dtype(kind, float_dtype):
    """The torch dtype a module of floating dtype ``float_dtype`` gets
    inputs of ``kind`` in (the packed rows of several: bytes)."""
    if kind == SEVERAL:
        return torch.uint8
    return _TORCH.get(kind, float_dtype)


def settle(module, sample_shape, kind):
    """The kind the first fit gives ``module`` X of ``kind`` in: ``kind``
    itself when the module's forward takes one zero sample of it, else
    ``"float"`` when it takes the sample in its floating dtype (with a
    warning). Lazy layers are shaped by the first forward that gets that
    far, as :func:`~._components.materialize` does."""
    if kind == FLOAT:
        materialize(module, sample_shape, first_float_dtype(module))
        return kind
    try:
        _probe(module, sample_shape, _TORCH[kind])
        return kind
    except Exception as exc:  # noqa: BLE001 - a forward may raise anything
        refused = exc
    float_dtype = first_float_dtype(module)
    try:
        _probe(module, sample_shape, float_dtype)
    except Exception:  # noqa: BLE001 - the integer error stands
        return kind
    from sklearn.exceptions import DataConversionWarning  # master only
    exact = (" (integers above 2**24 lose their last digits)"
             if kind == INT and float_dtype != torch.float64 else "")
    warn_user(
        f"X holds {_WORDS[kind]} values, but the forward of module "
        f"{type(module).__name__} does not take them as {_TORCH[kind]} "
        f"({type(refused).__name__}: {_first_line(refused)}); it takes "
        f"them as {float_dtype}, so fit casts X to {float_dtype}{exact}. "
        f"Pass X.astype('float32') to say so, or make the module take "
        f"{_TORCH[kind]} (an nn.Embedding takes integer ids) to keep "
        f"them.", DataConversionWarning)
    return FLOAT


def _probe(module, sample_shape, dtype):
    """One zero sample of ``dtype`` through ``module``, in eval mode
    without gradients (nothing changes, but lazy layers take their
    shapes)."""
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            module(torch.zeros((1,) + tuple(sample_shape), dtype=dtype))
    finally:
        module.train(training)


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return text[0] if text else "no message"


def numpy_dtype(torch_dtype):
    """The numpy dtype of a torch dtype (blocks are made from arrays)."""
    return torch.empty(0, dtype=torch_dtype).numpy().dtype


def check_saved_kind(kind):
    """Raise if a saved file's input kind is none of the three."""
    if kind not in _TORCH and kind not in (FLOAT, SEVERAL):
        raise ValueError(
            f"The saved estimator's inputs are of kind {kind!r}; a file "
            f"written by dislib_nn holds 'float', 'int', 'bool' or "
            f"'several'.")


#: The kinds of data a model fitted on each kind takes (the others would
#: lose values when cast).
_TAKES = {FLOAT: (FLOAT, INT, BOOL), INT: (INT, BOOL), BOOL: (BOOL,)}
_WORDS = {FLOAT: "floating-point", INT: "integer", BOOL: "boolean"}


def check_kind(fitted, dtype, name, estimator):
    """Raise if data of ``dtype`` cannot be given to a model fitted on
    inputs of kind ``fitted``: floating-point values to a model that
    takes integers (the cast would truncate them), integers to one that
    takes booleans."""
    kind = kind_of(dtype)
    if fitted == SEVERAL or kind in _TAKES[fitted]:
        return          # several inputs: each is checked on its own
    raise ValueError(
        f"{name} has {_WORDS[kind]} values (dtype {_name(dtype)}), but "
        f"{type(estimator).__name__} was fitted on {_WORDS[fitted]} "
        f"inputs, which its module receives as {_TORCH[fitted]}: the "
        f"cast would change them. Pass {name} with the dtype it had at "
        f"fit.")


def _name(dtype):
    return str(dtype) if isinstance(dtype, torch.dtype) else \
        np.dtype(dtype).name
