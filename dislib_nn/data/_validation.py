"""Checks shared by the ds-tensor functions: sizes, dtypes, seeds.

Every check names the function and the argument, says what was expected
and shows the value received. Block geometry has one normal form, a
tuple of row counts, and :func:`block_sizes` is the one place that turns
every accepted way of giving it into that form.
"""

import numbers

import numpy as np
import torch

from dislib_nn.exceptions import (DtypeError, InvalidParameterError,
                                  ShapeError)

# dtypes a block may have: torch's numeric types that numpy can also hold
# (bfloat16 is torch-only but a common training dtype, so it is kept).
_TORCH_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16,
                 torch.int32, torch.int64, torch.float16, torch.bfloat16,
                 torch.float32, torch.float64, torch.complex64,
                 torch.complex128)


def check_int(value, name, caller, low, high=None, note=""):
    """``value`` as an int in ``[low, high]``, or InvalidParameterError."""
    if (isinstance(value, (bool, np.bool_))
            or not isinstance(value, numbers.Integral)
            or value < low or (high is not None and value > high)):
        upper = "inf)" if high is None else f"{high}]"
        raise InvalidParameterError(
            f"The '{name}' parameter of {caller} must be an int in the "
            f"range [{low}, {upper}{note}. Got {value!r} instead.")
    return int(value)


def block_sizes(n_rows, block_size, n_blocks, caller, default_n_blocks):
    """The tuple of rows per block for ``n_rows`` rows.

    ``block_size`` is an int (every block has that many rows, the last
    one may have fewer) or a sequence of row counts; ``n_blocks`` asks for
    that many blocks of sizes differing by at most one. With neither,
    ``default_n_blocks`` blocks (capped at ``n_rows``).
    """
    if block_size is not None and n_blocks is not None:
        raise InvalidParameterError(
            f"{caller} takes block_size or n_blocks, not both. Got "
            f"block_size={block_size!r} and n_blocks={n_blocks!r}.")
    if isinstance(block_size, (tuple, list)):
        return explicit_sizes(n_rows, block_size, caller)
    if block_size is not None:
        size = check_int(block_size, "block_size", caller, 1, n_rows,
                         " (the number of rows)")
        full, rest = divmod(n_rows, size)
        return (size,) * full + ((rest,) if rest else ())
    if n_blocks is None:
        n_blocks = max(1, min(int(default_n_blocks), n_rows))
    else:
        n_blocks = check_int(n_blocks, "n_blocks", caller, 1, n_rows,
                             " (the number of rows)")
    return balanced(n_rows, n_blocks)


def balanced(n_rows, n_blocks):
    """``n_blocks`` sizes adding up to ``n_rows``, differing by at most 1."""
    base, extra = divmod(n_rows, n_blocks)
    return (base + 1,) * extra + (base,) * (n_blocks - extra)


def explicit_sizes(n_rows, sizes, caller):
    sizes = tuple(sizes)
    for size in sizes:
        if (isinstance(size, (bool, np.bool_))
                or not isinstance(size, numbers.Integral) or size < 1):
            raise InvalidParameterError(
                f"The 'block_size' parameter of {caller} must hold ints "
                f">= 1 (rows per block). Got {sizes!r} instead.")
    sizes = tuple(int(s) for s in sizes)
    if sum(sizes) != n_rows:
        raise ShapeError(
            f"block sizes {_short(sizes)} given to {caller} add up to "
            f"{sum(sizes)} rows, not to the {n_rows} rows of the data.")
    return sizes


def offsets(sizes):
    """Row offset of each block, plus the total at the end (int64)."""
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def torch_dtype(dtype, name, caller):
    """A torch dtype from a torch, numpy or string dtype, or DtypeError."""
    if isinstance(dtype, torch.dtype):
        if dtype not in _TORCH_DTYPES:
            raise DtypeError(
                f"The '{name}' parameter of {caller} must be a numeric "
                f"dtype. Got {dtype} instead.")
        return dtype
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise DtypeError(
            f"The '{name}' parameter of {caller} must be a torch or numpy "
            f"dtype. Got {dtype!r} instead.") from None
    return numpy_to_torch_dtype(np_dtype, name, caller)


def numpy_to_torch_dtype(np_dtype, name, caller):
    """The torch dtype of numpy arrays of ``np_dtype``, or DtypeError."""
    if np_dtype.kind not in "biufc" or np_dtype.fields is not None:
        raise DtypeError(
            f"{caller} needs numeric data, but '{name}' has dtype "
            f"{np_dtype} ({_KIND_NAMES.get(np_dtype.kind, 'not numeric')}"
            f"). Convert it to a numeric dtype first.")
    try:
        return torch.from_numpy(np.empty(0, dtype=np_dtype)).dtype
    except TypeError:
        raise DtypeError(
            f"{caller} cannot hold dtype {np_dtype} of '{name}' in a torch "
            f"tensor. Convert it first (for example to int64).") from None


_KIND_NAMES = {"O": "Python objects", "U": "strings", "S": "bytes",
               "V": "raw or structured records", "M": "datetimes",
               "m": "timedeltas"}


def sample_shape(shape, name, caller):
    """``shape`` as a tuple of ints >= 0, or InvalidParameterError."""
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or any(
            isinstance(d, (bool, np.bool_))
            or not isinstance(d, numbers.Integral) or d < 0 for d in dims):
        raise InvalidParameterError(
            f"The '{name}' parameter of {caller} must be a tuple of ints "
            f">= 0. Got {shape!r} instead.")
    return tuple(int(d) for d in dims)


def seed_sequence(random_state, caller):
    """A :class:`numpy.random.SeedSequence` from ``random_state``.

    ``None`` draws fresh entropy; an int always gives the same sequence;
    a ``numpy.random.RandomState`` or ``Generator`` is consumed once, as
    scikit-learn does.
    """
    if random_state is None:
        return np.random.SeedSequence()
    if isinstance(random_state, numbers.Integral) and not isinstance(
            random_state, (bool, np.bool_)) and random_state >= 0:
        return np.random.SeedSequence(int(random_state))
    if isinstance(random_state, np.random.RandomState):
        return np.random.SeedSequence(
            int(random_state.randint(0, 2 ** 31 - 1)))
    if isinstance(random_state, np.random.Generator):
        return np.random.SeedSequence(
            int(random_state.integers(0, 2 ** 63 - 1)))
    raise InvalidParameterError(
        f"The 'random_state' parameter of {caller} must be None, an int "
        f">= 0, a numpy RandomState or a numpy Generator. Got "
        f"{random_state!r} instead.")


def same_rows(x, y, caller):
    """Raise ShapeError unless ``x`` and ``y`` have the same row count."""
    if len(x) != len(y):
        raise ShapeError(
            f"x and y given to {caller} must have the same number of rows. "
            f"Got {len(x)} rows in x and {len(y)} in y.")


def check_xy(x, y, caller):
    """Check the ``x`` and optional ``y`` of shuffle-like functions."""
    check_ds_tensor(x, "x", caller)
    if y is not None:
        check_ds_tensor(y, "y", caller)
        same_rows(x, y, caller)


def check_ds_tensor(value, name, caller):
    from dislib_nn.data._tensor import DsTensor
    if not isinstance(value, DsTensor):
        raise InvalidParameterError(
            f"The '{name}' parameter of {caller} must be a DsTensor. Got "
            f"{type(value).__name__} instead.")
    return value


def _short(sizes, limit=6):
    if len(sizes) <= limit:
        return str(sizes)
    head = ", ".join(str(s) for s in sizes[:3])
    return f"({head}, ..., {sizes[-1]})"


short_sizes = _short
