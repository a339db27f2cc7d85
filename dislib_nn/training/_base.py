"""The scikit-learn estimator behind the epoch-averaging classes.

``__init__`` stores every parameter verbatim (skorch-style prefixed
component arguments too); ``fit`` validates them from a constraints
table, then climbs a ladder of small steps that subclasses may override:

``fit`` / ``partial_fit``
    check the data (:meth:`_prepare`), build the model (:meth:`_initialize`)
    unless continuing, then run epochs (:meth:`_fit_epochs`);
``_fit_epochs``
    the epoch loop: learning-rate schedule, history, early stopping;
``_run_epoch``
    one epoch: submit it (:class:`~dislib_nn.training._sync.SyncTrainer`),
    then wait for its scalars only.
"""

import numbers
import time

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from dislib_nn import runtime
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from dislib_nn.training import _block_tasks, _inputs, _labels, _metrics
from dislib_nn.training import _params as p
from dislib_nn.training._components import (PREFIXES, Components,
                                            check_keywords,
                                            first_float_dtype,
                                            inferable_arguments,
                                            split_prefixed)
from dislib_nn.training._epoch import OutputAdapter, forward_batches
from dislib_nn.training._schedule import LRSchedule
from dislib_nn.training._sync import (SHUFFLE_MODES, SyncTrainer,
                                      merges_after, seed_for)

__all__ = ["SyncEpochAveragingBase"]

_INT = numbers.Integral
_REAL = numbers.Real
_PREDICT_BATCH = 1024


class _FitData:
    """Checked training (and validation) data, as DsTensors."""

    def __init__(self, x, y, x_valid, y_valid, sample_shape, y_ndim):
        self.x, self.y = x, y
        self.x_valid, self.y_valid = x_valid, y_valid
        self.sample_shape = sample_shape
        self.y_ndim = y_ndim


