"""The outer step: how the global model moves given the replicas' update.

Pure functions on state dicts (no runtime imports), used by the
synchronous merge tasks (:mod:`dislib_nn.training.tasks._reduce`) and
the asynchronous folds (:mod:`._stale`). Write ``previous`` for the
global model before a round and ``averaged`` for the replicas' mean
after it; ``previous - averaged`` is the round's *pseudo-gradient*.

Two forms:

- :func:`momentum_step`, the server step of FedAvgM that
  ``outer_lr`` / ``outer_momentum`` describe (``outer_optimizer=None``):
  ``velocity = momentum * velocity + (averaged - previous)`` and
  ``previous + outer_lr * velocity``; ``1, 0`` is plain averaging.
- :func:`optimizer_step`, any ``torch.optim`` optimizer on the global
  parameters, with the pseudo-gradient as their gradient (DiLoCo: SGD
  with Nesterov momentum, lr 0.7, momentum 0.9). Its ``state_dict``
  travels between rounds, fits, checkpoints and saved files as plain
  data (CPU tensors and numbers).

Only the module's parameters (``keys``) take an outer step; buffers such
as BatchNorm's running statistics take the plain average, which an
extrapolating step could push out of their domain (a negative variance).

The asynchronous strategy folds one replica at a time; for it,
:func:`momentum_share` spreads FedAvgM's momentum over a round's merges,
and :func:`delayed_optimizer_step` is the delayed outer step of Async
Local-SGD (see :mod:`._stale`).
"""

import collections
import copy

import torch

__all__ = ["momentum_step", "optimizer_step", "outer_lr_of",
           "momentum_share", "delayed_optimizer_step"]


def momentum_step(previous, averaged, velocity, lr, momentum, keys):
    """The server step of FedAvgM on the averaged update.

    With ``delta = averaged - previous`` (the negative pseudo-gradient),
    ``velocity = momentum * velocity + delta`` and the new global state is
    ``previous + lr * velocity``. ``lr=1, momentum=0`` is plain averaging:
    the same as :func:`optimizer_step` with ``torch.optim.SGD(lr=lr,
    momentum=momentum)``.

    Parameters
    ----------
    previous, averaged : mapping of str to tensor
        The global state before the round, and the replicas' mean.
    velocity : mapping of str to tensor or None
        The momentum buffer of the round before (None in the first).
    lr, momentum : float
    keys : iterable of str
        The module's parameters (the entries that take the step).

    Returns
    -------
    state : collections.OrderedDict
    velocity : dict or None
        None when ``momentum`` is 0.
    """
    state = collections.OrderedDict(averaged)
    new_velocity = {}
    for key in _float_keys(previous, keys):
        old = previous[key]
        delta = averaged[key].to(old.dtype) - old
        step = delta if velocity is None or key not in velocity \
            else momentum * velocity[key] + delta
        state[key] = old + lr * step
        new_velocity[key] = step
    return state, (new_velocity if momentum else None)


def optimizer_step(previous, averaged, optim_state, build, keys):
    """A torch optimizer's step on the global parameters.

    Each parameter in ``keys`` starts at ``previous[key]``, gets the
    gradient ``previous[key] - averaged[key]`` and the optimizer built by
    ``build(parameters)`` (its state loaded from ``optim_state``) steps
    once. Other entries take ``averaged``'s value.

    Returns
    -------
    state : collections.OrderedDict
    optim_state : dict
        The optimizer's ``state_dict`` after the step (CPU tensors).
    """
    keys = _float_keys(previous, keys)
    grads = {k: previous[k] - averaged[k].to(previous[k].dtype)
             for k in keys}
    params, optim_state = _step(build, {k: previous[k] for k in keys},
                                grads, optim_state)
    state = collections.OrderedDict(averaged)
    state.update(params)
    return state, optim_state


def outer_lr_of(build):
    """The learning rate of the optimizer ``build`` makes (its first
    parameter group's), read from one built on a dummy parameter."""
    optimizer = build([torch.zeros(1, requires_grad=True)])
    return float(optimizer.param_groups[0]["lr"])


def momentum_share(weighted_delta, share, momentum, velocity):
    """One merge's FedAvgM step in the asynchronous strategy.

    ``weighted_delta`` is the merge's weighted update; ``share`` its
    worker's share of the rows: each merge adds its share of the last
    round's momentum, ``weighted_delta + share * momentum * velocity``,
    so that a round's merges add up to :func:`momentum_step`'s step
    (``velocity`` None: no momentum yet).
    """
    if not momentum or velocity is None:
        return weighted_delta
    return weighted_delta + share * momentum * velocity


def delayed_optimizer_step(current, pending, outer_lr, optim_state,
                           build):
    """The end of a round of the delayed outer step (Async Local-SGD).

    During a round each merge moved the global parameters by
    ``outer_lr`` times its weighted update, and ``pending`` summed those
    updates. Here the round's parameters at its start are recovered
    (``current - outer_lr * pending``) and the optimizer steps from them
    on the round's pseudo-gradient, ``-pending``: the interim plain steps
    are replaced by the optimizer's one step, whose momentum thus takes
    the round's updates once per round, not once per (stale) merge.

    With SGD and Nesterov momentum this is the delayed Nesterov update
    of Liu et al. (arXiv 2401.09135); with every worker starting its
    round from the model of the previous round (``max_lag=0``) it is the
    synchronous :func:`optimizer_step`.

    Parameters
    ----------
    current, pending : mapping of str to tensor
        The parameters now, and the round's summed weighted updates
        (same keys).
    outer_lr : float
        The rate of the interim steps (the optimizer's).
    optim_state : dict or None
    build : callable

    Returns
    -------
    params : dict
    optim_state : dict
    """
    start = {k: current[k] - outer_lr * pending[k].to(current[k].dtype)
             for k in pending}
    grads = {k: -pending[k] for k in pending}
    return _step(build, start, grads, optim_state)


# ----------------------------------------------------------------- helpers
def _float_keys(state, keys):
    return [k for k in keys if torch.is_tensor(state.get(k))
            and state[k].is_floating_point()]


def _step(build, params, grads, optim_state):
    """One step of ``build``'s optimizer on copies of ``params`` with
    gradients ``grads``; the new values and the optimizer's state."""
    keys = list(params)
    leaves = []
    for key in keys:
        leaf = params[key].detach().clone().requires_grad_(True)
        leaf.grad = grads[key].detach().to(leaf.dtype).clone()
        leaves.append(leaf)
    optimizer = build(leaves)
    if optim_state:
        # The hyperparameters are the estimator's (outer_optimizer__*),
        # the per-parameter state (momentum buffers) the carried one.
        fresh = [{k: v for k, v in group.items() if k != "params"}
                 for group in optimizer.param_groups]
        optimizer.load_state_dict(copy.deepcopy(optim_state))
        for group, values in zip(optimizer.param_groups, fresh):
            group.update(values)
    optimizer.step()
    new = {key: leaf.detach() for key, leaf in zip(keys, leaves)}
    return new, _plain(optimizer.state_dict())


def _plain(obj):
    """Detached CPU copies of the tensors in ``obj``."""
    if torch.is_tensor(obj):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_plain(v) for v in obj)
    return obj
