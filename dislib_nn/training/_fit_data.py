"""Checking the training data and turning it into DsTensors.

The first rung of the fit ladder: X and y are checked (scikit-learn's
checks for arrays, tasks for DsTensors), ``classes_`` and the sample
shape are learned or checked, then arrays are split into one block per
worker, labels encoded, and a validation set split off (block by block,
by tasks) or prepared from ``validation_data``.
"""

from typing import NamedTuple

import numpy as np

from dislib_nn import runtime
from dislib_nn._user_warning import warn_user
from dislib_nn.data import DsTensor
from dislib_nn.data._dataset import from_dataset, is_dataset
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from dislib_nn.training import _fitted
from dislib_nn.training import _input_checks as _inputs
from dislib_nn.training import _input_dtype
from dislib_nn.training import _seeds
from dislib_nn.training import _several_inputs as several
from dislib_nn.training.strategies import _dealing
from dislib_nn.training.tasks import _blocks

__all__ = ["CheckedData", "FitData", "FitDataMixin", "BALANCE_BLOCKS_PER_WORKER",
           "feature_names"]

#: Blocks per worker an array is split into when ``balance=True``.
BALANCE_BLOCKS_PER_WORKER = 8


class CheckedData(NamedTuple):
    """What the checks of ``fit``'s first rung hand on."""

    #: An array, a DsTensor, or several inputs
    #: (:class:`._several_inputs.SeveralInputs`), checked, not blocked.
    X: object
    #: The checked targets: an array or a DsTensor.
    y: object
    #: The targets' dimensions (1: one per sample, 2: columns).
    y_ndim: int


class FitData:
    """Checked training (and validation) data, as DsTensors."""

    def __init__(self, x, y, x_valid, y_valid, sample_shape, y_ndim):
        self.x, self.y = x, y
        self.x_valid, self.y_valid = x_valid, y_valid
        self.sample_shape = sample_shape
        self.y_ndim = y_ndim