class SyncEpochAveragingBase(BaseEstimator):
    """Common base of the synchronous epoch-averaging estimators.

    Not for direct use: see ``SyncEpochAveragingClassifier`` and
    ``SyncEpochAveragingRegressor``, whose docstrings list the
    parameters.
    """

    _kind = None
    _default_criterion = None

    _parameter_constraints = {
        "module": [p.ModuleSpec()],
        "criterion": [p.NoneValue(), p.ModuleSpec()],
        "optimizer": [p.Callable(
            "a torch.optim.Optimizer subclass or a callable returning "
            "one")],
        "lr": [p.Interval(_REAL, 0, None, closed="neither")],
        "lr_schedule": [p.NoneValue(), p.Callable(
            "a callable (epoch -> factor) or a torch scheduler class")],
        "n_epochs": [p.Interval(_INT, 1, None)],
        "batch_size": [p.Interval(_INT, 1, None)],
        "n_workers": [p.NoneValue(), p.Interval(_INT, 1, None)],
        "sync_every": [p.Interval(_INT, 1, None)],
        "shuffle": [p.Options(*SHUFFLE_MODES)],
        "optimizer_state": [p.Options("keep", "reset", "average")],
        "outer_lr": [p.Interval(_REAL, 0, None, closed="neither")],
        "outer_momentum": [p.Interval(_REAL, 0, 1, closed="left")],
        "validation_fraction": [p.Interval(_REAL, 0, 1, closed="left")],
        "validation_data": [p.NoneValue(), p.PairOfArrays()],
        "early_stopping": [p.Boolean()],
        "patience": [p.Interval(_INT, 1, None)],
        "device": [p.DeviceSpec()],
        "random_state": [p.NoneValue(), p.RandomState()],
        "verbose": [p.Boolean(), p.Interval(_INT, 0, None)],
        "warm_start": [p.Boolean()],
    }

    def __init__(self, *, module=None, criterion=None,
                 optimizer=torch.optim.SGD, lr=0.01, lr_schedule=None,
                 n_epochs=10, batch_size=32, n_workers=None, sync_every=1,
                 shuffle="global", optimizer_state="keep", outer_lr=1.0,
                 outer_momentum=0.0, validation_fraction=0.0,
                 validation_data=None, early_stopping=False, patience=5,
                 device="auto", random_state=None, verbose=0,
                 warm_start=False, **kwargs):
        self.module = module
        self.criterion = criterion
        self.optimizer = optimizer
        self.lr = lr
        self.lr_schedule = lr_schedule
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.n_workers = n_workers
        self.sync_every = sync_every
        self.shuffle = shuffle
        self.optimizer_state = optimizer_state
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum
        self.validation_fraction = validation_fraction
        self.validation_data = validation_data
        self.early_stopping = early_stopping
        self.patience = patience
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start
        # Component arguments (module__hidden=...) are parameters too,
        # stored verbatim like the others and checked at fit.
        self._extra_params = dict(kwargs)

    # ------------------------------------------------------------ params
    def get_params(self, deep=True):
        """Parameters, the prefixed component arguments included."""
        params = super().get_params(deep=deep)
        params.update(self._extra_params)
        return params

    def set_params(self, **params):
        """Set parameters, prefixed component arguments included.

        Like ``__init__``, it stores values without checking them: ``fit``
        does, and rejects unknown names with a "did you mean" hint.
        """
        names = self._get_param_names()
        plain = {}
        for key, value in params.items():
            if key in names:
                plain[key] = value
            else:
                self._extra_params[key] = value
        return super().set_params(**plain)

    def _prefixed_params(self):
        return {k: v for k, v in self._extra_params.items()
                if k.partition("__")[0] in PREFIXES and "__" in k}

    def _validate_params(self):
        name = type(self).__name__
        check_keywords(self._extra_params, self._get_param_names(), name,
                       InvalidParameterError)
        p.validate(self._parameter_constraints,
                   self.get_params(deep=False), name)
        if self.validation_fraction and self.validation_data is not None:
            raise InvalidParameterError(
                f"{name} takes validation_fraction or validation_data, not "
                f"both. Got validation_fraction="
                f"{self.validation_fraction!r} and validation_data.")

    def __sklearn_is_fitted__(self):
        return hasattr(self, "module_")

    # --------------------------------------------------------------- fit
    def fit(self, X, y):
        """Train the module for ``n_epochs`` epochs (more with warm_start).

        Parameters
        ----------
        X : DsTensor, array-like, torch.Tensor or ds-array
            Samples, one per row; any sample shape the module accepts.
        y : DsTensor, array-like, torch.Tensor or ds-array
            Targets, one per row.

        Returns
        -------
        self
        """
        self._validate_params()
        continuing = self.warm_start and self.__sklearn_is_fitted__()
        checked = self._check_fit_data(X, y, reset=not continuing)
        if not continuing:
            self._initialize(checked)
        data = self._prepare(checked)
        self._fit_epochs(data, self.n_epochs)
        return self

    def partial_fit(self, X, y):
        """Train for one more epoch, from the current model if fitted."""
        return self._partial_fit(X, y)

    def _partial_fit(self, X, y, classes=None):
        self._validate_params()
        first = not self.__sklearn_is_fitted__()
        checked = self._check_fit_data(X, y, reset=first, classes=classes)
        if first:
            self._initialize(checked)
        data = self._prepare(checked)
        self._fit_epochs(data, 1)
        return self

    # ----------------------------------------------------- fit: the data
    def _check_fit_data(self, X, y, reset, classes=None):
        """Check X and y; learn (or check) ``classes_`` and the shapes."""
        X = _inputs.check_x(X)
        y = _inputs.check_y(y, self._kind)
        _inputs.check_lengths(X, y)
        if _inputs.is_ds_tensor(X):
            _inputs.check_finite_blocks(X, "X")
        if _inputs.is_ds_tensor(y):
            _inputs.check_finite_blocks(y, "y")
        self._check_sample_shape(X, reset)
        if self._kind == "classifier":
            self._learn_classes(y, reset, classes)
        y_ndim = len(y.shape)
        if self._kind == "regressor":
            if reset:
                self._y_ndim = y_ndim
            elif y_ndim != self._y_ndim:
                raise ShapeError(
                    f"y has {y_ndim} dimension(s), but this estimator was "
                    f"fitted with {self._y_ndim}-D targets.")
        return {"X": X, "y": y, "y_ndim": y_ndim}

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

    def _learn_classes(self, y, reset, classes):
        raise NotImplementedError

    def _prepare(self, checked):
        """The checked data as DsTensors: encoded, blocked, split."""
        X, y = checked["X"], checked["y"]
        n_workers = self.n_workers or runtime.n_workers()
        dtype = first_float_dtype(self.module_)
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        sizes = X.block_sizes if _inputs.is_ds_tensor(X) else (
            y.block_sizes if _inputs.is_ds_tensor(y) else None)
        x = _inputs.as_ds_tensor(X, block_sizes=sizes, n_blocks=min(
            n_workers, X.shape[0]), dtype=np_dtype)
        y = self._as_target_ds(y, x.block_sizes, np_dtype)
        x_valid = y_valid = None
        if self.validation_data is not None:
            x_valid, y_valid = self._validation_ds(np_dtype, n_workers)
        elif self.validation_fraction:
            x, y, x_valid, y_valid = self._split(x, y)
        self.n_workers_ = min(n_workers, x.n_blocks)
        return _FitData(x, y, x_valid, y_valid, self._sample_shape,
                        checked["y_ndim"])

    def _as_target_ds(self, y, block_sizes, np_dtype):
        if self._kind == "classifier":
            if _inputs.is_ds_tensor(y):
                blocks = [_block_tasks._encode_labels(b, self.classes_, "y")
                          for b in y._blocks]
                return _data().DsTensor._from_blocks(
                    blocks, tuple(y.block_sizes), (), torch.int64)
            y = _labels.encode(y, self.classes_, "y")
            return _inputs.as_ds_tensor(y, block_sizes=block_sizes)
        return _inputs.as_ds_tensor(
            y, block_sizes=block_sizes,
            dtype=None if _inputs.is_ds_tensor(y) else np_dtype)

    def _validation_ds(self, np_dtype, n_workers):
        Xv, yv = self.validation_data
        Xv = _inputs.check_x(Xv, "validation_data[0]")
        yv = _inputs.check_y(yv, self._kind, "validation_data[1]")
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
        parts = [_block_tasks._split_block(xb, yb, nv, seed_for(
            self._seed, 4, i)) for i, (xb, yb, nv) in enumerate(
                zip(x._blocks, y._blocks, n_valid))]
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

    # ---------------------------------------------------- fit: the model
    def _components(self, inferred=None):
        prefixed = split_prefixed(self._prefixed_params())
        module_kwargs = dict(prefixed["module"])
        for name, value in (inferred or {}).items():
            module_kwargs.setdefault(name, value)
        return Components(
            self.module, module_kwargs,
            self.criterion if self.criterion is not None
            else self._default_criterion, prefixed["criterion"],
            self.optimizer, prefixed["optimizer"])

    def _inferred_arguments(self, checked):
        values = {"n_classes": len(getattr(self, "classes_", ())),
                  "n_features_in": getattr(self, "n_features_in_", None)}
        if self._kind == "regressor":
            y = checked["y"]
            values["n_outputs"] = 1 if len(y.shape) == 1 else y.shape[1]
            values.pop("n_classes")
        names = inferable_arguments(self.module)
        return {k: values[k] for k in names
                if values.get(k) is not None}

    def _initialize(self, checked):
        """Build the initial model; forget any earlier fit."""
        self._seed = int(check_random_state(self.random_state)
                         .randint(0, 2 ** 31 - 1))
        self._inferred = self._inferred_arguments(checked)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_for(self._seed, 0))
            module = self._components(self._inferred).build_module()
            _materialize(module, self._sample_shape)
        self.module_ = module.cpu()
        self.history_ = []
        self.n_epochs_ = 0
        self.optimizer_states_ = None
        self._velocity = None

    # ---------------------------------------------------- fit: the epochs
    def _fit_epochs(self, data, n_epochs):
        """Run ``n_epochs`` epochs from the current model."""
        components = self._components(self._inferred)
        param_keys = [k for k, _ in self.module_.named_parameters()]
        trainer = SyncTrainer(
            components, data.x, data.y, self.n_workers_,
            {k: v.detach().clone() for k, v in
             self.module_.state_dict().items()},
            self._initial_optims(), self._velocity,
            {"batch_size": self.batch_size, "shuffle": self.shuffle,
             "optimizer_state": self.optimizer_state,
             "device": str(self.device), "outer_lr": float(self.outer_lr),
             "outer_momentum": float(self.outer_momentum),
             "sync_every": self.sync_every,
             "seed": seed_for(self._seed, 5),
             "output": self._output_adapter(data), "param_keys": param_keys},
            _shuffle)
        self._output = trainer.config["output"]
        schedule = LRSchedule(self.lr, self.lr_schedule,
                              split_prefixed(self._prefixed_params())
                              ["lr_schedule"], self.history_)
        stopper = _Stopper(self.patience) if self.early_stopping else None
        start = time.perf_counter()
        for i in range(n_epochs):
            epoch = self.n_epochs_
            merge = merges_after(epoch, self.sync_every, i == n_epochs - 1)
            record, merged = self._run_epoch(
                trainer, data, epoch, schedule.lr_at(epoch), merge,
                prefetch=i < n_epochs - 1)
            record["dur_s"] = time.perf_counter() - start
            start = time.perf_counter()
            self.history_.append(record)
            self.n_epochs_ += 1
            schedule.step(record)
            if self.verbose:
                _print_record(record, self.n_epochs_ - i - 1 + n_epochs)
            if stopper is not None and merged is not None and \
                    stopper.update(record, merged):
                break
        final = trainer.state if stopper is None or stopper.best is None \
            else stopper.best
        self._finish(final, trainer)

    def _run_epoch(self, trainer, data, epoch, lr, merge, prefetch):
        """Submit one epoch, then wait for its scalars (never weights)."""
        futures = trainer.run_epoch(epoch, lr, merge)
        valid = []
        if merge and data.x_valid is not None:
            valid = self._submit_scores(
                components=trainer.components, state=futures.merged,
                x=data.x_valid, y=data.y_valid, classes=None,
                with_loss=True)
        if prefetch:
            trainer.prepare(epoch + 1)
        scalars, valid_stats = runtime.wait_on(
            futures.counts + futures.losses, valid)
        n_workers = len(futures.counts)
        n = sum(scalars[:n_workers])
        record = {"epoch": epoch + 1,
                  "train_loss": float(sum(scalars[n_workers:]) / n),
                  "valid_loss": None, "valid_score": None,
                  "lr": float(lr), "merged": bool(merge)}
        if valid_stats:
            stats = _metrics.combine_all(valid_stats)
            record["valid_loss"] = _metrics.mean_loss(stats)
            record["valid_score"] = float(_metrics.score_of(self._kind,
                                                            stats))
        return record, futures.merged

    def _finish(self, final_state, trainer):
        """Fetch the final model (the one weight transfer of ``fit``)."""
        wanted = [final_state]
        keep_optims = self.optimizer_state != "reset"
        if keep_optims:
            wanted.append(trainer.optims if self.optimizer_state == "keep"
                          else trainer.optims[:1])
        if trainer.velocity is not None:
            wanted.append(trainer.velocity)
        values = runtime.wait_on(*wanted) if len(wanted) > 1 \
            else [runtime.wait_on(final_state)]
        self.module_.load_state_dict(values[0])
        self.module_.eval()
        self.optimizer_states_ = values[1] if keep_optims else None
        self._velocity = values[-1] if trainer.velocity is not None \
            else None

    def _initial_optims(self):
        states = self.optimizer_states_ or [None]
        return [states[w % len(states)] for w in range(self.n_workers_)]

    def _output_adapter(self, data):
        return OutputAdapter(
            self._kind, len(getattr(self, "classes_", ())) or None,
            data.y_ndim == 1, first_float_dtype(self.module_))

    # ----------------------------------------------------------- predict
    def _forward(self, X, what):
        """``what`` of the fitted module on X: array in, array out;
        DsTensor in, DsTensor out (computed by tasks)."""
        check_is_fitted(self)
        X = _inputs.check_x(X)
        self._check_predict_shape(tuple(X.shape[1:]))
        if _inputs.is_ds_tensor(X):
            return self._forward_ds(X, what)
        x = torch.from_numpy(np.ascontiguousarray(X))
        raw = forward_batches(self.module_, x, self._predict_batch(),
                              torch.device("cpu"), self._output)
        return self._decode(raw, what)

    def _decode(self, raw, what):
        if what == "proba":
            return torch.softmax(raw.to(torch.float64), dim=1).numpy()
        if what == "labels":
            return self.classes_[raw.argmax(dim=1).numpy()]
        # Arrays out are float64, as scikit-learn's regressors return.
        return raw.to(torch.float64).numpy()

    def _forward_ds(self, X, what):
        classes = None
        if what == "labels":
            classes = _labels.as_label_tensor(self.classes_)
            if classes is None:
                raise TypeError(
                    f"predict on a DsTensor returns a DsTensor of labels, "
                    f"which holds numbers only, but classes_ are "
                    f"{self.classes_.dtype} values. Use predict_proba(X) "
                    f"and classes_, or pass X as an array.")
        sample_shape, dtype = self._output_spec(what, classes)
        components = Components(self.module_, {}, None, {}, None, {})
        blocks = [_block_tasks._predict_block(
            components, None, b, self._output, what, self._predict_batch(),
            str(self.device), classes) for b in X._blocks]
        return _data().DsTensor._from_blocks(
            blocks, tuple(X.block_sizes), sample_shape, dtype)

    def _output_spec(self, what, classes):
        """Sample shape and dtype of predictions, from a 1-sample forward."""
        if what == "labels":
            return (), classes.dtype
        probe = torch.zeros((1,) + self._sample_shape,
                            dtype=self._output.x_dtype)
        raw = forward_batches(self.module_, probe, 1, torch.device("cpu"),
                              self._output)
        return tuple(raw.shape[1:]), (torch.float32 if what == "proba"
                                      else raw.dtype)

    def _submit_scores(self, components, state, x, y, classes, with_loss):
        return [_block_tasks._score_block(
            components, state, xb, yb, self._output, with_loss,
            self._predict_batch(), str(self.device), classes)
            for xb, yb in zip(x._blocks, y._blocks)]

    def _predict_batch(self):
        return max(self.batch_size, _PREDICT_BATCH)

    def _score(self, X, y, sample_weight=None):
        """Accuracy (classifier) or R² (regressor) of predictions on X."""
        check_is_fitted(self)
        X = _inputs.check_x(X)
        y = _inputs.check_y(y, self._kind)
        _inputs.check_lengths(X, y)
        self._check_predict_shape(tuple(X.shape[1:]))
        if not (_inputs.is_ds_tensor(X) or _inputs.is_ds_tensor(y)):
            return self._score_arrays(X, y, sample_weight)
        if sample_weight is not None:
            raise TypeError("score() takes sample_weight with array input "
                            "only; X or y is a DsTensor.")
        sizes = X.block_sizes if _inputs.is_ds_tensor(X) else y.block_sizes
        x = _inputs.as_ds_tensor(X, block_sizes=sizes)
        classes = None
        if self._kind == "classifier":
            if _inputs.is_ds_tensor(y):
                classes = self.classes_     # the tasks encode and check
            else:
                y = _labels.encode(y, self.classes_, "y")
        y = _inputs.as_ds_tensor(y, block_sizes=sizes)
        components = Components(self.module_, {}, None, {}, None, {})
        stats = runtime.wait_on(self._submit_scores(
            components, None, x, y, classes, with_loss=False))
        return float(_metrics.score_of(self._kind,
                                       _metrics.combine_all(stats)))

    def _score_arrays(self, X, y, sample_weight):
        raise NotImplementedError


