"""How replicas are merged: pure arithmetic on state dicts.

This module is the *how* of model averaging and imports nothing from the
runtime, so it is tested on its own and reused by the tasks unchanged.

A merge never divides until the very end. Each replica's ``state_dict``
becomes a :class:`WeightedSum` (every floating-point entry multiplied by
the replica's sample count, with that count as its weight); two weighted
sums combine by adding, which is associative and commutative, so a tree
of merges gives the same result in any shape and order; :func:`mean`
divides once, at the root. Integer and boolean entries (such as
BatchNorm's ``num_batches_tracked``) are not averaged: they take the
element-wise maximum, which is also associative and commutative.

Every entry of the state dict is merged, parameters and buffers alike
(BatchNorm running statistics included), whatever the module's layers
are called: no naming convention, bias-free layers and nested modules
are fine.

The flattening that lets optimizer states be averaged with the same
arithmetic (:func:`flatten_optimizer_state`) lives here too; the outer
step on the averaged update is :mod:`._outer`'s.
"""

import collections
import numbers

import torch

__all__ = ["WeightedSum", "weighted", "combine", "mean", "weighted_mean",
           "tree_reduce", "tree_depth",
           "flatten_optimizer_state", "unflatten_optimizer_state",
           "is_finite", "finite_sum", "mean_or_previous", "finite_mean"]

# Low-precision floats are accumulated in float32, then cast back.
_WIDEN = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


class WeightedSum:
    """The weighted sum of some replicas' entries and the weight per entry.

    ``entries[key]`` is ``(value, weight)``: for a floating-point tensor
    (or Python float) ``value`` is the sum of ``weight_i * entry_i`` and
    ``weight`` the sum of the ``weight_i``; for an integer or boolean
    entry ``value`` is the element-wise maximum. Other values (strings,
    ``None``) are kept from the first replica that has them. An entry
    present in only some replicas is averaged over those replicas, so
    optimizer states with missing entries merge too.
    """

    __slots__ = ("entries",)

    def __init__(self, entries):
        self.entries = entries

    def __getstate__(self):
        return self.entries

    def __setstate__(self, entries):
        self.entries = entries

    def __repr__(self):
        return f"<WeightedSum of {len(self.entries)} entries>"


def weighted(state, weight):
    """A replica's ``state`` as a :class:`WeightedSum` of weight ``weight``.

    Parameters
    ----------
    state : mapping of str to tensor or number
        A ``state_dict`` (or any flat mapping of tensors and numbers).
    weight : float
        Usually the number of samples the replica trained on; must be
        finite and >= 0.

    Returns
    -------
    WeightedSum
    """
    weight = _check_weight(weight)
    entries = collections.OrderedDict()
    for key, value in state.items():
        entries[key] = (_scale(value, weight), weight)
    return WeightedSum(entries)


def combine(a, b):
    """The :class:`WeightedSum` of two weighted sums: ``a`` plus ``b``.

    Associative and commutative: any tree of ``combine`` calls over the
    same replicas gives the same sums (up to floating-point rounding).
    """
    entries = collections.OrderedDict(a.entries)
    for key, (value, weight) in b.entries.items():
        if key in entries:
            mine, my_weight = entries[key]
            entries[key] = (_add(key, mine, value), my_weight + weight)
        else:
            entries[key] = (value, weight)
    return WeightedSum(entries)


def mean(total, like=None):
    """Divide a :class:`WeightedSum` by its weights: the merged state dict.

    Parameters
    ----------
    total : WeightedSum
    like : mapping, default=None
        A state dict whose entry order and dtypes the result follows
        (default: the order in which entries were first seen, and the
        dtypes they came in).

    Returns
    -------
    collections.OrderedDict
        CPU tensors in their original dtypes; integer entries hold the
        maximum over replicas.

    Raises
    ------
    ValueError
        If a floating-point entry has a total weight of 0 (every replica
        that holds it trained on no samples).
    """
    keys = list(like.keys()) if like is not None else list(total.entries)
    out = collections.OrderedDict()
    for key in keys:
        value, weight = total.entries[key]
        out[key] = _divide(key, value, weight)
    return out


def weighted_mean(states, weights):
    """The sample-weighted mean of ``states``, reduced as a binary tree."""
    if len(states) != len(weights):
        raise ValueError(
            f"weighted_mean needs one weight per state. Got "
            f"{len(states)} states and {len(weights)} weights.")
    if not states:
        raise ValueError("weighted_mean needs at least one state.")
    sums = [weighted(s, w) for s, w in zip(states, weights)]
    return mean(tree_reduce(sums, lambda a, b, root: combine(a, b)),
                like=states[0])


