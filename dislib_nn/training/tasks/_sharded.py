"""The tasks of ``merge="sharded"``: each worker merges one shard.

For ``P`` replicas, one round's merge is ``2P`` tasks and no root:

* ``_split_replica`` (one per replica, where it was trained): cuts the
  replica into ``P`` shards (:mod:`~dislib_nn.training.merge._shards`)
  and hands out the ``P - 1`` that other workers merge;
* ``_merge_shard`` (one per shard): reads its own replica whole (so the
  scheduler, which places a task where most of its input bytes are,
  runs it on the worker that trained that replica) and shard ``j`` of
  every other replica, and returns shard ``j`` of the merged model.

The next round's training task ``i`` reads every merged shard: ``P - 1``
from the other workers. Per worker and round, ``(P - 1) / P`` of a
model goes out and as much comes in twice, on every link at once,
where the tree sends the merged model out of its root ``P - 1`` times.

The fallback when every replica diverged is the shard of the model the
round started from. When that model is held whole (a fit's first round,
after an outer step), ``_split_replica`` also cuts it, from the copy
the worker read to train, so that shard too is made where it is merged.
The whole model (for checkpoints, the fitted model, a callback that may
keep it) is one ``_join`` task, submitted only when something reads it.

With ``outer_lr`` / ``outer_momentum`` (FedAvgM's momentum step, element
by element) each ``_merge_shard_stepped`` also takes the step on its
shard, with its shard of the momentum buffer, so the round stays
rootless (:func:`submit_sharded_merge_stepped`). An ``outer_optimizer``
(any ``torch.optim`` optimizer) steps the joined model.
"""

from dislib_nn.runtime import COLLECTION_IN, COLLECTION_OUT, Depth, Type, \
    task
from dislib_nn.training.merge import _shards

__all__ = ["ShardedModel", "submit_sharded_merge",
           "submit_sharded_merge_stepped", "submit_join"]

_COLLECTION = {Type: COLLECTION_IN, Depth: 1}


class ShardedModel(tuple):
    """A model held as the futures of its shards, shard ``j`` at ``j``
    (a tuple, so that releasing it releases every shard)."""

    __slots__ = ()


@task(returns=0, pieces={Type: COLLECTION_OUT, Depth: 1}, priority=True)
def _split_replica(state, owner, start, pieces):
    """``pieces``: every shard of ``state`` but ``owner``'s, in order,
    then, when ``start`` (the model the round started from, whole) is
    given, its shard ``owner``."""
    n = len(pieces) + (1 if start is None else 0)
    others = [j for j in range(n) if j != owner]
    for k, j in enumerate(others):
        pieces[k] = _shards.piece(state, j, n)
    if start is not None:
        pieces[-1] = _shards.piece(start, owner, n)


@task(returns=1, pieces=_COLLECTION, counts=_COLLECTION,
      stats=_COLLECTION, priority=True)
def _merge_shard(own, index, pieces, counts, stats, previous):
    """Shard ``index`` of the merged model: ``own`` is replica
    ``index`` whole, ``pieces`` shard ``index`` of the others in replica
    order; ``counts`` and ``stats`` are every replica's; ``previous`` is
    the round's starting model's shard ``index``."""
    return _merged_piece(own, index, pieces, counts, stats, previous)


@task(returns=2, pieces=_COLLECTION, counts=_COLLECTION,
      stats=_COLLECTION, priority=True)
def _merge_shard_stepped(own, index, pieces, counts, stats, previous,
                         velocity, step):
    """:func:`_merge_shard`, then FedAvgM's step on the merged shard
    from ``previous`` with ``velocity`` (shard ``index`` of the momentum
    buffer, the whole buffer in a fit's first round, or None): the
    stepped shard and shard ``index`` of the new buffer (None when
    ``step.momentum`` is 0). ``step`` is an ``OuterStep``."""
    merged = _merged_piece(own, index, pieces, counts, stats, previous)
    return _shards.momentum_step_piece(previous, merged, velocity, step.lr,
                                       step.momentum, step.keys)


