"""The scikit-learn estimator behind the epoch-averaging classes.

The parameters (stored verbatim by ``__init__``, validated from a
constraints table) are :mod:`._params`'s; ``fit`` validates them, then
climbs a ladder of small steps that subclasses may override:

``fit`` / ``partial_fit``
    check the data and make it DsTensors (:mod:`._fit_data`), build the
    model (:meth:`_initialize`) unless continuing, then run epochs
    (:meth:`_fit_epochs`);
``_fit_epochs``
    build the strategy (``_strategy_class``, see :mod:`.strategies`)
    and the callbacks (:meth:`_callbacks`), run the epoch loop
    (:mod:`._epoch_loop`), recompute the final model's BatchNorm
    statistics when ``recompute_batchnorm`` says so
    (:mod:`.tasks._batchnorm`), then fetch the model (:meth:`_finish`).

What differs between classifiers and regressors is in ``_targets``
(:mod:`._targets`); predictions and scores are in :mod:`._predict`;
resuming from a checkpoint in :mod:`._resume`; saving,
loading and pickling in :mod:`._persist`; what ``sync_every="auto"``
and ``lr_scaling="auto"`` run as in :mod:`._adaptive`. What a fit learns
(the fitted attributes) is written by :mod:`._fitted` only, and put
back by it when a fit fails.
"""

import torch
from sklearn.base import BaseEstimator

from dislib_nn import runtime
from dislib_nn.data import shuffle
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training import (_checkpoint_lock, _fitted, _input_dtype,
                                _resume, _seeds)
from dislib_nn.training._adaptive import plan as adaptive_plan
from dislib_nn.training._adaptive import sync_every_at
from dislib_nn.training._component_args import (inferable_arguments,
                                                split_prefixed)
from dislib_nn.training._components import (Components, check_step,
                                            first_float_dtype)
from dislib_nn.training._epoch_loop import run_epochs
from dislib_nn.training._fit_data import FitDataMixin
from dislib_nn.training._fit_params import fit_params
from dislib_nn.training._input_checks import check_rows
from dislib_nn.training._params import ParamsMixin
from dislib_nn.training._scoring import scorer_of
from dislib_nn.training._several_inputs import materialize_several
from dislib_nn.training._persist import PersistMixin
from dislib_nn.training._predict import PredictMixin
from dislib_nn.training.callbacks import _checkpoint, _named
from dislib_nn.training.callbacks._core import (FailurePolicy, History,
                                                LearningRate, Printer)
from dislib_nn.training.callbacks._early_stopping import EarlyStopping
from dislib_nn.training.callbacks._lr_scheduler import step_schedule_of
from dislib_nn.training.callbacks._schedule import LRSchedule
from dislib_nn.training.strategies import _rounds
from dislib_nn.training.strategies._async import AsyncStrategy
from dislib_nn.training.strategies._dealing import EpochData
from dislib_nn.training.strategies._clock import FitClock, steps_per_epoch
from dislib_nn.training.strategies._interface import Carry, FitSetup
from dislib_nn.training.strategies._lifetimes import Lifetimes
from dislib_nn.training.strategies._sync import SyncStrategy
from dislib_nn.training.tasks import _batchnorm
from dislib_nn.training.tasks._precision import check_tasks_device
from dislib_nn.training.tasks._train import train_task_for

__all__ = ["EpochAveragingBase", "SyncEpochAveragingBase",
           "AsyncEpochAveragingBase"]


