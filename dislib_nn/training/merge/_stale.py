"""The asynchronous merge's arithmetic: staleness, weights, folding.

Pure functions on numbers and state dicts (no runtime imports), so the
formulas are tested without tasks. The asynchronous strategy
(:mod:`.strategies._async`) calls :func:`fold` inside its merge task.

The global model keeps ``progress``: the training rows merged into it so
far (an epoch of all ``N`` rows counts ``N``). A worker that trained on
``n`` rows from a snapshot taken at progress ``p0`` merges when the
global model is at progress ``p``. It moved ``p - p0`` rows since the
snapshot; a synchronous round would have merged, besides this worker's
own update, the other workers' ``N - n`` rows of the same round. What
goes beyond that is the staleness, in rounds::

    tau = max(0, (p - p0) - (N - n)) / N

and the update is weighted by the worker's share of the rows,
discounted by it::

    weight = (n / N) * (1 + tau) ** -staleness_exponent

Then ``global += weight * (trained - snapshot)``: the worker's delta from
the model it started from, not its model (merging the model would pull
the global model back to where the worker started). With every worker
starting from the model of the previous round (``max_lag=0``), ``tau``
is 0 and the shares add up to 1, so the folds give exactly the
sample-weighted average of the synchronous strategy.

Outer learning rate and momentum (FedAvgM) apply per merge:
``step = weight * delta + (n / N) * momentum * velocity``, then
``global += outer_lr * step``; the steps of each round (``n_workers``
merges) add up to the next round's ``velocity``. With ``max_lag=0``
this is the synchronous server step.

An outer optimizer (``FoldRules(outer_build=...)``) takes the delayed
outer step of Async Local-SGD (Liu et al., arXiv 2401.09135): each merge
moves the global parameters by the optimizer's learning rate times
``weight * delta``, plain steps without momentum, and the round's steps
are summed; after every ``n_workers`` merges those plain steps are
replaced by the optimizer's one step on the round's summed update
(:func:`._outer.delayed_optimizer_step`). Momentum thus sees each round
once, as in the synchronous strategy, not each stale merge; with SGD
and Nesterov momentum this is the paper's delayed Nesterov update, and
with ``max_lag=0`` the synchronous strategy's outer optimizer step.

Buffers (BatchNorm's running statistics) and averaged optimizer states
do not take deltas: a stale worker's delta, added to a global value that
moved since its snapshot, can leave the domain such an entry must stay
in (a running variance, Adam's second moment: negative). They take the
weighted mean of the values merged in the current round instead, as a
running mean: the merge with weight ``w`` moves the entry to
``value + (w / W) * (trained - value)``, ``W`` the round's weights so
far (the first merge of a round takes its worker's value). Every merged
value is then a convex combination of replicas' values, in the domain
whenever theirs are, and with ``max_lag=0`` a round ends on the
synchronous strategy's weighted mean. Integer entries (BatchNorm's
``num_batches_tracked``) take the maximum and stay integers.

With ``balance=True`` (``FoldRules(equal_shares=True)``) the deal is
uneven for speed only, so every merge counts an even deal's ``N / P``
rows, whatever its own: share ``1 / P``, and ``N / P`` rows of progress
(see docs/strategies.md for why).
"""

import dataclasses
from typing import NamedTuple

import torch

from dislib_nn.training.merge import _outer, _payload, _sums

__all__ = ["staleness", "discount", "merge_weight", "replay",
           "FoldRules", "GlobalModel", "SnapshotInfo", "Fold", "new_global",
           "fold", "round_rows_of"]

_WIDEN = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def staleness(moved, n_samples, n_rows):
    """``tau``: rounds the global model moved beyond a synchronous round.

    Parameters
    ----------
    moved : int
        Rows merged into the global model since the worker's snapshot.
    n_samples : int
        Rows the worker trained on.
    n_rows : int
        Rows in a whole epoch (all workers).
    """
    if n_rows <= 0:
        raise ValueError(f"n_rows must be > 0. Got {n_rows!r} instead.")
    return max(0, moved - (n_rows - n_samples)) / n_rows


def discount(tau, exponent):
    """``(1 + tau) ** -exponent``: 1 for a fresh update, less when stale."""
    return (1.0 + tau) ** -exponent


def merge_weight(n_samples, n_rows, tau, exponent):
    """The worker's share of the rows, discounted by its staleness."""
    return n_samples / n_rows * discount(tau, exponent)