def _merged_piece(own, index, pieces, counts, stats, previous):
    n = len(pieces) + 1
    mine = _shards.piece(own, index, n)
    ordered = list(pieces[:index]) + [mine] + list(pieces[index:])
    return _shards.merge_pieces(ordered, counts,
                                [s.finite for s in stats], previous)


@task(returns=1, shards=_COLLECTION, priority=True)
def _join(shards):
    """The whole state dict of a model held as shards."""
    return _shards.join(shards)


def submit_join(model):
    """A future of the whole state dict of ``model`` (a
    :class:`ShardedModel`)."""
    return _join(list(model))


def submit_sharded_merge(replicas, counts, stats, start, lifetimes):
    """Submit one round's sharded merge; wait for nothing.

    Parameters
    ----------
    replicas : list
        Futures of the replicas' state dicts, one per worker (two or
        more).
    counts, stats : list
        Their merge weights and :class:`TrainStats` (futures or values).
    start : ShardedModel or future
        The model the round started from (the merge's fallback when
        every replica diverged): as shards, or whole.
    lifetimes : Lifetimes
        Releases the pieces once the merges are submitted.

    Returns
    -------
    ShardedModel
        The merged model's shards, shard ``j`` merged where replica
        ``j`` was trained.
    """
    merged = []
    with _split(replicas, start, lifetimes) as cut:
        for j, replica in enumerate(replicas):
            merged.append(_merge_shard(replica, j, cut.others(j), counts,
                                       stats, cut.previous[j]))
    return ShardedModel(merged)


def submit_sharded_merge_stepped(replicas, counts, stats, start, lifetimes,
                                 step, velocity):
    """:func:`submit_sharded_merge` with FedAvgM's step on every shard.

    ``step`` is the ``OuterStep`` (``step.optimizer`` False);
    ``velocity`` the momentum buffer of the round before: a
    :class:`ShardedModel` of its shards, the whole buffer (a future or a
    value: a fit's first round, each shard's task cuts its own), or
    None. Returns the new model's shards and the new buffer's, a
    :class:`ShardedModel` (of futures of None when ``step.momentum`` is
    0: release them).
    """
    n = len(replicas)
    parts = list(velocity) if isinstance(velocity, ShardedModel) \
        else [velocity] * n
    merged, velocities = [], []
    with _split(replicas, start, lifetimes) as cut:
        for j, replica in enumerate(replicas):
            shard, shard_velocity = _merge_shard_stepped(
                replica, j, cut.others(j), counts, stats, cut.previous[j],
                parts[j], step)
            merged.append(shard)
            velocities.append(shard_velocity)
    return ShardedModel(merged), ShardedModel(velocities)


class _split:
    """Submits every replica's :func:`_split_replica` (and, when the
    round started from a whole model, its shards); on exit, once the
    merges that read them are submitted, releases the pieces."""

    def __init__(self, replicas, start, lifetimes):
        n = len(replicas)
        self.whole = not isinstance(start, ShardedModel)
        self.lifetimes = lifetimes
        self.sent, self.previous = [], [] if self.whole else list(start)
        for i, replica in enumerate(replicas):
            pieces = [object() for _ in range(n - 1 + self.whole)]
            _split_replica(replica, i, start if self.whole else None,
                           pieces)
            if self.whole:
                self.previous.append(pieces.pop())
            self.sent.append(pieces)

    def others(self, j):
        """Shard ``j`` of every replica but ``j``, in replica order."""
        # Shard j of replica i sits at i's list, j - 1 past its own.
        return [self.sent[i][j - (j > i)] for i in range(len(self.sent))
                if i != j]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lifetimes.release(self.sent)
        if self.whole:
            self.lifetimes.release(self.previous)
        return False
