"""The synchronous merge tasks: a binary tree over the replicas, and
the outer step on its result, which the tree's root takes in the same
task (:func:`_merge_root_stepped`) when there are two replicas or more.

Each task takes and returns plain data (state dicts, weighted sums,
numbers); the arithmetic is :mod:`dislib_nn.training.merge`'s.

With ``merge_precision="bf16"`` the replicas arrive as
:class:`~dislib_nn.training.merge._payload.Delta` payloads (their bf16
updates from ``previous``, the model their round started from): the
tree sums them widened to float32, as it sums state dicts, and the root
adds the weighted mean to ``previous`` (``deltas=True``). Partial sums
stay float32.
"""

from typing import NamedTuple

from dislib_nn import runtime
from dislib_nn.runtime import COLLECTION_IN, Depth, Type, task
from dislib_nn.training.merge import _delay, _outer, _payload, _sums
from dislib_nn.training.tasks._report import TrainStats

__all__ = ["submit_merge", "Merged", "submit_outer_step", "has_outer_step",
           "OuterStep", "outer_step_of",
           "submit_delayed_starts"]

_COLLECTION = {Type: COLLECTION_IN, Depth: 1}
#: The statistics a partial sum travels with (its replicas were checked
#: where they were summed).
_PARTIAL = TrainStats()


@task(returns=1, models=_COLLECTION, counts=_COLLECTION,
      stats=_COLLECTION, priority=True)
def _merge_pair(models, counts, stats, root, previous, deltas=False):
    """Combine two replicas or partial sums; divide only at the root.

    ``models`` holds two state dicts or :class:`WeightedSum`; ``counts``
    the sample count of each raw state dict (ignored for weighted sums);
    ``stats`` the training task's :class:`TrainStats` of each raw state
    dict, whose ``finite`` flag leaves a diverged replica out. Collections hold
    no None: the runtime serializes every element. At the root, when every
    replica diverged, the model is ``previous``. With ``deltas`` the raw
    entries are :class:`~._payload.Delta` payloads, and the root adds
    their weighted mean to ``previous``.
    """
    return _pair(models, counts, stats, root, previous, deltas)


@task(returns=2, models=_COLLECTION, optims=_COLLECTION,
      counts=_COLLECTION, stats=_COLLECTION, priority=True)
def _merge_pair_with_optims(models, optims, counts, stats, root, previous,
                            deltas=False):
    """``_merge_pair`` that also merges the optimizer states alike (over
    every replica when all diverged: each then returned the state it
    started from)."""
    return _pair_with_optims(models, optims, counts, stats, root, previous,
                             deltas)


def _pair(models, counts, stats, root, previous, deltas):
    """:func:`_merge_pair`'s body."""
    total = _sum_models(models, counts, stats, deltas)
    if not root:
        return total
    return _root_model(total, previous, deltas)


def _pair_with_optims(models, optims, counts, stats, root, previous,
                      deltas):
    """:func:`_merge_pair_with_optims`'s body."""
    total = _sum_models(models, counts, stats, deltas)
    optim_total = _sum_optims(optims, counts, stats)
    if not root:
        return total, optim_total
    if not optim_total[0].entries:
        optim_total = _sum_optims(optims, counts, None)
    merged_optim = _sums.unflatten_optimizer_state(
        _sums.mean(optim_total[0]), optim_total[1])
    return _root_model(total, previous, deltas), merged_optim


class Merged(NamedTuple):
    """What :func:`submit_merge` submitted: futures.

    Attributes
    ----------
    model : future
        The merged state dict (after the outer step, when the root took
        it).
    optim : future or None
        The merged optimizer state; None when no optimizer states were
        merged.
    outer : future or None
        The new outer state when the root took the outer step; else
        None.
    """

    model: object
    optim: object
    outer: object = None


class OuterStep(NamedTuple):
    """The outer step a merge tree's root takes (see
    :func:`submit_outer_step`); its carried state and the components
    travel as task arguments of their own (they may be futures).

    Attributes
    ----------
    optimizer : bool
        True: the ``outer_optimizer``'s step; False: FedAvgM's momentum
        step at ``lr`` and ``momentum``.
    lr, momentum : float
    keys : list of str
        The module's parameter names.
    """

    optimizer: bool
    lr: float
    momentum: float
    keys: list

    @property
    def key(self):
        """The name of its state in the strategy's carried outer state."""
        return "outer_optimizer" if self.optimizer else "velocity"


@task(returns=3, models=_COLLECTION, optims=_COLLECTION,
      counts=_COLLECTION, stats=_COLLECTION, priority=True)