def tree_reduce(items, pair):
    """Reduce ``items`` pairwise, level by level: depth ceil(log2(n)).

    ``pair(a, b, root)`` combines two items; ``root`` is True for the one
    call that produces the final result. A level with an odd number of
    items carries the last one up unchanged. With a single item, ``pair``
    is never called and the item is returned as is.
    """
    level = list(items)
    if not level:
        raise ValueError("tree_reduce needs at least one item.")
    while len(level) > 1:
        root = len(level) == 2
        nxt = [pair(level[i], level[i + 1], root)
               for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def tree_depth(n):
    """Levels of merges :func:`tree_reduce` makes for ``n`` items."""
    return max(0, (int(n) - 1).bit_length())


def flatten_optimizer_state(state_dict):
    """An optimizer's ``state_dict`` as a flat mapping, plus its skeleton.

    Per-parameter state (``momentum_buffer``, ``exp_avg``, ``step``...)
    becomes entries ``"<param index>.<name>"`` that :func:`weighted`
    can merge; the parameter groups (learning rate and the like) are the
    skeleton, kept from one replica.
    """
    flat = collections.OrderedDict()
    for index, per_param in state_dict["state"].items():
        for name, value in per_param.items():
            flat[f"{index}.{name}"] = value
    return flat, {"param_groups": state_dict["param_groups"]}


def unflatten_optimizer_state(flat, skeleton):
    """The inverse of :func:`flatten_optimizer_state`."""
    state = {}
    for key, value in flat.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": skeleton["param_groups"]}


# ----------------------------------------------------------------- helpers
def is_finite(state, loss=0.0):
    """Whether a replica may be merged: its ``loss`` and every
    floating-point value of ``state`` (a state dict, or an optimizer
    state with nested dicts and lists) are finite."""
    if not _finite_value(loss):
        return False
    return all(_finite_value(v) for v in _leaves(state))


def finite_mean(states, weights, finite, previous):
    """The weighted mean of the replicas flagged ``finite``.

    A diverged replica contributes nothing, not even ``0 * nan``: the
    weights are renormalised over the others by the one division at the
    end. When every replica diverged, ``previous`` (the global model
    they started from) is returned unchanged.

    Returns
    -------
    (state dict, bool)
        The merged model, and True when every replica diverged.
    """
    return mean_or_previous(finite_sum(zip(states, weights, finite)),
                            previous)


def finite_sum(parts):
    """The :class:`WeightedSum` of the finite replicas among ``parts``.

    ``parts`` holds ``(state, weight, finite)`` triples; a ``state`` that
    is already a :class:`WeightedSum` (a partial sum of a merge tree,
    whose replicas were checked where they were summed) always counts.
    Empty (no entries) when nothing is left.
    """
    total = WeightedSum(collections.OrderedDict())
    for state, weight, finite in parts:
        if isinstance(state, WeightedSum):
            total = combine(total, state)
        elif finite:
            total = combine(total, weighted(state, weight))
    return total


def mean_or_previous(total, previous):
    """``(mean(total), False)``, or ``(previous, True)`` when ``total`` is
    empty because every replica diverged."""
    if not total.entries:
        return previous, True
    return mean(total), False


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _finite_value(value):
    if torch.is_tensor(value):
        if not (value.is_floating_point() or value.is_complex()):
            return True
        return bool(torch.isfinite(value).all())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return bool(torch.isfinite(torch.tensor(float(value))))
    return True


def _check_weight(weight):
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise TypeError(f"a replica's weight must be a real number. Got "
                        f"{weight!r} instead.")
    weight = float(weight)
    if not (weight >= 0 and weight != float("inf")):
        raise ValueError(f"a replica's weight must be finite and >= 0. "
                         f"Got {weight!r} instead.")
    return weight


def _is_averaged(value):
    if torch.is_tensor(value):
        return value.is_floating_point() or value.is_complex()
    return isinstance(value, numbers.Real) and not isinstance(
        value, (bool, numbers.Integral))


def _scale(value, weight):
    if torch.is_tensor(value):
        if value.is_floating_point() or value.is_complex():
            value = value.detach()
            wide = _WIDEN.get(value.dtype)
            if wide is not None:
                return value.to(wide) * weight, value.dtype
            return value * weight, value.dtype
        return value.detach().clone(), value.dtype
    if _is_averaged(value):
        return float(value) * weight, float
    return value, type(value)


def _add(key, mine, theirs):
    (a, dtype), (b, _) = mine, theirs
    if torch.is_tensor(a):
        if not torch.is_tensor(b) or a.shape != b.shape:
            shape_b = tuple(b.shape) if torch.is_tensor(b) else type(b)
            raise ValueError(
                f"cannot merge entry {key!r}: shape {tuple(a.shape)} in "
                f"one replica and {shape_b} in another. Replicas of one "
                f"model must have the same entries.")
        if a.is_floating_point() or a.is_complex():
            return a + b, dtype
        return torch.maximum(a, b), dtype
    if dtype is float:
        return a + b, dtype
    if isinstance(a, numbers.Integral) and not isinstance(a, bool):
        return max(a, b), dtype
    return a, dtype


def _divide(key, entry, weight):
    value, dtype = entry
    if torch.is_tensor(value):
        if not (value.is_floating_point() or value.is_complex()):
            return value
        if weight == 0:
            raise ValueError(
                f"cannot average entry {key!r}: its total weight is 0 "
                f"(every replica holding it trained on 0 samples).")
        return (value / weight).to(dtype)
    if dtype is float:
        if weight == 0:
            raise ValueError(
                f"cannot average entry {key!r}: its total weight is 0.")
        return value / weight
    return value