class FitDataMixin:
    """The data rungs of the estimators' fit ladder."""

    def _check_fit_data(self, X, y, reset, classes=None):
        """Check X and y; learn (or check) ``classes_``, the shapes and
        the feature names."""
        X, y = self._unpack_dataset(X, y, "fit")
        if several.is_several(X):
            return self._check_several(X, y, reset, classes)
        if not reset and _fitted.input_layout(self) is not None:
            raise several.one_given_to_several(_fitted.input_layout(self),
                                               "X", self)
        names = feature_names(X)
        if not reset:
            self._check_feature_names(names)
        X = _inputs.check_x(X)
        y = _inputs.check_y(y, self._targets)
        _inputs.check_lengths(X, y)
        if _inputs.is_ds_tensor(X):
            _inputs.check_finite_blocks(X, "X")
        if _inputs.is_ds_tensor(y):
            _inputs.check_finite_blocks(y, "y")
        if X.shape[0] == 0:
            raise ShapeError("X is empty: it has 0 rows (samples).")
        if not reset:
            self._check_predict_input(X)
        self._targets.learn(self, y, reset, classes)
        if reset:
            _fitted.learn_inputs(self, tuple(X.shape[1:]), names,
                                 _input_dtype.kind_of(X.dtype))
        return CheckedData(X, y, len(y.shape))

    def _check_several(self, X, y, reset, classes):
        """``_check_fit_data`` for X of several inputs (a dict or tuple:
        :mod:`._several_inputs`)."""
        X = several.check_several(X)
        y = _inputs.check_y(y, self._targets)
        _inputs.check_lengths(X, y)
        if _inputs.is_ds_tensor(y):
            _inputs.check_finite_blocks(y, "y")
        if X.shape[0] == 0:
            raise ShapeError("X is empty: it has 0 rows (samples).")
        if not reset:
            several.check_same(_fitted.input_layout(self), X, "X", self)
        self._targets.learn(self, y, reset, classes)
        if reset:
            _fitted.learn_several_inputs(self, X.layout)
        return CheckedData(X, y, len(y.shape))

    def _model_input(self, X, name="X"):
        """X as the module's rows: several inputs checked against those
        fit learned and packed (:mod:`._several_inputs`); one array as it
        is (the caller checks it)."""
        fitted = _fitted.input_layout(self)
        if several.is_several(X):
            inputs = several.check_several(X, name)
            several.check_same(fitted, inputs, name, self)
            return inputs.packed(self._output.layout)
        if fitted is not None:
            raise several.one_given_to_several(fitted, name, self)
        return X

    def _unpack_dataset(self, X, y, caller):
        """``(X, y)`` as given, or two DsTensors of a torch Dataset of
        ``(x, y)`` pairs given as X (one block per worker, each read by
        its own task: :func:`dislib_nn.data.from_dataset`)."""
        name = type(self).__name__
        if not is_dataset(X):
            if y is None:
                raise ValueError(
                    f"{name} requires y to be passed, but the target y is "
                    f"None. Pass y, or X as a torch Dataset of (x, y) "
                    f"pairs.")
            return X, y
        if y is not None:
            raise ValueError(
                f"{name}.{caller} was given a torch Dataset as X "
                f"({type(X).__name__}), whose items hold the targets, and "
                f"y={y!r:.60} too. Pass y=None (or leave it out).")
        blocks = (self.n_workers or runtime.n_workers()) * (
            BALANCE_BLOCKS_PER_WORKER if self.balance else 1)
        return from_dataset(X, n_blocks=min(blocks, _len(X)))

    def _check_feature_names(self, names, warn=True):
        """Compare X's column names with ``feature_names_in_``, as
        scikit-learn does: an error when they differ, a warning (with
        ``warn``) when one of them has none."""
        fitted = getattr(self, "feature_names_in_", None)
        name = type(self).__name__
        one_side = (names is None) != (fitted is None)
        if names is None and fitted is None or one_side and not warn:
            return
        if names is None:
            warn_user(f"X does not have valid feature names, but {name} "
                      f"was fitted with feature names", UserWarning)
            return
        if fitted is None:
            warn_user(f"X has feature names, but {name} was fitted "
                      f"without feature names", UserWarning)
            return
        if len(names) == len(fitted) and np.all(names == fitted):
            return
        raise ValueError(_names_differ(list(fitted), list(names)))

    def _check_predict_input(self, X, name="X"):
        """X's rows have the fitted shape and a dtype the model takes
        (:func:`._input_dtype.check_kind`)."""
        self._check_predict_shape(tuple(X.shape[1:]))
        _input_dtype.check_kind(_fitted.input_kind(self), X.dtype, name,
                                self)

    def _check_predict_shape(self, sample_shape):
        expected = self._sample_shape
        if sample_shape == expected:
            return
        name = type(self).__name__
        if len(sample_shape) == 1 and len(expected) == 1:
            raise ValueError(
                f"X has {sample_shape[0]} features, but {name} is "
                f"expecting {expected[0]} features as input.")
        raise ShapeError(
            f"X has samples of shape {sample_shape}, but {name} was fitted "
            f"on samples of shape {expected}.")

    def _prepare(self, checked):
        """The checked data as DsTensors: encoded, blocked, split."""
        X, y = checked.X, checked.y
        if isinstance(X, several.SeveralInputs):
            X = X.packed(self._output.layout)
        n_workers = self.n_workers or runtime.n_workers()
        # X's blocks hold what the module receives (int64 and bool kept);
        # a regressor's targets are in the module's floating dtype.
        x_dtype = _input_dtype.numpy_dtype(self._output.x_dtype)
        np_dtype = _input_dtype.numpy_dtype(self._output.float_dtype)
        sizes = X.block_sizes if _inputs.is_ds_tensor(X) else (
            y.block_sizes if _inputs.is_ds_tensor(y) else None)
        # balance=True deals blocks by throughput: it needs several per
        # worker to move work between them.
        per_worker = BALANCE_BLOCKS_PER_WORKER if self.balance else 1
        x = _inputs.as_ds_tensor(X, block_sizes=sizes, n_blocks=min(
            n_workers * per_worker, X.shape[0]), dtype=x_dtype)
        y = self._as_target_ds(y, x.block_sizes, np_dtype)
        x_valid = y_valid = None
        if self.validation_data is not None:
            x_valid, y_valid = self._validation_ds(x_dtype, np_dtype,
                                                   n_workers)
        elif self.validation_fraction:
            x, y, x_valid, y_valid = self._split(x, y)
        x, y, n_replicas = _dealing.replicas(
            x, y, self.n_workers, n_workers, self.shuffle, per_worker)
        _fitted.set_workers(self, n_replicas)
        return FitData(x, y, x_valid, y_valid, self._sample_shape,
                       checked.y_ndim)

    def _as_target_ds(self, y, block_sizes, np_dtype):
        return self._targets.as_ds_tensor(self, y, block_sizes, np_dtype)

    def _validation_ds(self, x_dtype, np_dtype, n_workers):
        Xv, yv = self.validation_data
        Xv = self._model_input(Xv, "validation_data[0]")
        Xv = _inputs.check_x(Xv, "validation_data[0]")
        yv = _inputs.check_y(yv, self._targets, "validation_data[1]")
        _inputs.check_lengths(Xv, yv, "validation_data[0]",
                              "validation_data[1]")
        if _inputs.is_ds_tensor(Xv):
            _inputs.check_finite_blocks(Xv, "validation_data[0]")
        self._check_predict_input(Xv, "validation_data[0]")
        sizes = Xv.block_sizes if _inputs.is_ds_tensor(Xv) else None
        xv = _inputs.as_ds_tensor(Xv, block_sizes=sizes, n_blocks=min(
            n_workers, Xv.shape[0]), dtype=x_dtype)
        return xv, self._as_target_ds(yv, xv.block_sizes, np_dtype)

    def _split(self, x, y):
        sizes = x.block_sizes
        n_valid = [min(int(round(self.validation_fraction * n)), n - 1)
                   if n > 1 else 0 for n in sizes]
        if sum(n_valid) == 0:
            raise InvalidParameterError(
                f"validation_fraction={self.validation_fraction!r} leaves "
                f"no validation sample with blocks of sizes {tuple(sizes)}."
                f" Raise it, or pass validation_data.")
        parts = [_blocks._split_block(
            xb, yb, nv,
            _seeds.seed_for(self._seed, _seeds.VALIDATION_SPLIT, i))
            for i, (xb, yb, nv) in enumerate(zip(x.blocks, y.blocks,
                                                 n_valid))]
        train_sizes = tuple(n - v for n, v in zip(sizes, n_valid))
        keep = [i for i, v in enumerate(n_valid) if v > 0]

        def build(ds, index, sizes_, which):
            return DsTensor([parts[i][index] for i in which],
                            tuple(sizes_), ds.sample_shape, ds.dtype,
                            owned=True)

        return (build(x, 0, train_sizes, range(len(parts))),
                build(y, 1, train_sizes, range(len(parts))),
                build(x, 2, [n_valid[i] for i in keep], keep),
                build(y, 3, [n_valid[i] for i in keep], keep))


