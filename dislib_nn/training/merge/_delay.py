"""Merges applied one round late: the arithmetic of ``merge_delay=1``.

With a delay, a replica does not wait for its round's merge: it starts
the next round from its own state, and the merge's correction reaches it
one round later. Replica ``i`` ends round ``k`` at ``R_i(k)``; the merge
of that round is ``M(k)``; the replica starts round ``k + 2`` from

    R_i(k + 1) + (M(k) - R_i(k))

its own progress of round ``k + 1`` moved by how far round ``k``'s merge
was from where it stood. Averaged over the replicas (with the merge's
weights), the starts of every round are the latest merge: the mean
trajectory is the merged models', and each replica differs from it only
by one round of its own progress. The next round therefore does not
wait for the merge, which may run beside it where the runtime has room,
as Streaming DiLoCo's delayed outer updates do (on a worker with one
thread it runs after that worker's next training task: docs/benchmarks.md
measured no time saved there).

Pure arithmetic on state dicts, no runtime.
"""

import torch

from dislib_nn.training.merge._sums import is_finite

__all__ = ["delayed_start"]


def delayed_start(state, merged, replica, fallback):
    """Where a replica starts its next round under a one-round delay.

    Parameters
    ----------
    state : dict
        Its state dict after the round that just ended, ``R_i(k + 1)``.
    merged, replica : dict or None
        The merge of the round before, ``M(k)``, and the replica's own
        state when that round ended, ``R_i(k)``; None before the first
        merge of a fit (the replica then goes on from ``state``).
    fallback : dict
        The model to start from when ``state`` is not finite (a replica
        that diverged): the latest merge the master has.

    Integer and boolean entries (BatchNorm's ``num_batches_tracked``) are
    the replica's own; floating-point entries are corrected.
    """
    if not is_finite(state):
        return fallback
    if merged is None:
        return state
    out = {}
    for key, value in state.items():
        if torch.is_tensor(value) and value.is_floating_point():
            out[key] = value + (merged[key].to(value.dtype)
                                - replica[key].to(value.dtype))
        else:
            out[key] = value
    return out
