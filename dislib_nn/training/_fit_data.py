"""Checking the training data and turning it into DsTensors.

The first rung of the fit ladder: X and y are checked (scikit-learn's
checks for arrays, tasks for DsTensors), ``classes_`` and the sample
shape are learned or checked, then arrays are split into one block per
worker, labels encoded, and a validation set split off (block by block,
by tasks) or prepared from ``validation_data``.
"""

import torch

from dislib_nn import runtime
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from dislib_nn.training import _data_tasks, _seeds
from dislib_nn.training import _input_checks as _inputs
from dislib_nn.training._components import first_float_dtype

__all__ = ["FitData", "FitDataMixin", "BALANCE_BLOCKS_PER_WORKER"]

#: Blocks per worker an array is split into when ``balance=True``.
BALANCE_BLOCKS_PER_WORKER = 8


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
        """Check X and y; learn (or check) ``classes_`` and the shapes."""
        X = _inputs.check_x(X)
        y = _inputs.check_y(y, self._targets)
        _inputs.check_lengths(X, y)
        if _inputs.is_ds_tensor(X):
            _inputs.check_finite_blocks(X, "X")
        if _inputs.is_ds_tensor(y):
            _inputs.check_finite_blocks(y, "y")
        self._check_sample_shape(X, reset)
        self._targets.learn(self, y, reset, classes)
        return {"X": X, "y": y, "y_ndim": len(y.shape)}

    def _check_sample_shape(self, X, reset):
        sample_shape = tuple(X.shape[1:])
        if reset:
            self._sample_shape = sample_shape
            if len(sample_shape) == 1:
                self.n_features_in_ = sample_shape[0]
            elif hasattr(self, "n_features_in_"):
                del self.n_features_in_
            return
        self._check_predict_shape(sample_shape)

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
        X, y = checked["X"], checked["y"]
        n_workers = self.n_workers or runtime.n_workers()
        dtype = first_float_dtype(self.module_)
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        sizes = X.block_sizes if _inputs.is_ds_tensor(X) else (
            y.block_sizes if _inputs.is_ds_tensor(y) else None)
        # balance=True deals blocks by throughput: it needs several per
        # worker to move work between them.
        per_worker = BALANCE_BLOCKS_PER_WORKER if self.balance else 1
        x = _inputs.as_ds_tensor(X, block_sizes=sizes, n_blocks=min(
            n_workers * per_worker, X.shape[0]), dtype=np_dtype)
        y = self._as_target_ds(y, x.block_sizes, np_dtype)
        x_valid = y_valid = None
        if self.validation_data is not None:
            x_valid, y_valid = self._validation_ds(np_dtype, n_workers)
        elif self.validation_fraction:
            x, y, x_valid, y_valid = self._split(x, y)
        self.n_workers_ = min(n_workers, x.n_blocks)
        return FitData(x, y, x_valid, y_valid, self._sample_shape,
                       checked["y_ndim"])

    def _as_target_ds(self, y, block_sizes, np_dtype):
        return self._targets.as_ds_tensor(self, y, block_sizes, np_dtype)

    def _validation_ds(self, np_dtype, n_workers):
        Xv, yv = self.validation_data
        Xv = _inputs.check_x(Xv, "validation_data[0]")
        yv = _inputs.check_y(yv, self._targets, "validation_data[1]")
        _inputs.check_lengths(Xv, yv, "validation_data[0]",
                              "validation_data[1]")
        if _inputs.is_ds_tensor(Xv):
            _inputs.check_finite_blocks(Xv, "validation_data[0]")
        self._check_predict_shape(tuple(Xv.shape[1:]))
        sizes = Xv.block_sizes if _inputs.is_ds_tensor(Xv) else None
        xv = _inputs.as_ds_tensor(Xv, block_sizes=sizes, n_blocks=min(
            n_workers, Xv.shape[0]), dtype=np_dtype)
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
        parts = [_data_tasks._split_block(
            xb, yb, nv,
            _seeds.seed_for(self._seed, _seeds.VALIDATION_SPLIT, i))
            for i, (xb, yb, nv) in enumerate(zip(x._blocks, y._blocks,
                                                 n_valid))]
        DsTensor = _data().DsTensor
        train_sizes = tuple(n - v for n, v in zip(sizes, n_valid))
        keep = [i for i, v in enumerate(n_valid) if v > 0]

        def build(ds, index, sizes_, which):
            return DsTensor._from_blocks(
                [parts[i][index] for i in which], tuple(sizes_),
                ds.sample_shape, ds.dtype)

        return (build(x, 0, train_sizes, range(len(parts))),
                build(y, 1, train_sizes, range(len(parts))),
                build(x, 2, [n_valid[i] for i in keep], keep),
                build(y, 3, [n_valid[i] for i in keep], keep))


def _data():
    import dislib_nn.data as data
    return data