def _merge_root_stepped(models, optims, counts, stats, previous, deltas,
                        step, carried, components, with_optims):
    """The root of a merge tree and the outer step after it, in one task:
    :func:`_merge_pair`'s (or with ``with_optims``,
    :func:`_merge_pair_with_optims`'s) root, then ``step`` from
    ``previous`` to the merged model with the ``carried`` outer state.
    Returns the new global model, the merged optimizer state (None
    without ``with_optims``) and the new outer state."""
    merged_optim = None
    if with_optims:
        averaged, merged_optim = _pair_with_optims(
            models, optims, counts, stats, True, previous, deltas)
    else:
        averaged = _pair(models, counts, stats, True, previous, deltas)
    if step.optimizer:
        state, outer = _outer.optimizer_step(
            previous, averaged, carried, components.build_outer_optimizer,
            step.keys)
    else:
        state, outer = _outer.momentum_step(
            previous, averaged, carried, step.lr, step.momentum, step.keys)
    return state, merged_optim, outer


@task(returns=1, priority=True)
def _keep_finite(model, stat, previous, deltas=False):
    """A single replica's model, or ``previous`` when it diverged (with
    ``deltas``, ``previous`` plus its update)."""
    if not stat.finite:
        return previous
    if deltas:
        return _payload.apply(previous, _widened(model, True))
    return model


@task(returns=1, priority=True)
def _delayed_start(state, merged, replica, fallback):
    """A replica's next start under ``merge_delay=1``
    (:func:`~dislib_nn.training.merge._delay.delayed_start`)."""
    return _delay.delayed_start(state, merged, replica, fallback)


def submit_delayed_starts(states, merged, replicas, fallback):
    """One :func:`_delayed_start` task per replica: futures of where each
    starts its next round. ``merged`` and ``replicas`` are the round
    before's merge and replicas, or None before a fit's first merge."""
    return [_delayed_start(state, merged, None if replicas is None
                           else replicas[i], fallback)
            for i, state in enumerate(states)]


@task(returns=2, priority=True)
def _momentum_step(previous, averaged, velocity, lr, momentum, keys):
    """The server step of FedAvgM (see ``_outer.momentum_step``)."""
    return _outer.momentum_step(previous, averaged, velocity, lr, momentum,
                                keys)


@task(returns=2, priority=True)
def _optimizer_step(previous, averaged, optim_state, components, keys):
    """The outer optimizer's step (see ``_outer.optimizer_step``); the
    optimizer is ``components.build_outer_optimizer``."""
    return _outer.optimizer_step(previous, averaged, optim_state,
                                 components.build_outer_optimizer, keys)


def submit_outer_step(previous, averaged, carried, params, components,
                      keys):
    """Submit the outer step after a merge, when there is one.

    ``carried`` holds the outer state of the previous round (futures or
    values): ``"velocity"`` for ``outer_lr`` / ``outer_momentum``,
    ``"outer_optimizer"`` for an ``outer_optimizer``. Returns the future
    of the new global model (``averaged`` itself when the step is plain
    averaging) and the new outer state, a dict of the same keys.
    """
    step = outer_step_of(params, keys)
    if step is None:
        return averaged, dict(carried)
    if step.optimizer:
        state, outer = _optimizer_step(previous, averaged,
                                       carried.get(step.key), components,
                                       keys)
    else:
        state, outer = _momentum_step(previous, averaged,
                                      carried.get(step.key), step.lr,
                                      step.momentum, keys)
    return state, {step.key: outer}


def has_outer_step(params):
    """Whether a merge is followed by an outer step (an
    ``outer_optimizer``, or ``outer_lr`` / ``outer_momentum`` other than
    plain averaging)."""
    return params.outer_optimizer is not None or \
        params.outer_lr != 1.0 or params.outer_momentum != 0.0


def _sum_models(models, counts, stats, deltas=False):
    """The weighted sum of the finite replicas (an empty one if none);
    with ``deltas``, of their updates in float32."""
    return _sums.finite_sum(
        (model if isinstance(model, _sums.WeightedSum)
         else _widened(model, deltas), count, stat.finite)
        for model, count, stat in zip(models, counts, stats))


def _root_model(total, previous, deltas):
    """The merged model from the tree's total: its mean, or with
    ``deltas`` ``previous`` plus the mean update; ``previous`` when
    every replica diverged."""
    mean, none_left = _sums.mean_or_previous(total, previous)
    if deltas and not none_left:
        return _payload.apply(previous, mean)
    return mean


