"""The asynchronous strategy's merge tasks, on its global model.

The global model is a :class:`~dislib_nn.training.merge._stale.GlobalModel`
that :func:`~dislib_nn.training.merge._stale.fold` changes in place.
:func:`submit_fold` folds one worker's update into it as a
``COMMUTATIVE`` argument: merges run one at a time, in whatever order
workers finish, and each returns the fresh snapshot its worker starts
from. With ``max_lag=0`` every worker starts the next round from the
model after all of this round's merges, so :func:`submit_fold_round`
folds the whole round by one task, in worker order (the same
floating-point sums whichever worker ends first): the replicas travel
to that task, instead of the global model from one worker's fold to the
next, and its one snapshot goes to every worker.
:func:`submit_freshest` picks, among snapshots, the one with the most
rows merged (``max_lag`` bounds), and :func:`submit_global_parts` reads
the model at the end of a fit or for a checkpoint.

A snapshot is three futures: state, averaged optimizer state (``{}``
when none is averaged) and its
:class:`~dislib_nn.training.merge._stale.SnapshotInfo`. Every fold also
returns a :class:`MergeReport`, which the master reads with the epoch's
scalars.
"""

from typing import NamedTuple

from dislib_nn.runtime import COLLECTION_IN, COMMUTATIVE, INOUT, Depth, \
    Type, task
from dislib_nn.training.merge import _stale

__all__ = ["MergeReport", "submit_fold", "submit_fold_round",
           "submit_freshest", "submit_freshest_state", "submit_global_parts"]

_COLLECTION = {Type: COLLECTION_IN, Depth: 1}


class MergeReport(NamedTuple):
    """One fold of a worker's update, as ``history_[i]["merges"]`` shows
    it (see :class:`~dislib_nn.training.merge._stale.Fold` for
    ``index``, ``staleness`` and ``weight``).

    Attributes
    ----------
    worker : int
    epoch : int
        The epoch the merge ends (counted from 1).
    index : int
    staleness : float
    weight : float
    """

    worker: int
    epoch: int
    index: int
    staleness: float
    weight: float


@task(returns=4, glob=COMMUTATIVE, priority=True)
def _fold(glob, start_state, start_info, trained_state, trained_optim,
          n_samples, stat, worker, epoch, rules, round_rows):
    """Fold one worker's update into the global model; its fresh
    snapshot (three values) and the merge's :class:`MergeReport`."""
    record = _fold_into(glob, start_state, start_info, trained_state,
                        trained_optim, n_samples, stat, worker, epoch,
                        rules, round_rows)
    return (*glob.snapshot(), record)


@task(returns=4, glob=INOUT, start_states=_COLLECTION,
      start_infos=_COLLECTION, trained_states=_COLLECTION,
      trained_optims=_COLLECTION, counts=_COLLECTION, stats=_COLLECTION,
      priority=True)
def _fold_round(glob, start_states, start_infos, trained_states,
                trained_optims, counts, stats, epoch, rules, round_rows):
    """``max_lag=0``: every worker's update of a round folded in worker
    order (the same sums as one :func:`_fold` after the other in that
    order), then the snapshot the next round starts from (three values)
    and the round's :class:`MergeReport` list."""
    reports = [_fold_into(glob, start_states[w], start_infos[w],
                          trained_states[w], trained_optims[w], counts[w],
                          stats[w], w, epoch, rules, round_rows)
               for w in range(len(trained_states))]
    return (*glob.snapshot(), reports)


def _fold_into(glob, start_state, start_info, trained_state, trained_optim,
               n_samples, stat, worker, epoch, rules, round_rows):
    """Fold the update in ``glob`` (in place); the merge's
    :class:`MergeReport`."""
    done = _stale.fold(glob, start_state, start_info.progress,
                       trained_state, n_samples, rules, trained_optim,
                       finite=stat.finite, round_rows=round_rows)
    return MergeReport(worker, epoch, done.index, done.staleness,
                       done.weight)


@task(returns=3, states=_COLLECTION, optims=_COLLECTION, infos=_COLLECTION)
def _freshest(states, optims, infos):
    """The snapshot with the most rows merged (first on ties)."""
    best = _most_merged(infos)
    return states[best], optims[best], infos[best]


@task(returns=1, states=_COLLECTION, infos=_COLLECTION)
def _freshest_state(states, infos):
    """The state of the snapshot with the most rows merged."""
    return states[_most_merged(infos)]


def _most_merged(infos):
    return max(range(len(infos)), key=lambda i: (infos[i].progress, -i))


@task(returns=4)
def _global_parts(glob):
    """The global state, its averaged optimizer state (``{}`` when none),
    its outer momentum buffer and its outer optimizer's state (None when
    none)."""
    return (glob.state, glob.averaged_optimizer_state(), glob.velocity,
            glob.outer)


def submit_fold(glob, start, trained_state, trained_optim, n_samples, stat,
                worker, epoch, rules, round_rows):
    """Fold worker ``worker``'s update into ``glob``, in whatever order
    the workers' updates arrive.

    ``start`` is the snapshot the worker's round started from,
    ``trained_state`` / ``trained_optim`` what it trained (the optimizer
    state only when states are averaged, else None), ``n_samples`` and
    ``stat`` its rows and :class:`~._report.TrainStats`, ``epoch`` the
    epoch the merge ends (counted from 1), ``round_rows`` the round's
    rows when rounds are shares of an epoch (else None).

    Returns
    -------
    snapshot, report
        The fresh snapshot (three futures) and the future of the
        merge's :class:`MergeReport`.
    """
    *snapshot, report = _fold(glob, start[0], start[2], trained_state,
                              trained_optim, n_samples, stat, worker, epoch,
                              rules, round_rows)
    return tuple(snapshot), report


def submit_fold_round(glob, starts, trained_states, trained_optims, counts,
                      stats, epoch, rules, round_rows):
    """``max_lag=0``: fold a whole round into ``glob`` by one task, in
    worker order; the arguments are :func:`submit_fold`'s, one entry per
    worker (``trained_optims`` None when optimizer states are not
    averaged).

    Returns
    -------
    snapshot, reports
        The snapshot the next round starts from (three futures) and the
        future of the round's list of :class:`MergeReport`.
    """
    n = len(trained_states)
    # Collections hold no None: a placeholder the folds ignore.
    optims = [{}] * n if trained_optims is None else list(trained_optims)
    *snapshot, reports = _fold_round(
        glob, [s[0] for s in starts], [s[2] for s in starts],
        list(trained_states), optims, list(counts), list(stats), epoch,
        rules, round_rows)
    return tuple(snapshot), reports


def submit_freshest(snapshots):
    """The snapshot, among ``snapshots``, with the most rows merged."""
    return tuple(_freshest([s[0] for s in snapshots],
                           [s[1] for s in snapshots],
                           [s[2] for s in snapshots]))


def submit_freshest_state(snapshots):
    """The state of the snapshot with the most rows merged."""
    return _freshest_state([s[0] for s in snapshots],
                           [s[2] for s in snapshots])


def submit_global_parts(glob):
    """Futures of ``glob``'s state, averaged optimizer state, velocity
    and outer optimizer state, once the merges submitted so far ran."""
    return _global_parts(glob)