class EpochAveragingBase(ParamsMixin, PersistMixin, FitDataMixin,
                         PredictMixin, BaseEstimator):
    """Common base of the epoch-averaging estimators.

    Not for direct use: see ``SyncEpochAveragingClassifier`` and the
    others, whose docstrings list the parameters. A subclass names its
    ``_targets`` (:mod:`._targets`) and its ``_strategy_class``
    (:mod:`.strategies._interface`).
    """

    _targets = None
    _strategy_class = None

    def __sklearn_is_fitted__(self):
        return hasattr(self, "module_")

    @property
    def strategy_state_(self):
        """What the strategy carries into the next fit (a copy of the
        dict; see the class docstring)."""
        if not self.__sklearn_is_fitted__():
            raise AttributeError(
                f"This {type(self).__name__} has no strategy_state_ "
                f"before fit: it is set by fit.")
        return dict(self._carried)

    # --------------------------------------------------------------- fit
    def fit(self, X, y=None, resume=False):
        """Train the module for ``n_epochs`` epochs (more with warm_start).

        Parameters
        ----------
        X : DsTensor, array-like, torch.Tensor, ds-array or Dataset
            Samples, one per row; any sample shape the module accepts.
            Integer and boolean X reach the module as int64 and bool. A
            map-style ``torch.utils.data.Dataset`` of ``(x, y)`` pairs
            holds the targets too (y is then None); its blocks are read
            by tasks (:func:`dislib_nn.data.from_dataset`).
        y : DsTensor, array-like, torch.Tensor or ds-array
            Targets, one per row; None when X is a Dataset.
        resume : bool, default=False
            Continue from the checkpoint in ``checkpoint_dir`` when there
            is one (up to ``n_epochs`` epochs in all), and start afresh
            when there is none. A checkpoint written by another estimator
            class, other parameters or another module raises
            :class:`~dislib_nn.exceptions.CheckpointMismatchError`. A
            checkpoint folder that another process's fit holds raises
            :class:`~dislib_nn.exceptions.CheckpointInUseError` before
            any task runs.

        Returns
        -------
        self
        """
        self._validate_params()
        self._announce_start()
        with _checkpoint_lock.hold(self._checkpoint_dirname()):
            return self._fit(X, y, resume)

    def _fit(self, X, y, resume):
        """``fit``, once its checkpoint folder (if any) is held."""
        checkpoint, path = _resume.to_resume(
            self, resume, self._checkpoint_dirname())
        continuing = checkpoint is None and self.warm_start \
            and self.__sklearn_is_fitted__()
        saved = _fitted.snapshot(self)
        try:
            checked = self._check_fit_data(X, y, reset=not continuing)
            check_rows(self, checked.X)
            n_epochs = self.n_epochs
            if not continuing:
                self._initialize(checked, checkpoint and checkpoint["seed"])
            if checkpoint is not None:
                _resume.check_model(self, checkpoint, path)
            self._check_step(checked)
            data = self._prepare(checked)
            if checkpoint is not None:
                _resume.check_workers(self, checkpoint, path)
                _resume.restore(self, checkpoint)
                n_epochs = self.n_epochs - self.n_epochs_
                if self.verbose:
                    print(f"resuming from {path}: {self.n_epochs_} of "
                          f"{self.n_epochs} epochs done", flush=True)
            if n_epochs > 0:
                self._fit_epochs(data, n_epochs, checkpoint)
            else:
                self.module_.eval()
        except BaseException:
            saved.restore()
            raise
        return self

    def partial_fit(self, X, y=None):
        """Train for one more epoch, from the current model if fitted."""
        return self._partial_fit(X, y)

    def _partial_fit(self, X, y, classes=None):
        self._validate_params()
        self._announce_start()
        with _checkpoint_lock.hold(self._checkpoint_dirname()):
            return self._partial_fit_held(X, y, classes)

    def _partial_fit_held(self, X, y, classes):
        first = not self.__sklearn_is_fitted__()
        saved = _fitted.snapshot(self)
        try:
            checked = self._check_fit_data(X, y, reset=first,
                                           classes=classes)
            if first:
                self._initialize(checked)
            self._check_step(checked)
            self._fit_epochs(self._prepare(checked), 1)
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
            else self._targets.default_criterion, prefixed["criterion"],
            self.optimizer, prefixed["optimizer"],
            self.outer_optimizer, prefixed["outer_optimizer"])

    def _inferred_arguments(self, checked):
        values = self._targets.inferred_sizes(self, checked.y)
        names = inferable_arguments(self.module)
        return {k: values[k] for k in names
                if values.get(k) is not None}

    def _initialize(self, checked, seed=None):
        """Build the initial model; forget any earlier fit.

        ``seed``: the base seed (:mod:`._seeds`) of a checkpoint resumed,
        else drawn from ``random_state``.
        """
        if seed is None:
            seed = _seeds.draw_base(self.random_state)
        inferred = self._inferred_arguments(checked)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seeds.seed_for(int(seed), _seeds.MODEL_INIT))
            module = self._components(inferred).build_module()
            kind = self._input_kind
            if kind == _input_dtype.SEVERAL:
                materialize_several(module, _fitted.packed_layout(
                    self, first_float_dtype(module)))
            else:
                kind = _input_dtype.settle(module, self._sample_shape, kind)
        _fitted.settle_inputs(self, kind)
        _fitted.start(self, module, seed, inferred)

    def _check_step(self, checked):
        """Try one sample through the training step before any task: the
        data of arrays are not blocked yet, so a module that does not
        take X's rows is named before a worker pool starts."""
        check_step(self._components(self._inferred), self.module_,
                   self._output,
                   self._sample_shape,
                   (1,) + self._targets.target_shape(checked.y),
                   float(self.lr))

    # ---------------------------------------------------- fit: the epochs
    def _fit_epochs(self, data, n_epochs, checkpoint=None):
        """Run ``n_epochs`` epochs from the current model (the callbacks
        take their state from ``checkpoint`` when resuming)."""
        self._check_batch_norm_batch()
        # Before the first task: fp16 needs the CUDA devices that the
        # tasks of device="auto" may not get on this site.
        check_tasks_device(self.precision, self.device)
        components = self._components(self._inferred)
        lifetimes = Lifetimes()
        recompute = _batchnorm.wanted(self.recompute_batchnorm,
                                      self.n_workers_, self.module_)
        epochs = EpochData(
            data.x, data.y, self.n_workers_, self.shuffle,
            _seeds.seed_for(self._seed, _seeds.EPOCHS), _shuffle,
            balance=bool(self.balance), keep_last=recompute,
            rates=self.balance if isinstance(self.balance, (list, tuple))
            else None)
        given = fit_params(self, self._epoch_strategy_class())
        plan = self._plan(epochs, given, n_epochs)
        # What the fit runs: the plan's choices in place of "auto".
        params = given._replace(sync_every=plan.sync_every, own=plan.own)
        named = self._callbacks(plan)
        for _, cb in named:
            cb.initialize()
        if checkpoint is not None:
            _resume.restore_callbacks(named, checkpoint)
        callbacks = [cb for _, cb in named]
        setup = FitSetup(
            components, epochs,
            {k: v.detach().clone()
             for k, v in self.module_.state_dict().items()},
            Carry(self.optimizer_states_, self._carried), params,
            self._output, [k for k, _ in self.module_.named_parameters()],
            lifetimes, train_task_for(self.device, self.on_failure),
            FitClock(epochs, params, self._output,
                     step_schedule=step_schedule_of(
                         callbacks, components, self.module_,
                         float(self.lr), self.lr_schedule),
                     first_epoch=self.n_epochs_))
        strategy = self._epoch_strategy(setup)
        final = run_epochs(self, strategy, named,
                           self.n_epochs_, self.n_epochs_ + n_epochs,
                           float(self.lr),
                           self._validation(setup.task_components, data))
        if recompute:
            final = self._recompute_batch_norm(setup, final)
        self._finish(final, strategy.carry())
        if recompute:
            _fitted.note_batchnorm_recomputed(self)

    def _validation(self, components, data):
        """``model -> futures of per-block statistics``, or None."""
        if data.x_valid is None:
            return None

        def validate(model):
            return self._submit_scores(
                components=components, state=model, x=data.x_valid,
                y=data.y_valid, classes=None, with_loss=True,
                wants=scorer_of(self).wants)
        return validate

    def _plan(self, epochs, given, n_epochs):
        """What ``sync_every="auto"``, ``lr_scaling="auto"`` and the
        strategy's own ``"auto"`` parameters run as (:mod:`._adaptive`),
        from the replicas' steps in the first epoch of ``epochs`` (the
        fit's ``EpochData``); a callable ``sync_every`` is checked for
        each of the fit's ``n_epochs`` epochs first, before anything is
        submitted. ``given``: the fit's :class:`FitParams` before the
        plan."""
        for epoch in range(self.n_epochs_, self.n_epochs_ + n_epochs):
            sync_every_at(self.sync_every, epoch)
        strategy = self._epoch_strategy_class()
        return adaptive_plan(
            self.sync_every, self.lr_scaling, self.n_workers_,
            steps_per_epoch(epochs, given, self.n_epochs_),
            fractions=strategy.merges_within_epochs,
            has_schedule=self.lr_schedule is not None,
            own=given.own, adapt=strategy.adapt)

    def _epoch_strategy(self, setup):
        """The strategy the epoch loop drives: the preset's class, or a
        new instance of the user-written ``strategy`` (its parameters,
        then the ``strategy__`` ones) in its driver."""
        if self.strategy is None:
            return self._strategy_class(setup)
        built = _rounds.build_strategy(
            self.strategy, _rounds.routed(self._extra_params),
            type(self).__name__)
        return _rounds.RoundDriver(setup, built)

    def _callbacks(self, plan):
        """The fit's ``(name, callback)`` pairs, in the order they run:
        the defaults (:mod:`.callbacks._core`), then ``callbacks``'s
        entries with the ``callbacks__NAME__arg`` parameters set on
        them; checkpoint callbacks last."""
        schedule = LRSchedule(self.lr, self.lr_schedule,
                              split_prefixed(self._prefixed_params())
                              ["lr_schedule"], self.history_)
        named = [("failure_policy",
                  FailurePolicy(self.on_failure, self.max_retries)),
                 ("learning_rate", LearningRate(schedule, plan)),
                 ("history", History())]
        if self.early_stopping:
            named.append(("early_stopping",
                          EarlyStopping(patience=self.patience)))
        if self.verbose:
            named.append(("printer", Printer(self._describe_fit(plan))))
        if self.checkpoint_dir is not None:
            named.append(("checkpoint",
                          _checkpoint.Checkpoint(self.checkpoint_dir)))
        named += self._user_callbacks()
        return ([e for e in named if not e[1].wants_checkpoint]
                + [e for e in named if e[1].wants_checkpoint])

    def _user_callbacks(self):
        """``callbacks``'s entries, named, their routed arguments set
        (checked by ``_validate_params`` before any task)."""
        named = _named.name_callbacks(self.callbacks, _named.DEFAULTS,
                                      type(self).__name__)
        _named.apply_routed(_named.routed_params(self._extra_params), named)
        return named

    def _checkpoint_dirname(self):
        """Where ``fit(resume=True)`` looks: ``checkpoint_dir``, else the
        directory of the first Checkpoint callback."""
        if self.checkpoint_dir is not None or not isinstance(
                self.callbacks, (list, tuple)):
            return self.checkpoint_dir
        for entry in self.callbacks:
            cb = entry[1] if isinstance(entry, tuple) else entry
            if isinstance(cb, _checkpoint.Checkpoint):
                return cb.dirname
        return None

    def _announce_start(self):
        """With ``verbose``, say so before the first task starts a pool."""
        if self.verbose and not runtime.started():
            print(f"starting the {runtime.backend_name()} backend: "
                  f"{runtime.n_workers()} worker processes (once per "
                  f"session, a few seconds)...", flush=True)

    def _describe_fit(self, plan):
        return (f"{type(self).__name__}: {self.n_workers_} workers, "
                f"backend {runtime.backend_name()}; {plan.describe()}")

    def _check_batch_norm_batch(self):
        if self.batch_size == 1 and any(
                isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                for m in self.module_.modules()):
            raise InvalidParameterError(
                f"The 'batch_size' parameter of {type(self).__name__} must "
                f"be at least 2 for a module with BatchNorm layers, which "
                f"cannot train on batches of one row. Got 1 instead.")

    def _recompute_batch_norm(self, setup, final_model):
        """The final model with its BatchNorm statistics recomputed over
        the last epoch's rows (:mod:`.tasks._batchnorm`): after the last
        merge and early stopping's choice, so after the last
        validation."""
        epoch, blocks = setup.data.last_dealt()
        if self.verbose:
            print(f"recomputing the BatchNorm statistics of the final "
                  f"model over epoch {epoch + 1}'s rows: {len(blocks)} "
                  f"tasks and one merge", flush=True)
        return _batchnorm.submit_recompute(setup, final_model, epoch, blocks)

    def _finish(self, final_model, carry):
        """Fetch the final model and what the strategy carries (a
        :class:`Carry`): the one weight transfer of ``fit``."""
        names = list(carry.state)
        state, optims, values = runtime.wait_on(
            final_model, carry.optimizer_states or [],
            [carry.state[k] for k in names])
        _fitted.finish(self, state, optims if carry.optimizer_states
                       is not None else None, dict(zip(names, values)))


def _shuffle(x, y, seed):
    return shuffle(x, y, random_state=seed)


class SyncEpochAveragingBase(EpochAveragingBase):
    """Base of the synchronous estimators (:mod:`.strategies._sync`)."""

    _strategy_class = SyncStrategy


class AsyncEpochAveragingBase(EpochAveragingBase):
    """Base of the asynchronous estimators (:mod:`.strategies._async`),
    with its parameters ``max_lag`` and ``staleness_exponent``."""

    _strategy_class = AsyncStrategy
