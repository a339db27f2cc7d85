"""The estimator's parameters as a fit runs them: :class:`FitParams`.

The estimator stores its parameters verbatim (scikit-learn's rule);
what the strategy, the fit's clock and the tasks' submitters read of
them is this record, built once per fit after the plan
(:mod:`._adaptive`) has turned the ``"auto"`` values into what the fit
runs. A strategy's own parameters (its class's ``parameters``) are a
record of their own, :attr:`FitParams.own`, with one field per name.

To read a new parameter in a strategy or in the clock, add it here as
a field; :func:`fit_params` fills every field from the estimator's
attribute of the same name.
"""

from collections import namedtuple
from typing import NamedTuple

__all__ = ["FitParams", "fit_params", "own_params"]


class FitParams(NamedTuple):
    """What a fit's strategy and clock read of the estimator's parameters.

    Each field holds the estimator's parameter of the same name (see the
    estimators' docstrings), except where said.

    Attributes
    ----------
    batch_size : int
    accumulate_grad_batches : int
    n_epochs : int
    sync_every : int, float, "step" or callable
        What the fit runs: ``"auto"`` resolved by the plan.
    shuffle : str
    balance : bool, list or tuple
    device : str or torch.device
    precision : str
    optimizer_state : str
    on_failure : str
    max_retries : int
    grad_clip_norm : float or None
    grad_clip_value : float or None
    merge_precision : str
    outer_optimizer : callable or None
    outer_lr : float
    outer_momentum : float
    strategy : type, Strategy or None
        A user-written strategy (``strategy=``), or None for the
        estimator's own.
    own : tuple
        The strategy's own parameters, a named tuple with one field per
        name of its class's ``parameters`` (``merge``, ``merge_delay``;
        ``max_lag``, ``staleness_exponent``...), their ``"auto"`` values
        resolved by the plan in a fit (:func:`own_params`).
    """

    batch_size: int
    accumulate_grad_batches: int
    n_epochs: int
    sync_every: object
    shuffle: str
    balance: object
    device: object
    precision: str
    optimizer_state: str
    on_failure: str
    max_retries: int
    grad_clip_norm: object
    grad_clip_value: object
    merge_precision: str
    outer_optimizer: object
    outer_lr: float
    outer_momentum: float
    strategy: object
    own: tuple


#: The record type of each strategy class's own parameters.
_OWN_TYPES = {}


def own_params(strategy_class, source):
    """The own parameters of ``strategy_class`` (a named tuple of the
    names in its ``parameters``, in their order), each read from the
    attribute of the same name of ``source`` (an estimator)."""
    names = tuple(strategy_class.parameters)
    kind = _OWN_TYPES.get((strategy_class, names))
    if kind is None:
        kind = namedtuple(f"{strategy_class.__name__}Params", names)
        _OWN_TYPES[(strategy_class, names)] = kind
    return kind(*(getattr(source, name) for name in names))


def fit_params(estimator, strategy_class):
    """The :class:`FitParams` of ``estimator`` as it stands (``"auto"``
    values not resolved: the fit replaces them with the plan's choices),
    with the own parameters of ``strategy_class``."""
    fields = {name: getattr(estimator, name)
              for name in FitParams._fields if name != "own"}
    return FitParams(**fields, own=own_params(strategy_class, estimator))