class _Stopper:
    """Early stopping on the validation loss (else the training loss)."""

    def __init__(self, patience):
        self.patience = patience
        self.best_loss = None
        self.best = None
        self.bad = 0

    def update(self, record, merged):
        loss = record["valid_loss"]
        if loss is None:
            loss = record["train_loss"]
        if self.best_loss is None or loss < self.best_loss:
            self.best_loss, self.best, self.bad = loss, merged, 0
            return False
        self.bad += 1
        return self.bad >= self.patience


def _print_record(record, total):
    parts = [f"epoch {record['epoch']:>3}/{total}",
             f"train_loss {record['train_loss']:.4f}"]
    if record["valid_loss"] is not None:
        parts.append(f"valid_loss {record['valid_loss']:.4f}")
    if record["valid_score"] is not None:
        parts.append(f"valid_score {record['valid_score']:.4f}")
    parts.append(f"lr {record['lr']:.3g}")
    parts.append(f"{record['dur_s']:.2f}s")
    print("  ".join(parts), flush=True)


def _materialize(module, sample_shape):
    """Run one forward pass when the module has lazy layers to shape."""
    if not any(isinstance(t, torch.nn.parameter.UninitializedTensorMixin)
               for t in list(module.parameters()) + list(module.buffers())):
        return
    training = module.training
    module.eval()
    with torch.no_grad():
        module(torch.zeros((1,) + tuple(sample_shape)))
    module.train(training)


def _shuffle(x, y, seed):
    return _data().shuffle(x, y, random_state=seed)


def _data():
    import dislib_nn.data as data
    return data
