"""What users pass as X and y, checked and turned into DsTensors.

X and y may be DsTensors, numpy arrays (or anything ``numpy.asarray``
takes), torch tensors or dislib ds-arrays. Arrays are checked on the
master with scikit-learn's checks (so its messages and warnings are the
ones users know) and split into blocks; DsTensors are checked by tasks,
block by block, and never collected.
"""

import inspect

import numpy as np
import torch

from dislib_nn.data import DsTensor, from_array, from_ds_array
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from dislib_nn.runtime import wait_on
from dislib_nn.training._sklearn_checks import check_array
from dislib_nn.training.tasks import _blocks

__all__ = ["is_ds_tensor", "is_ds_array", "check_x", "check_y",
           "check_lengths", "check_rows", "check_finite_blocks",
           "as_ds_tensor"]

_FINITE = ("ensure_all_finite" if "ensure_all_finite"
           in inspect.signature(check_array).parameters
           else "force_all_finite")


def is_ds_tensor(obj):
    return isinstance(obj, DsTensor)


def is_ds_array(obj):
    """Whether ``obj`` is a dislib ds-array (checked without importing it)."""
    return all(hasattr(obj, a) for a in ("_blocks", "_reg_shape",
                                         "_top_left_shape", "shape"))


def check_x(X, name="X", ensure_2d=True):
    """``X`` as a DsTensor, or as a checked numeric numpy array (1-D too
    without ``ensure_2d``: one of several inputs may be a value per
    sample)."""
    if is_ds_tensor(X):
        return X
    if is_ds_array(X):
        return from_ds_array(X)
    if torch.is_tensor(X):
        X = X.detach().cpu().numpy()
    return check_array(X, dtype="numeric", allow_nd=True,
                       ensure_2d=ensure_2d, input_name=name,
                       **{_FINITE: True})


def check_y(y, targets, name="y"):
    """``y`` as a DsTensor, or as a checked numpy array.

    ``targets`` (:data:`~._targets.CLASSIFICATION` or
    :data:`~._targets.REGRESSION`) says what a valid ``y`` is: classifier
    labels become 1-D (a column vector is accepted with scikit-learn's
    DataConversionWarning); regression targets keep the shape they were
    given, 1-D or 2-D.
    """
    if is_ds_tensor(y):
        targets.check_ds(y, name)
        return y
    if is_ds_array(y):
        return from_ds_array(y)
    if y is None:
        raise ValueError(
            f"This estimator requires y to be passed, but the target y is "
            f"None (the {name} argument).")
    if torch.is_tensor(y):
        y = y.detach().cpu().numpy()
    return targets.check_array(y, name, {_FINITE: True})


def n_rows(data):
    return data.shape[0]


def check_lengths(X, y, x_name="X", y_name="y"):
    nx, ny = n_rows(X), n_rows(y)
    if nx != ny:
        raise ShapeError(
            f"{x_name} and {y_name} must have the same number of samples. "
            f"Got {x_name} with {nx} and {y_name} with {ny}.")


def check_rows(est, X):
    """``fit`` needs two samples, and a row for each worker asked for."""
    rows = X.shape[0]
    name = type(est).__name__
    if rows < 2:
        what = "1 row (one sample)" if rows == 1 else f"{rows} rows"
        raise ShapeError(
            f"{name}.fit needs at least 2 samples. Got X with {what}.")
    if est.n_workers is not None and est.n_workers > rows:
        raise InvalidParameterError(
            f"The 'n_workers' parameter of {name} must be at most the "
            f"number of samples of X ({rows}): each worker trains on rows "
            f"of its own. Got {est.n_workers} instead.")


def check_finite_blocks(ds, name):
    """Raise if a DsTensor holds NaN or infinity (one task per block)."""
    if not ds.dtype.is_floating_point and not ds.dtype.is_complex:
        return
    flags = wait_on([_blocks._all_finite(b) for b in ds.blocks])
    bad = [i for i, ok in enumerate(flags) if not ok]
    if bad:
        raise ValueError(
            f"Input {name} contains NaN or infinity (in block"
            f"{'s' if len(bad) > 1 else ''} "
            f"{', '.join(str(i) for i in bad[:10])}).")


def as_ds_tensor(data, block_sizes=None, n_blocks=None, dtype=None):
    """A checked array as a DsTensor with the given geometry.

    A DsTensor is returned as it is (``block_sizes`` must then match).
    """
    if is_ds_tensor(data):
        if block_sizes is not None and tuple(data.block_sizes) != \
                tuple(block_sizes):
            raise ShapeError(
                f"X and y must be split into the same blocks. Got block "
                f"sizes {tuple(block_sizes)} and "
                f"{tuple(data.block_sizes)}.")
        return data
    array = np.asarray(data)
    if dtype is not None:
        array = array.astype(dtype, copy=False)
    if block_sizes is not None:
        return from_array(array, block_size=list(block_sizes))
    return from_array(array, n_blocks=n_blocks)