def replay(merges, n_rows, exponent):
    """Staleness and weight of a sequence of merges, in the order they run.

    Each worker starts from the global model its previous merge returned
    (the start of the fit for its first), as with ``max_lag=None``.

    Parameters
    ----------
    merges : iterable of (worker, n_samples)
    n_rows : int
    exponent : float

    Returns
    -------
    list of dict
        ``worker``, ``staleness`` and ``weight`` per merge.
    """
    progress, snapshot, out = 0, {}, []
    for worker, n in merges:
        tau = staleness(progress - snapshot.get(worker, 0), n, n_rows)
        out.append({"worker": worker, "staleness": tau,
                    "weight": merge_weight(n, n_rows, tau, exponent)})
        progress += n
        snapshot[worker] = progress
    return out


class FoldRules:
    """The constants of a fit's merges (a picklable plain object)."""

    def __init__(self, n_rows, n_workers, exponent, outer_lr,
                 outer_momentum, param_keys, average_optims,
                 equal_shares=False, outer_build=None):
        self.equal_shares = bool(equal_shares)
        # An outer optimizer: ``outer_build(params)`` builds it, and its
        # learning rate is that of the plain steps between its steps.
        self.outer_build = outer_build
        if outer_build is not None:
            outer_lr = _outer.outer_lr_of(outer_build)
            outer_momentum = 0.0
        self.n_rows = int(n_rows)
        self.n_workers = int(n_workers)
        self.exponent = float(exponent)
        self.outer_lr = float(outer_lr)
        self.outer_momentum = float(outer_momentum)
        self.param_keys = frozenset(param_keys)
        self.average_optims = bool(average_optims)

    def counted_rows(self, n_samples, round_rows):
        """The rows a merge counts: its own, or with ``equal_shares``
        (``balance=True``) an even deal's share of the round's rows."""
        if self.equal_shares:
            return round_rows / self.n_workers
        return n_samples

    @property
    def plain(self):
        return self.outer_build is None and self.outer_lr == 1.0 \
            and self.outer_momentum == 0.0


@dataclasses.dataclass(eq=False)
class GlobalModel:
    """The asynchronous strategy's global model, changed by :func:`fold`
    in place (the merge tasks' ``COMMUTATIVE`` or ``INOUT`` argument).

    ``state`` is the model's state dict; ``optim`` the averaged optimizer
    state, flat (``skeleton`` rebuilds it; None when none is averaged);
    ``progress`` the training rows merged so far and ``merges`` the
    merges; ``velocity`` the outer momentum buffer, ``pending`` the
    round's outer steps so far and ``round_weight`` the round's merge
    weights so far; ``outer`` the outer optimizer's ``state_dict``
    (None: a new one).
    """

    state: dict
    optim: dict = dataclasses.field(default_factory=dict)
    skeleton: object = None
    progress: float = 0
    merges: int = 0
    velocity: dict = dataclasses.field(default_factory=dict)
    pending: dict = dataclasses.field(default_factory=dict)
    round_weight: float = 0.0
    outer: object = None

    def averaged_optimizer_state(self):
        """The averaged optimizer state (``{}`` when none is averaged)."""
        if self.skeleton is None:
            return {}
        return _sums.unflatten_optimizer_state(self.optim, self.skeleton)

    def snapshot(self):
        """What a worker starts its next round from: state, optimizer
        state (``{}`` when none is averaged) and progress."""
        return (dict(self.state), self.averaged_optimizer_state(),
                SnapshotInfo(self.progress))


class SnapshotInfo(NamedTuple):
    """What a worker's start knows of the global model it copies.

    Attributes
    ----------
    progress : float
        Rows merged into the global model when it was copied (what the
        staleness of the worker's next merge is measured from).
    """

    progress: float


class Fold(NamedTuple):
    """What :func:`fold` did with one worker's update.

    Attributes
    ----------
    staleness : float
        ``tau``: rounds the global model moved beyond a synchronous
        round since the worker's start.
    weight : float
        The update's weight (0 for a replica that diverged).
    index : int
        The merge's position among the fit's merges (from 0).
    """

    staleness: float
    weight: float
    index: int


def new_global(state, optim_state=None, velocity=None, outer_state=None):
    """The :class:`GlobalModel` a fit starts from; ``outer_state`` is the
    outer optimizer's ``state_dict`` (None: a new one)."""
    flat, skeleton = {}, None
    if optim_state:
        flat, skeleton = _sums.flatten_optimizer_state(optim_state)
    return GlobalModel(dict(state), flat, skeleton,
                       velocity=dict(velocity or {}), outer=outer_state)


def round_rows_of(rules, round_rows):
    """The rows of a merge's round: ``round_rows`` (a share of an
    epoch's), by default the epoch's ``rules.n_rows``."""
    return rules.n_rows if round_rows is None else max(1, round_rows)


