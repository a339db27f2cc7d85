"""The estimators' parameters: stored verbatim, validated from a table.

``__init__`` stores every parameter as given (skorch-style prefixed
component arguments too, in ``_extra_params``), so that ``clone``,
``get_params`` and ``set_params`` work as in scikit-learn; ``fit`` calls
:meth:`ParamsMixin._validate_params`, which checks them against
``_parameter_constraints`` (:mod:`._param_validation`) and the
components' signatures (:mod:`._components`).

A strategy adds its own parameters without an estimator class
repeating the shared ones: its class lists them in ``parameters``
(name -> default) and ``constraints`` (name -> constraint list, which
may also narrow a shared parameter's), and an estimator class that
names the strategy in ``_strategy_class`` gets an ``__init__`` with
the shared parameters and the strategy's, keyword-only, that
scikit-learn's ``get_params`` reads like any other.
"""

import inspect
import math
import numbers

import torch

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training import _param_validation as p
from dislib_nn.training._adaptive import LR_SCALINGS
from dislib_nn.training._component_args import (PREFIXES,
                                                check_arguments,
                                                check_keywords,
                                                split_prefixed)
from dislib_nn.training._fit_params import fit_params
from dislib_nn.training._scoring import ScoringSpec, check_scoring
from dislib_nn.training.callbacks._named import (DEFAULTS, PREFIX,
                                                 check_callbacks,
                                                 name_callbacks)
from dislib_nn.training.strategies import _rounds
from dislib_nn.training.strategies._dealing import SHUFFLE_MODES

__all__ = ["ParamsMixin"]

_INT = numbers.Integral
_REAL = numbers.Real


