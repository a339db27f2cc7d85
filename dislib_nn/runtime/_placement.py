"""Where tasks run: :func:`placed`.

A fit trains replica ``j`` on the same node round after round, so that
its optimizer state, its blocks and its shard of a sharded merge stay
where they were made. The runtime that places tasks by where their
inputs are would get there by itself, except that a fit's first round
has no such inputs (every replica starts from one model, on one node),
and a placement made then sticks: on the dask backend two or three of
four nodes could end up training every replica. :func:`placed` names
the node instead, or, with ``of=P``, the ``node``-th of ``P`` replicas
spread over the nodes in contiguous blocks: with more replicas than
nodes, neighbours share a node, so that the first levels of the merge
tree (which pairs neighbours) merge within a node and one model per
node crosses the network.

* ``dask``: the task prefers the worker the placement names, by address
  (see :func:`node_index`); dask may still run it elsewhere when that
  worker is gone or busy (a loose restriction);
* ``local`` and ``sequential``: one machine, nothing to place;
* ``compss``: PyCOMPSs chooses a task's node from where its data is
  and gives a call no way to name one, so the block has no effect.
"""

import contextlib
import numbers
import threading
from typing import NamedTuple

from dislib_nn.exceptions import InvalidParameterError

__all__ = ["placed", "current", "node_index", "Placement"]

_state = threading.local()


class Placement(NamedTuple):
    """Where :func:`placed` asks the tasks of its block to run.

    Attributes
    ----------
    node : int
        The node's index, or with ``of`` the replica's.
    of : int or None
        The replicas spread over the nodes, or None.
    """

    node: int
    of: int = None


@contextlib.contextmanager
def placed(node, of=None):
    """Run the tasks called inside the block on the ``node``-th node of
    the cluster (``node`` modulo the nodes), where the backend places
    tasks (see the module's docstring). With ``of``: on the node of
    replica ``node`` of ``of`` spread over the nodes in contiguous
    blocks (:func:`node_index`). Blocks nest: the innermost holds; None
    places nothing.
    """
    _check_int("node", node, 0, "a node index, an int >= 0")
    _check_int("of", of, 1, "of=the number of replicas, an int >= 1")
    if of is not None and (node is None or node >= of):
        raise InvalidParameterError(
            f"runtime.placed() takes a replica index below of={of!r}; got "
            f"node={node!r}.")
    previous = current()
    _state.placement = None if node is None else Placement(
        int(node), None if of is None else int(of))
    try:
        yield
    finally:
        _state.placement = previous


def _check_int(name, value, low, wanted):
    """Raise for a ``value`` of argument ``name`` that is neither None nor
    an int >= ``low`` (``wanted`` says what it takes)."""
    if value is not None and (isinstance(value, bool) or
                              not isinstance(value, numbers.Integral) or
                              value < low):
        raise InvalidParameterError(
            f"runtime.placed() takes {wanted}, or None; got "
            f"{name}={value!r}.")


def current():
    """The :class:`Placement` :func:`placed` names now in this thread, or
    None."""
    return getattr(_state, "placement", None)


def node_index(placement, n_nodes):
    """The index, below ``n_nodes``, of the node ``placement`` names.

    Without ``of``: ``node`` modulo ``n_nodes``. With ``of`` replicas
    and more of them than nodes: replica ``node`` goes to node ``node *
    n_nodes // of``, so each node holds a run of neighbours (8 replicas
    on 4 nodes: 0 and 1 on the first, 2 and 3 on the second...); with
    no more replicas than nodes, replica ``j`` goes to node ``j``.
    """
    if placement.of is None or placement.of <= n_nodes:
        return placement.node % n_nodes
    return placement.node * n_nodes // placement.of