def _len(dataset):
    try:
        return len(dataset)
    except TypeError:
        return 1        # from_dataset names what is wrong


def feature_names(X):
    """X's column names as an object array when all are strings (a
    pandas DataFrame, say), else None; scikit-learn's convention.

    Column names of mixed types, strings among them, raise TypeError.
    """
    columns = getattr(X, "columns", None)
    if columns is None or _inputs.is_ds_tensor(X):
        return None
    names = np.asarray(list(columns), dtype=object)
    kinds = sorted({type(n).__qualname__ for n in names})
    if len(kinds) > 1 and "str" in kinds:
        raise TypeError(
            f"Feature names are only supported if all input features have "
            f"string names, but X has {kinds} as column name types. Make "
            f"them all strings (X.columns = X.columns.astype(str)) for "
            f"them to be stored and checked, or all of another type.")
    if len(names) == 0 or kinds != ["str"]:
        return None
    return names


def _names_differ(fitted, names):
    """scikit-learn's message for column names that differ from fit's."""
    message = "The feature names should match those that were passed " \
              "during fit.\n"
    unseen = [n for n in names if n not in set(fitted)]
    missing = [n for n in fitted if n not in set(names)]
    if not unseen and not missing:
        return message + ("Feature names must be in the same order as they "
                          "were in fit.\n")

    def listed(title, items):
        shown = "".join(f"- {n}\n" for n in items[:5])
        more = "- ...\n" if len(items) > 5 else ""
        return f"{title}\n{shown}{more}"
    if unseen:
        message += listed("Feature names unseen at fit time:", unseen)
    if missing:
        message += listed("Feature names seen at fit time, yet now missing:",
                          missing)
    return message