def fold(glob, start_state, start_progress, trained_state, n_samples,
         rules, trained_optim=None, finite=True, round_rows=None):
    """Fold one worker's update into the global model ``glob`` in place.

    A replica that is not ``finite`` (its loss or state diverged) folds
    no update (weight 0); its rows still count as merged progress.
    ``round_rows`` are the rows of the round this update belongs to
    (all workers' rows of its share of the epoch, when rounds are
    shares; by default the epoch's ``rules.n_rows``): weights and
    staleness are fractions of it. ``trained_state`` may be a
    :class:`~._payload.Delta` from ``start_state`` (``merge_precision=
    "bf16"``): its float32-widened updates stand for ``trained -
    start``, and ``start + update`` for the trained values that
    buffers blend with.

    Returns
    -------
    Fold
    """
    n_rows = round_rows_of(rules, round_rows)
    n_samples = rules.counted_rows(n_samples, n_rows)
    tau = staleness(glob.progress - start_progress, n_samples, n_rows)
    share = n_samples / n_rows
    weight = share * discount(tau, rules.exponent)
    deltas = None
    if not finite:
        weight, trained_state, trained_optim = 0.0, start_state, None
    elif isinstance(trained_state, _payload.Delta):
        deltas = _payload.widened(trained_state)
        trained_state = _payload.apply(start_state, deltas)
    velocity, pending = glob.velocity, glob.pending
    if glob.merges % rules.n_workers == 0:
        glob.round_weight = 0.0
    glob.round_weight += weight
    blend = weight / glob.round_weight if glob.round_weight else 0.0
    state = glob.state
    for key, value in state.items():
        new = trained_state[key]
        if not _is_float(value):
            state[key] = _maximum(value, new)
            continue
        if key not in rules.param_keys:
            state[key] = _blend(value, new, blend)
            continue
        delta = _delta(new, start_state[key], value) if deltas is None \
            else deltas[key]
        if rules.plain:
            state[key] = _add(value, weight, delta)
            continue
        step = weight * delta
        if rules.outer_build is None:
            step = _outer.momentum_share(step, share, rules.outer_momentum,
                                         velocity.get(key))
        pending[key] = step if key not in pending else pending[key] + step
        state[key] = _add(value, rules.outer_lr, step)
    glob.progress += n_samples if rules.equal_shares else int(n_samples)
    glob.merges += 1
    if glob.merges % rules.n_workers == 0:
        if rules.outer_build is not None and pending:
            params, glob.outer = _outer.delayed_optimizer_step(
                state, pending, rules.outer_lr, glob.outer,
                rules.outer_build)
            for key, value in params.items():
                state[key] = value.to(state[key].dtype)
        elif rules.outer_momentum:
            glob.velocity = pending
        glob.pending = {}
    if rules.average_optims and trained_optim is not None:
        _fold_optim(glob, trained_optim, blend)
    return Fold(tau, weight, glob.merges - 1)


def _fold_optim(glob, trained_optim, blend):
    """Fold a worker's optimizer state into the averaged one: the round's
    running weighted mean, as for buffers (see the module's docstring)."""
    flat_t, skeleton = _sums.flatten_optimizer_state(trained_optim)
    flat_g = glob.optim
    for key, new in flat_t.items():
        old = flat_g.get(key)
        if old is None:
            flat_g[key] = new
        elif not _is_float(new):
            flat_g[key] = _maximum(old, new)
        else:
            flat_g[key] = _blend(old, new, blend)
    glob.skeleton = skeleton


def _is_float(value):
    if torch.is_tensor(value):
        return value.is_floating_point()
    return isinstance(value, float)


def _delta(new, start, like):
    if not torch.is_tensor(like):
        return float(new) - float(start)
    wide = _WIDEN.get(like.dtype, like.dtype)
    return new.to(wide) - start.to(wide)


def _maximum(value, new):
    if torch.is_tensor(value):
        return torch.maximum(value, new.to(value.dtype))
    return max(value, new)


def _blend(value, new, fraction):
    """``value + fraction * (new - value)``, in ``value``'s dtype (wide
    for low-precision floats): between the two for ``0 <= fraction <= 1``.
    """
    if fraction == 1.0:
        return new.to(value.dtype).clone() if torch.is_tensor(value) \
            else type(value)(new)
    if not fraction:
        return value
    return _add(value, fraction, _delta(new, value, value))


def _add(value, factor, delta):
    if not torch.is_tensor(value):
        return value + factor * delta
    wide = _WIDEN.get(value.dtype, value.dtype)
    return (value.to(wide) + factor * delta).to(value.dtype)
