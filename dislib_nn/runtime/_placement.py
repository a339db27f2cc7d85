"""Where tasks run: :func:`placed`.

A fit trains replica ``j`` on the same node round after round, so that
its optimizer state, its blocks and its shard of a sharded merge stay
where they were made. The runtime that places tasks by where their
inputs are would get there by itself, except that a fit's first round
has no such inputs (every replica starts from one model, on one node),
and a placement made then sticks: on the dask backend two or three of
four nodes could end up training every replica. :func:`placed` names
the node instead:

* ``dask``: the task prefers the ``node``-th of the cluster's workers
  (by address, ``node`` modulo their number); dask may still run it
  elsewhere when that worker is gone or busy (a loose restriction);
* ``local`` and ``sequential``: one machine, nothing to place;
* ``compss``: PyCOMPSs chooses a task's node from where its data is
  and gives a call no way to name one, so the block has no effect.
"""

import contextlib
import numbers
import threading

from dislib_nn.exceptions import InvalidParameterError

__all__ = ["placed", "current"]

_state = threading.local()


@contextlib.contextmanager
def placed(node):
    """Run the tasks called inside the block on the ``node``-th node of
    the cluster, where the backend places tasks (see the module's
    docstring). Blocks nest: the innermost holds; None places nothing.
    """
    if node is not None and (isinstance(node, bool) or
                             not isinstance(node, numbers.Integral) or
                             node < 0):
        raise InvalidParameterError(
            f"runtime.placed() takes a node index, an int >= 0, or None; "
            f"got node={node!r}.")
    previous = current()
    _state.node = None if node is None else int(node)
    try:
        yield
    finally:
        _state.node = previous


def current():
    """The node :func:`placed` names now in this thread, or None."""
    return getattr(_state, "node", None)
