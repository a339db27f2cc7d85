"""Where an asynchronous worker starts a round under ``merge_delay=1``.

Without the delay a worker starts round ``r`` from the global model its
merge of round ``r - 1`` returned, so it waits for that merge (and for
the merges queued before it on the global model). With the delay it
starts from its own replica, corrected by its merge of the round before
(:func:`~dislib_nn.training.merge._delay.delayed_start`)::

    start_w(r) = R_w(r - 1) + (M_w(r - 2) - R_w(r - 2))

``M_w(r - 2)`` is the global model right after worker ``w``'s merge of
round ``r - 2`` (``max_lag=None``), or after all of round ``r - 2``'s
merges (``max_lag=0``); round 1 starts from ``R_w(0)`` itself.

The start's progress, which its merge's staleness is measured from, is
``M_w(r - 2)``'s plus a whole round's rows: the progress the start
would have had without the delay, had the others merged at the same
pace. The delay itself is thus not staleness: with ``max_lag=0`` every
merge has ``tau = 0`` and the global model is the synchronous
estimators' ``merge_delay=1`` model; with ``max_lag=None`` the discount
counts what the others merged beyond that round.
"""

from dislib_nn.runtime import task
from dislib_nn.training.merge import _delay, _stale

__all__ = ["submit_delayed_round_start"]


@task(returns=2, priority=True)
def _delayed_round_start(state, merged, replica, fallback, merged_info,
                         round_rows):
    """The corrected start and its
    :class:`~dislib_nn.training.merge._stale.SnapshotInfo`."""
    start = _delay.delayed_start(state, merged, replica, fallback)
    return start, _stale.SnapshotInfo(merged_info.progress + round_rows)


def submit_delayed_round_start(state, merged, replica, fallback,
                               merged_info, round_rows):
    """Futures of a worker's next start and its progress info.

    ``state`` is the worker's replica after the round that just ended
    (``R_w(r - 1)``), ``merged`` / ``merged_info`` the global snapshot
    of the round before and ``replica`` the worker's replica then
    (``M_w(r - 2)``, ``R_w(r - 2)``; ``merged`` and ``replica`` None
    for round 1, with ``merged_info`` the fit's first start's).
    ``fallback`` is where a replica that diverged starts; ``round_rows``
    the rows of round ``r - 1`` (all workers').
    """
    return _delayed_round_start(state, merged, replica, fallback,
                                merged_info, round_rows)
