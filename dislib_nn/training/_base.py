"""The scikit-learn estimator behind the epoch-averaging classes.

``__init__`` stores every parameter verbatim (skorch-style prefixed
component arguments too); ``fit`` validates them from a constraints
table, then climbs a ladder of small steps that subclasses may override:

``fit`` / ``partial_fit``
    check the data and make it DsTensors (:mod:`._fit_data`), build the
    model (:meth:`_initialize`) unless continuing, then run epochs
    (:meth:`_fit_epochs`);
``_fit_epochs``
    the epoch loop: learning-rate schedule, history, early stopping;
``_submit_epoch`` / ``_record_epoch``
    one epoch: submit it (:class:`~dislib_nn.training._sync.SyncTrainer`),
    then, once the next one is submitted, wait for its scalars only.

Predictions and scores are in :mod:`._predict`.
"""

import numbers
import time

import torch
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from dislib_nn import runtime
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from dislib_nn.training import _metrics, _persist
from dislib_nn.training import _params as p
from dislib_nn.training._components import (PREFIXES, Components,
                                            check_keywords, check_step,
                                            first_float_dtype,
                                            inferable_arguments,
                                            split_prefixed)
from dislib_nn.training._epoch import OutputAdapter
from dislib_nn.training._fit_data import FitDataMixin
from dislib_nn.training._history import Stopper, format_record
from dislib_nn.training._predict import PredictMixin
from dislib_nn.training._schedule import LRSchedule
from dislib_nn.training._sync import (SHUFFLE_MODES, SyncTrainer,
                                      merges_after, seed_for)

__all__ = ["SyncEpochAveragingBase"]

_INT = numbers.Integral
_REAL = numbers.Real