def _widened(model, deltas):
    """A raw replica as the tree sums it: a state dict, or with
    ``deltas`` a :class:`~._payload.Delta`'s float32 updates."""
    if isinstance(model, _payload.Delta) != bool(deltas):
        raise TypeError(
            f"a merge of {'updates' if deltas else 'state dicts'} got "
            f"{type(model).__name__} from a training task: the training "
            f"tasks and the merges disagree on merge_precision.")
    return _payload.widened(model) if deltas else model


def _sum_optims(optims, counts, stats):
    """``_sum_models`` for optimizer states (every one when ``stats`` is
    None)."""
    parts, skeleton = [], None
    for i, (optim, count) in enumerate(zip(optims, counts)):
        finite = stats is None or stats[i].finite
        if isinstance(optim, tuple):        # a partial sum
            part, skel = optim
        elif finite:
            part, skel = _sums.flatten_optimizer_state(optim)
        else:
            continue
        skeleton = skeleton or skel
        parts.append((part, count, True))
    return _sums.finite_sum(parts), skeleton


def outer_step_of(params, keys):
    """The :class:`OuterStep` the parameters ask for, or None for plain
    averaging (see :func:`has_outer_step`)."""
    if not has_outer_step(params):
        return None
    return OuterStep(params.outer_optimizer is not None,
                     float(params.outer_lr),
                     float(params.outer_momentum), list(keys))


def submit_merge(models, optims, counts, lifetimes, stats, previous,
                 deltas=False, outer=None):
    """Submit the binary tree of merge tasks over the replicas.

    Returns futures of the merged state dict and of the merged optimizer
    state, or None for it when ``optims`` is None. Replicas whose
    ``stats`` (futures of the training tasks' fourth results) say they
    diverged are left out; when all did, the model is ``previous``. With
    one replica only that check is submitted. The tree has
    depth ceil(log2(len(models))). Partial sums are released through
    ``lifetimes`` (anything with a ``release(obj)`` method) once consumed.
    With ``deltas`` the ``models`` are :class:`~._payload.Delta` payloads
    from ``previous`` (``merge_precision="bf16"``).

    ``outer``, ``(step, carried, components)``: the root also takes the
    outer step (an :class:`OuterStep`) from ``previous``, with the
    carried outer state and the fit's components, in the same task,
    and :attr:`Merged.outer` is the future of the new outer state. Only
    for two replicas or more (one replica's merge is no task to fold it
    into).

    Returns
    -------
    Merged
    """
    if len(models) == 1:
        if outer is not None:
            raise ValueError("submit_merge folds an outer step into the "
                             "root of a tree of two replicas or more")
        return Merged(_keep_finite(models[0], stats[0], previous, deltas),
                      None if optims is None else optims[0])
    with_optims = optims is not None
    # (model, optimizer state, count, stats, is a partial sum of this
    # tree, the outer state the root's step returned, its first replica)
    leaves = [(m, o, c, s, False, None, i) for i, (m, o, c, s) in
              enumerate(zip(models, optims if with_optims else models,
                            counts, stats))]

    def pair(a, b, root):
        # Where the left half's first replica trained (runtime.placed):
        # the tree pairs neighbours, which share a node when there are
        # more replicas than nodes, so its first levels merge in a node.
        with runtime.placed(a[6], of=len(models)):
            return merged_pair(a, b, root)

    def merged_pair(a, b, root):
        last = previous if root else None
        new_outer = None
        if root and outer is not None:
            step, carried, components = outer
            model, optim, new_outer = _merge_root_stepped(
                [a[0], b[0]], [a[1], b[1]] if with_optims else [{}, {}],
                [a[2], b[2]], [a[3], b[3]], previous, deltas, step,
                carried, components, with_optims)
        elif with_optims:
            model, optim = _merge_pair_with_optims(
                [a[0], b[0]], [a[1], b[1]], [a[2], b[2]], [a[3], b[3]],
                root, last, deltas)
        else:
            model = optim = _merge_pair([a[0], b[0]], [a[2], b[2]],
                                        [a[3], b[3]], root, last, deltas)
        for child in (a, b):
            if child[4]:    # a partial sum is consumed here, and only here
                lifetimes.release(child[0])
                if with_optims:
                    lifetimes.release(child[1])
        # A partial sum carries its weights inside; its count, 0, and
        # stats are ignored (task collections hold no None).
        return model, optim, 0, _PARTIAL, True, new_outer, a[6]

    model, optim, _, _, _, new_outer, _ = _sums.tree_reduce(leaves, pair)
    return Merged(model, optim if with_optims else None, new_outer)
