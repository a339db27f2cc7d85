"""The asynchronous strategy's merge tasks, on its global model.

The global model is a :class:`~dislib_nn.training.merge._stale.GlobalModel`
that :func:`~dislib_nn.training.merge._stale.fold` changes in place.
:func:`submit_fold` folds one worker's update into it: as a
``COMMUTATIVE`` argument (merges run one at a time, in whatever order
workers finish, and each returns the fresh snapshot its worker starts
from), or ``in_order`` as an ``INOUT`` one (in submission order, the
same floating-point sums whichever worker ends first; with
``max_lag=0``, where :func:`submit_round_start` then reads the model
once the round's merges are done). :func:`submit_freshest` picks, among
snapshots, the one with the most rows merged (``max_lag`` bounds), and
:func:`submit_global_parts` reads the model at the end of a fit or for
a checkpoint.

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

__all__ = ["MergeReport", "submit_fold", "submit_round_start",
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


@task(returns=1, glob=INOUT, priority=True)
def _fold_in_order(glob, start_state, start_info, trained_state,
                   trained_optim, n_samples, stat, worker, epoch, rules,
                   round_rows):
    """:func:`_fold` without the snapshot, in submission order; the
    merge's :class:`MergeReport`."""
    return _fold_into(glob, start_state, start_info, trained_state,
                      trained_optim, n_samples, stat, worker, epoch, rules,
                      round_rows)


def _fold_into(glob, start_state, start_info, trained_state, trained_optim,
               n_samples, stat, worker, epoch, rules, round_rows):
    """Fold the update in ``glob`` (in place); the merge's
    :class:`MergeReport`."""
    done = _stale.fold(glob, start_state, start_info.progress,
                       trained_state, n_samples, rules, trained_optim,
                       finite=stat.finite, round_rows=round_rows)
    return MergeReport(worker, epoch, done.index, done.staleness,
                       done.weight)


@task(returns=3, priority=True)
def _round_start(glob):
    """The snapshot after a round's merges (this task follows them all)."""
    return glob.snapshot()


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
                worker, epoch, rules, round_rows, in_order):
    """Fold worker ``worker``'s update into ``glob``.

    ``start`` is the snapshot the worker's round started from,
    ``trained_state`` / ``trained_optim`` what it trained (the optimizer
    state only when states are averaged, else None), ``n_samples`` and
    ``stat`` its rows and :class:`~._report.TrainStats`, ``epoch`` the
    epoch the merge ends (counted from 1), ``round_rows`` the round's
    rows when rounds are shares of an epoch (else None).

    Returns
    -------
    snapshot, record
        The fresh snapshot (three futures; three None ``in_order``) and
        the future of the merge's record.
    """
    args = (glob, start[0], start[2], trained_state, trained_optim,
            n_samples, stat, worker, epoch, rules, round_rows)
    if in_order:
        return (None, None, None), _fold_in_order(*args)
    *snapshot, record = _fold(*args)
    return tuple(snapshot), record


def submit_round_start(glob):
    """The snapshot of ``glob`` once the merges submitted so far ran."""
    return tuple(_round_start(glob))


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
