"""Copies of a merged epoch's parts, for the master to fetch.

A checkpoint and early stopping's best model need values of futures that
later tasks still read. Waiting on a future ends it (as
``compss_wait_on`` does), so the master fetches a copy a small task
makes: :func:`snapshot` of a merged epoch's parts (the model and what
the strategy carries), :func:`fetch_copy` of one value.
"""

import torch

from dislib_nn import runtime
from dislib_nn.runtime import COLLECTION_IN, Depth, Type, task

__all__ = ["snapshot", "fetch_copy"]

_COLLECTION = {Type: COLLECTION_IN, Depth: 1}
#: A carried value may be a list of futures (one per worker, say).
_CARRIED = {Type: COLLECTION_IN, Depth: 2}


@task(returns=1, optims=_COLLECTION, values=_CARRIED)
def _snapshot(model, optims, has_optims, names, values):
    """One copy of a merged epoch's parts, for the master to fetch."""
    return {"model": model,
            "optimizer_states": list(optims) if has_optims else None,
            "carried": dict(zip(names, values))}


def snapshot(model, carry):
    """Submit the copy of a merged epoch's parts; its future.

    ``carry`` is the strategy's :class:`Carry` (futures or values).
    Collections hold no None and are never empty, so an absent list travels
    as ``[model]`` with ``has_optims=False``, and no carried state as
    ``[model]`` with no names.
    """
    optims = carry.optimizer_states
    has_optims = optims is not None
    names = sorted(carry.state)
    # A dict may be an object that tasks updated in place (INOUT,
    # COMMUTATIVE): as an argument of its own a task reads its latest
    # version, where PyCOMPSs gives a collection element the master's
    # copy.
    given = [carry.state[k] for k in names]
    values = [_copied(v) if isinstance(v, dict) else v for v in given]
    parts = _snapshot(model, list(optims) if has_optims else [model],
                      has_optims, names, values or [model])
    for copy, value in zip(values, given):
        if copy is not value:
            runtime.delete_object(copy)
    return parts


@task(returns=1)
def _copied(value):
    """A copy of ``value`` for the master to fetch."""
    return value


def fetch_copy(value):
    """The value of a future (or plain value), fetched through a copy
    task: waiting on a future ends it (as ``compss_wait_on`` does), and
    the future itself may still be the input of later tasks or the
    model a fit keeps."""
    if isinstance(value, dict) and all(torch.is_tensor(v)
                                       for v in value.values()):
        return value
    return runtime.wait_on(_copied(value))