class SyncEpochAveragingBase(FitDataMixin, PredictMixin, BaseEstimator):
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
        saved = _FitState(self)
        try:
            checked = self._check_fit_data(X, y, reset=not continuing)
            _check_rows(self, checked["X"])
            if not continuing:
                self._initialize(checked)
            data = self._prepare(checked)
            self._check_step(data)
            self._fit_epochs(data, self.n_epochs)
        except BaseException:
            saved.restore()
            raise
        return self

    def partial_fit(self, X, y):
        """Train for one more epoch, from the current model if fitted."""
        return self._partial_fit(X, y)

    def _partial_fit(self, X, y, classes=None):
        self._validate_params()
        first = not self.__sklearn_is_fitted__()
        saved = _FitState(self)
        try:
            checked = self._check_fit_data(X, y, reset=first,
                                           classes=classes)
            if first:
                self._initialize(checked)
            data = self._prepare(checked)
            self._check_step(data)
            self._fit_epochs(data, 1)
        except BaseException:
            saved.restore()
            raise
        return self

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

    def _check_step(self, data):
        """Try one sample through the training step before any task."""
        check_step(self._components(self._inferred), self.module_,
                   self._output_adapter(data), self._sample_shape,
                   (1,) + tuple(data.y.shape[1:]), float(self.lr))

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
        stopper = Stopper(self.patience) if self.early_stopping else None
        # Epoch e's scalars are waited for after epoch e + 1 is submitted,
        # so workers never idle while the master reads them, unless the
        # next epoch depends on them (early stopping, a plateau schedule).
        lag = 0 if stopper is not None or schedule.needs_metric else 1
        total = self.n_epochs_ + n_epochs
        first = self.n_epochs_
        in_flight = []
        self._clock = time.perf_counter()
        for epoch in range(first, total):
            in_flight.append(self._submit_epoch(
                trainer, data, epoch, schedule.lr_at(epoch),
                merges_after(epoch, self.sync_every, epoch == total - 1)))
            if epoch < total - 1:
                trainer.prepare(epoch + 1)
            stop = False
            while len(in_flight) > (lag if epoch < total - 1 else 0):
                record, merged = self._record_epoch(in_flight.pop(0),
                                                    schedule, total)
                stop = stopper is not None and merged is not None and \
                    stopper.update(record, merged)
            if stop:
                break
        final = trainer.state if stopper is None or stopper.best is None \
            else stopper.best
        self._finish(final, trainer)

    def _submit_epoch(self, trainer, data, epoch, lr, merge):
        """Submit one epoch (training, merge, validation); wait for none."""
        futures = trainer.run_epoch(epoch, lr, merge)
        valid = []
        if merge and data.x_valid is not None:
            valid = self._submit_scores(
                components=trainer.components, state=futures.merged,
                x=data.x_valid, y=data.y_valid, classes=None,
                with_loss=True)
        return {"epoch": epoch, "lr": lr, "merge": merge,
                "futures": futures, "valid": valid}

    def _record_epoch(self, submitted, schedule, total):
        """Wait for an epoch's scalars (never weights); add its record."""
        futures = submitted["futures"]
        scalars, valid_stats = runtime.wait_on(
            futures.counts + futures.losses, submitted["valid"])
        now = time.perf_counter()
        n_workers = len(futures.counts)
        record = {"epoch": submitted["epoch"] + 1,
                  "train_loss": float(sum(scalars[n_workers:])
                                      / sum(scalars[:n_workers])),
                  "valid_loss": None, "valid_score": None,
                  "lr": float(submitted["lr"]),
                  "merged": bool(submitted["merge"]),
                  "dur_s": now - self._clock}
        self._clock = now
        if valid_stats:
            stats = _metrics.combine_all(valid_stats)
            record["valid_loss"] = _metrics.mean_loss(stats)
            record["valid_score"] = float(_metrics.score_of(self._kind,
                                                            stats))
        self.history_.append(record)
        self.n_epochs_ += 1
        schedule.observe(record)
        if self.verbose:
            print(format_record(record, total), flush=True)
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

    # -------------------------------------------------------- persistence
    def save(self, path):
        """Write the fitted model's weights and parameters to ``path``.

        The file holds the parameters, the fitted attributes ``predict``
        needs and the module's ``state_dict`` (not the optimizer states
        nor any training data); see :meth:`load`.
        """
        _persist.save_estimator(self, path)

    def load(self, path):
        """Load weights saved with :meth:`save`; return ``self``.

        This estimator's parameters build the module that receives the
        weights (an estimator built with ``module=None`` takes every
        parameter from the file), so a module of another architecture
        is refused with an error naming the keys that differ. The file
        is unpickled: load only files you trust.
        """
        return _persist.load_estimator(self, path, self._module_for_load)

    def _module_for_load(self, inferred, sample_shape):
        self._validate_params()
        # Sizes fit inferred, for the arguments this module takes.
        names = inferable_arguments(self.module)
        inferred = {k: v for k, v in (inferred or {}).items()
                    if k in names}
        with torch.random.fork_rng(devices=[]):
            module = self._components(inferred).build_module()
            _materialize(module, sample_shape)
        return module

    def _forget_fit(self):
        """Undo a first fit that failed: no half-trained model is left."""
        for name in ("module_", "history_", "n_epochs_", "classes_",
                     "n_features_in_", "n_workers_", "optimizer_states_"):
            self.__dict__.pop(name, None)


def _check_rows(est, X):
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


class _FitState:
    """What an estimator holds before ``fit``, to put back if it fails.

    A failed or interrupted fit (KeyboardInterrupt included) leaves the
    estimator as it was: unfitted after a first fit, with its earlier
    model, history and optimizer states after a warm start or
    ``partial_fit``.
    """

    def __init__(self, est):
        self.est = est
        self.attributes = dict(vars(est))
        history = self.attributes.get("history_")
        self.history = list(history) if history is not None else None
        module = self.attributes.get("module_")
        self.weights = None if module is None else {
            k: v.detach().clone() for k, v in module.state_dict().items()}

    def restore(self):
        vars(self.est).clear()
        vars(self.est).update(self.attributes)
        if self.history is not None:
            self.est.history_[:] = self.history
        if self.weights is not None:
            self.est.module_.load_state_dict(self.weights)


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
