"""A state dict cut into shards, each merged on its own node.

With ``merge="sharded"`` the replicas are not summed up a tree whose
root then sends the merged model to every worker: every floating-point
tensor is cut, flattened, into ``n`` contiguous slices of (nearly)
equal length, and shard ``j`` holds slice ``j`` of every tensor. Shard
``j`` of the merged model is the merge of shard ``j`` of every replica,
so each of the ``n`` merges reads ``1/n`` of every replica, and each
worker's next round reads ``n - 1`` merged shards from the others: the
reduce-scatter and all-gather of a ring all-reduce, as tasks.

The arithmetic is :mod:`._sums`', element by element, in the order of
the tree's pairs (:func:`merge_pieces`), so a model merged in shards is
bit-identical to the same model merged by the tree. FedAvgM's momentum
step is element by element too, so each shard takes it on its own
(:func:`momentum_step_piece`), its momentum buffer cut like the model. Entries that are
not averaged (integer and boolean tensors, plain numbers, strings) are
not cut: shard 0 carries them whole.

Pure functions (no runtime imports).
"""

import collections
from typing import NamedTuple

import torch

from dislib_nn.training.merge import _outer, _sums

__all__ = ["Shard", "split", "piece", "join", "model_from",
           "merge_pieces", "momentum_step_piece"]


class Shard(NamedTuple):
    """One of the ``n_shards`` shards of a state dict.

    Attributes
    ----------
    index : int
        Which shard (0-based).
    n_shards : int
        How many shards the state dict was cut into.
    entries : collections.OrderedDict
        For each floating-point tensor entry, slice ``index`` of its
        flattened values (a copy, not a view: a view would pickle its
        whole tensor); shard 0 also holds every entry that is not cut.
    layout : tuple of (str, tuple or None)
        Every key of the state dict in order, with the shape of the
        tensor it was cut from, or None for an entry shard 0 holds whole.
    """

    index: int
    n_shards: int
    entries: collections.OrderedDict
    layout: tuple


def split(state, n_shards):
    """``state`` cut into ``n_shards`` :class:`Shard` records."""
    return [piece(state, j, n_shards) for j in range(n_shards)]


def piece(state, index, n_shards):
    """Shard ``index`` of ``state`` (what :func:`split` returns at
    ``index``, without building the others)."""
    if not 0 <= index < n_shards:
        raise ValueError(f"shard index {index} is out of range for "
                         f"{n_shards} shards.")
    entries = collections.OrderedDict()
    layout = []
    for key, value in state.items():
        if _is_cut(value):
            flat = value.detach().reshape(-1)
            start, stop = _bounds(flat.numel(), index, n_shards)
            entries[key] = flat[start:stop].clone()
            layout.append((key, tuple(value.shape)))
        else:
            if index == 0:
                entries[key] = value
            layout.append((key, None))
    return Shard(index, n_shards, entries, tuple(layout))


def join(shards):
    """The state dict that ``shards`` (all of one model, any order) were
    cut from."""
    shards = sorted(shards, key=lambda s: s.index)
    n = shards[0].n_shards if shards else 0
    if [s.index for s in shards] != list(range(n)) or any(
            s.n_shards != n for s in shards):
        raise ValueError(
            f"a model needs each of its shards once; got shards "
            f"{[(s.index, s.n_shards) for s in shards]} "
            f"(index, n_shards).")
    state = collections.OrderedDict()
    for key, shape in shards[0].layout:
        if shape is None:
            state[key] = shards[0].entries[key]
        else:
            state[key] = torch.cat(
                [s.entries[key] for s in shards]).reshape(shape)
    return state


def model_from(parts):
    """The state dict a training task starts from: ``parts`` holds
    either one whole state dict or every :class:`Shard` of one."""
    if len(parts) == 1 and not isinstance(parts[0], Shard):
        return parts[0]
    return join(parts)


def merge_pieces(pieces, weights, finite, previous):
    """Shard ``j`` of the merged model from shard ``j`` of every replica.

    ``pieces``, ``weights`` and ``finite`` hold one entry per replica,
    in replica order; ``previous`` is shard ``j`` of the model the
    replicas started from, returned when none is finite. The replicas
    are paired as :func:`._sums.tree_reduce` pairs them in the tree of
    merge tasks, so every element is summed in the same order.

    Returns
    -------
    Shard
    """
    first = pieces[0]
    sums = [_sums.weighted(p.entries, w) if ok
            else _sums.WeightedSum(collections.OrderedDict())
            for p, w, ok in zip(pieces, weights, finite)]
    total = _sums.tree_reduce(sums, lambda a, b, root: _sums.combine(a, b))
    if not total.entries:
        return previous
    return first._replace(entries=_sums.mean(total, like=first.entries))


def momentum_step_piece(previous, merged, velocity, lr, momentum, keys):
    """FedAvgM's step (:func:`._outer.momentum_step`) on shard ``j``.

    ``previous`` and ``merged`` are shard ``j`` of the global model
    before the round and of the replicas' mean; ``velocity`` is shard
    ``j`` of the momentum buffer (a :class:`Shard` of it, or the whole
    buffer, cut here), or None in the first round. The step is the
    whole model's, element by element, so the stepped shards join into
    the whole model's step bit for bit.

    Returns
    -------
    state : Shard
        Shard ``j`` of the new global model.
    velocity : Shard or None
        Shard ``j`` of the new momentum buffer (its layout the
        parameters' keys and shapes); None when ``momentum`` is 0.
    """
    if velocity is not None and not isinstance(velocity, Shard):
        velocity = piece(velocity, merged.index, merged.n_shards)
    state, new_velocity = _outer.momentum_step(
        previous.entries, merged.entries,
        None if velocity is None else velocity.entries, lr, momentum, keys)
    stepped = merged._replace(entries=state)
    if new_velocity is None:
        return stepped, None
    shapes = dict(merged.layout)
    return stepped, Shard(merged.index, merged.n_shards,
                          collections.OrderedDict(new_velocity),
                          tuple((k, shapes[k]) for k in new_velocity))


def _is_cut(value):
    return torch.is_tensor(value) and (value.is_floating_point()
                                       or value.is_complex())


def _bounds(n, index, n_shards):
    return n * index // n_shards, n * (index + 1) // n_shards