class ParamsMixin:
    """Parameters of the epoch-averaging estimators (see the module)."""

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
        "sync_every": [p.Interval(_INT, 1, None), p.EpochFraction(),
                       p.Options("auto", "step"), p.Callable(
                           "a callable (epoch -> any of those but 'auto')")],
        "lr_scaling": [p.Options(*LR_SCALINGS)],
        "shuffle": [p.Options(*SHUFFLE_MODES)],
        "optimizer_state": [p.Options("keep", "reset", "average")],
        "outer_lr": [p.Interval(_REAL, 0, None, closed="neither")],
        "outer_momentum": [p.Interval(_REAL, 0, 1, closed="left")],
        "validation_fraction": [p.Interval(_REAL, 0, 1, closed="left")],
        "validation_data": [p.NoneValue(), p.PairOfArrays()],
        "scoring": [p.NoneValue(), ScoringSpec()],
        "early_stopping": [p.Boolean()],
        "patience": [p.Interval(_INT, 1, None)],
        "device": [p.DeviceSpec()],
        "random_state": [p.NoneValue(), p.RandomState()],
        "verbose": [p.Boolean(), p.Interval(_INT, 0, None)],
        "warm_start": [p.Boolean()],
        "balance": [p.Boolean(), p.Rates()],
        "checkpoint_dir": [p.NoneValue(), p.PathLike()],
        "on_failure": [p.Options("retry", "skip", "raise")],
        "max_retries": [p.Interval(_INT, 0, None)],
        "task_timeout": [p.NoneValue(),
                         p.Interval(_REAL, 0, None, closed="neither")],
        "grad_clip_norm": [p.NoneValue(),
                           p.Interval(_REAL, 0, None, closed="neither")],
        "grad_clip_value": [p.NoneValue(),
                            p.Interval(_REAL, 0, None, closed="neither")],
        "accumulate_grad_batches": [p.Interval(_INT, 1, None)],
        # After "device": fp16 is checked against the tasks' device.
        "precision": [p.Precision()],
        "merge_precision": [p.Options("fp32", "bf16")],
        "recompute_batchnorm": [p.Boolean(), p.Options("auto")],
        "output": [p.NoneValue(), p.Interval(_INT, 0, None), p.Text()],
        "loss_input": [p.Options("output", "all")],
        "callbacks": [p.NoneValue(), p.CallbackList()],
        "strategy": [p.NoneValue(), p.StrategySpec()],
        "outer_optimizer": [p.NoneValue(), p.Callable(
            "a torch.optim.Optimizer subclass or a callable returning "
            "one")],
    }

    def __init__(self, *, module=None, criterion=None,
                 optimizer=torch.optim.SGD, lr=0.01, lr_schedule=None,
                 n_epochs=10, batch_size=32, n_workers=None,
                 sync_every="auto", lr_scaling="auto", shuffle="global",
                 optimizer_state="keep", outer_lr=1.0,
                 outer_momentum=0.0, validation_fraction=0.0,
                 validation_data=None, scoring=None, early_stopping=False,
                 patience=5,
                 device="auto", random_state=None, verbose=0,
                 warm_start=False, balance=False, checkpoint_dir=None,
                 on_failure="retry", max_retries=2, task_timeout=None,
                 grad_clip_norm=None, grad_clip_value=None,
                 accumulate_grad_batches=1,
                 precision="fp32", callbacks=None, outer_optimizer=None,
                 merge_precision="fp32", recompute_batchnorm="auto",
                 output=None, loss_input="output", strategy=None,
                 **kwargs):
        self.module = module
        self.criterion = criterion
        self.optimizer = optimizer
        self.lr = lr
        self.lr_schedule = lr_schedule
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.n_workers = n_workers
        self.sync_every = sync_every
        self.lr_scaling = lr_scaling
        self.shuffle = shuffle
        self.optimizer_state = optimizer_state
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum
        self.validation_fraction = validation_fraction
        self.validation_data = validation_data
        self.scoring = scoring
        self.early_stopping = early_stopping
        self.patience = patience
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start
        self.balance = balance
        self.checkpoint_dir = checkpoint_dir
        self.on_failure = on_failure
        self.max_retries = max_retries
        self.task_timeout = task_timeout
        self.grad_clip_norm = grad_clip_norm
        self.grad_clip_value = grad_clip_value
        self.accumulate_grad_batches = accumulate_grad_batches
        self.precision = precision
        self.callbacks = callbacks
        self.outer_optimizer = outer_optimizer
        self.merge_precision = merge_precision
        self.recompute_batchnorm = recompute_batchnorm
        self.output = output
        self.loss_input = loss_input
        self.strategy = strategy
        # Component arguments (module__hidden=...) are parameters too,
        # stored verbatim like the others and checked at fit.
        self._extra_params = dict(kwargs)

    # ------------------------------------------------------------ params
    def get_params(self, deep=True):
        """Parameters, the prefixed component arguments included; with
        ``deep``, each callback's as ``callbacks__NAME__arg`` too."""
        params = super().get_params(deep=deep)
        if deep:
            params.update(self._callback_params())
        params.update(self._extra_params)
        return params

    def _callback_params(self):
        try:
            named = name_callbacks(self.callbacks, DEFAULTS,
                                   type(self).__name__)
            return {f"{PREFIX}__{name}__{k}": v for name, cb in named
                    for k, v in cb.get_params(deep=False).items()}
        except (InvalidParameterError, TypeError):
            return {}       # fit says what is wrong

    def set_params(self, **params):
        """Set parameters, prefixed component arguments included.

        An unknown name raises at once, with a "did you mean" hint, as
        scikit-learn's ``set_params`` does, and sets nothing (``kwargs``,
        the name ``__init__``'s signature gives its catch-all, is stored
        as ``__init__`` stores it). Values are stored without checking
        them, as ``__init__`` stores them: ``fit`` checks them.
        """
        names = self._get_param_names()
        check_keywords([key for key in params
                        if key not in names and key != "kwargs"], names,
                       f"{type(self).__name__}.set_params",
                       InvalidParameterError,
                       more_prefixes=(PREFIX, _rounds.PREFIX))
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
                       InvalidParameterError,
                       more_prefixes=(PREFIX, _rounds.PREFIX))
        # Before the constraint table: it names what does not fit the
        # estimator (a name, a callable), not only a str or a callable.
        check_scoring(self)
        p.validate(self._parameter_constraints,
                   self.get_params(deep=False), name)
        check_arguments(
            {"module": self.module, "criterion": self.criterion
             if self.criterion is not None
             else self._targets.default_criterion,
             "optimizer": self.optimizer, "lr_schedule": self.lr_schedule,
             "outer_optimizer": self.outer_optimizer},
            split_prefixed(self._prefixed_params()), name,
            InvalidParameterError)
        for key, value in self._prefixed_params().items():
            if isinstance(value, numbers.Real) and not isinstance(
                    value, numbers.Integral) and math.isnan(value):
                raise InvalidParameterError(
                    f"The {key!r} argument of {name} is NaN: a component "
                    f"built with it would train on NaN. Give a number.")
        if self.validation_fraction and self.validation_data is not None:
            raise InvalidParameterError(
                f"{name} takes validation_fraction or validation_data, not "
                f"both. Got validation_fraction="
                f"{self.validation_fraction!r} and validation_data.")
        if self.outer_optimizer is not None and (
                self.outer_lr != 1.0 or self.outer_momentum != 0.0):
            outer = getattr(self.outer_optimizer, "__qualname__",
                            self.outer_optimizer)
            raise InvalidParameterError(
                f"{name} takes outer_optimizer or outer_lr / "
                f"outer_momentum, not both: outer_lr and outer_momentum "
                f"are the outer step of outer_optimizer=None; give the "
                f"outer optimizer's own as outer_optimizer__lr and "
                f"outer_optimizer__momentum. Got outer_optimizer="
                f"{outer}, "
                f"outer_lr={self.outer_lr!r} and outer_momentum="
                f"{self.outer_momentum!r}.")
        if self.balance is not False and self.shuffle == "none":
            raise InvalidParameterError(
                f"{name} takes balance={self.balance!r} only with "
                f"shuffle='global' or 'local': with shuffle='none' each "
                f"worker keeps its own blocks. Got balance="
                f"{self.balance!r} and shuffle='none'.")
        if isinstance(self.balance, (list, tuple)) and (
                self.n_workers != len(self.balance)):
            raise InvalidParameterError(
                f"{name} takes balance as a list of rates with n_workers "
                f"of its length (one rate per worker). Got balance="
                f"{self.balance!r} and n_workers={self.n_workers!r}.")
        check_callbacks(self.callbacks, self._extra_params, name)
        self._check_strategy(name)

    def _check_strategy(self, name):
        """The strategy's own checks, and what ``strategy=`` does not
        combine with: routed ``strategy__`` arguments without it, the
        preset's own parameters away from their defaults."""
        routed = _rounds.routed(self._extra_params)
        preset = getattr(type(self), "_strategy_class", None)
        if self.strategy is None:
            if routed:
                raise InvalidParameterError(
                    f"{name} got "
                    f"{', '.join(_rounds.PREFIX + '__' + k for k in routed)}"
                    f" but strategy=None: strategy__<name>=value sets a "
                    f"parameter of the strategy given as strategy=.")
        elif preset is not None:
            for key, default in preset.parameters.items():
                if getattr(self, key) != default:
                    raise InvalidParameterError(
                        f"{name} with strategy={self.strategy!r} runs that "
                        f"strategy, which does not read {key}; leave it at "
                        f"its default {default!r}. Got {key}="
                        f"{getattr(self, key)!r}.")
        strategy = self._epoch_strategy_class()
        if strategy is not None:
            strategy.check_params(fit_params(self, strategy), name)
        if self.strategy is not None:
            _rounds.build_strategy(self.strategy, routed, name)

    def _epoch_strategy_class(self):
        """The class the epoch loop drives: the preset's, or the driver
        of the user-written ``strategy``."""
        if self.strategy is not None:
            return _rounds.RoundDriver
        return getattr(type(self), "_strategy_class", None)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        strategy = cls.__dict__.get("_strategy_class")
        if strategy is None or "__init__" in cls.__dict__:
            return
        cls._parameter_constraints = dict(cls._parameter_constraints,
                                          **strategy.constraints)
        if strategy.parameters:
            cls.__init__ = _init_with(ParamsMixin.__init__,
                                      strategy.parameters)


def _init_with(base_init, extra):
    """``base_init`` taking the keyword-only parameters ``extra`` (name
    -> default) too, with the signature scikit-learn reads."""
    def __init__(self, **kwargs):
        own = {name: kwargs.pop(name, default)
               for name, default in extra.items()}
        base_init(self, **kwargs)
        for name, value in own.items():
            setattr(self, name, value)

    signature = inspect.signature(base_init)
    params = list(signature.parameters.values())
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                               default=default)
             for name, default in extra.items()]
    __init__.__signature__ = signature.replace(
        parameters=params[:-1] + added + params[-1:])
    __init__.__doc__ = base_init.__doc__
    return __init__
