"""The library's half of a user-written strategy: :class:`RoundDriver`.

It drives a :class:`~._template.Strategy` through the epoch loop's
interface (:class:`~._interface.EpochStrategy`): for every round
(``sync_every`` epochs, or a share of an epoch) it asks the strategy
what each replica starts from, submits the training tasks (the
optimizer states are its own: kept per worker, or reset every epoch),
hands the round to :meth:`Strategy.merge`, and releases the futures
that the strategy no longer holds. Checkpoints, ``history_`` and
``carry`` are built from the strategy's :meth:`~Strategy.model` and
:meth:`~Strategy.carry`.
"""

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training.strategies._interface import (Carry, EpochHandle,
                                                      EpochScalars,
                                                      EpochStrategy)
from dislib_nn.training.strategies._lifetimes import is_value
from dislib_nn.training.strategies._replicas import submit_training
from dislib_nn.training.strategies._template import Round, Strategy
from dislib_nn.training.tasks import _snapshot

__all__ = ["RoundDriver", "build_strategy", "PREFIX"]

#: The prefix of the parameters routed to the strategy.
PREFIX = "strategy"

#: Shared parameters whose step a user-written strategy's merge decides,
#: with the value it needs.
_DECIDED_BY_STRATEGY = {"optimizer_state": ("keep", "reset"),
                  "merge_precision": ("fp32",), "outer_optimizer": (None,),
                  "outer_lr": (1.0,), "outer_momentum": (0.0,)}


def routed(params):
    """The ``strategy__name=value`` parameters among ``params``, name ->
    value."""
    head = PREFIX + "__"
    return {k[len(head):]: v for k, v in params.items()
            if k.startswith(head)}


def build_strategy(spec, params, caller):
    """A new instance of the strategy ``spec`` (a :class:`Strategy`
    subclass or instance) with the instance's parameters, then the
    routed ``params`` (name -> value)."""
    cls = spec if isinstance(spec, type) else type(spec)
    given = {} if isinstance(spec, type) else spec.get_params()
    unknown = sorted(set(params) - set(cls.parameters))
    if unknown:
        raise InvalidParameterError(
            f"{caller} got {', '.join(f'{PREFIX}__{k}' for k in unknown)}, "
            f"but {cls.__name__} has no parameter "
            f"{' or '.join(repr(k) for k in unknown)}; its parameters are "
            f"{sorted(cls.parameters)} (the class's `parameters`).")
    return cls(**dict(given, **params))


class RoundDriver(EpochStrategy):
    """Runs a user-written :class:`Strategy` (see the module docstring)."""

    merges_within_epochs = True

    @classmethod
    def check_params(cls, params, name):
        for key, allowed in _DECIDED_BY_STRATEGY.items():
            value = getattr(params, key)
            if value not in allowed:
                raise InvalidParameterError(
                    f"{name} with strategy={_named(params.strategy)} "
                    f"takes {key}={' or '.join(repr(a) for a in allowed)}"
                    f": a user-written strategy's merge decides how "
                    f"replicas combine. Got {key}={value!r}.")

    def __init__(self, setup, strategy):
        super().__init__(setup)
        n = setup.n_workers
        self.strategy = strategy
        strategy.n_workers = n
        strategy.begin(setup.state, dict(setup.carried.state))
        self.optims = setup.initial_optims()
        self.current = [None] * n      # the replicas mid-round
        self.starts = None             # what the open round started from
        self.handed = {}               # id -> future the strategy gave
        self.model_now = None          # model() since the last merge

    @property
    def scalar_lag(self):
        """1, or 0 with ``balance``: the next epoch is dealt with this
        one's measurements."""
        return 0 if self.setup.params.balance else 1

    def submit_epoch(self, epoch, lr, last, want_model, want_readable=False):
        setup = self.setup
        blocks = setup.data.blocks(epoch)
        counts, stats, infos = [], [], []
        for plan in setup.clock.rounds(epoch, last):
            if plan.share is not None and plan.rows == 0:
                continue        # fewer batches than shares: nothing to do
            trained = self._train(blocks, epoch, lr, plan.share)
            counts.append(trained.counts)
            stats.append(trained.stats)
            if plan.merges:
                infos.append(self._merge(Round(
                    epoch, plan.share, plan.last, self.starts,
                    trained.states, trained.counts, trained.stats)))
        setup.data.forget(epoch)
        if not last:
            setup.data.prepare(epoch + 1)
        merged = bool(infos)
        model = setup.lifetimes.keep(self._model()) \
            if merged and (want_model or want_readable) else None
        return EpochHandle(epoch, lr, merged,
                           EpochScalars(counts, stats, infos), model)

    def merge_fields(self, handle, scalars):
        infos = scalars.merges
        fields = {"n_merges": len(infos)}
        if any(info is not None for info in infos):
            fields["merge_info"] = infos
        return fields

    def final_model(self):
        return self._model()

    def checkpoint_parts(self):
        return _snapshot.snapshot(self._model(), self.carry())

    def carry(self):
        keep = self.setup.params.optimizer_state
        carried = self.strategy.carry()
        if not isinstance(carried, dict) or not all(
                isinstance(k, str) for k in carried):
            raise TypeError(
                f"{type(self.strategy).__name__}.carry() must return a "
                f"dict of str -> value; it returned {carried!r}.")
        self._hand(carried)
        optims = None if keep == "reset" or None in self.optims \
            else list(self.optims)
        return Carry(optims, carried)

    # ------------------------------------------------------------ rounds
    def _train(self, blocks, epoch, lr, share):
        """Submit one training task per worker: the first share of a
        round starts from what the strategy says, the others continue
        the replicas."""
        setup = self.setup
        n = setup.n_workers
        mid_round = self.starts is not None
        if not mid_round:
            self.starts = [self._hand(self.strategy.start(w))
                           for w in range(n)]
        states = self.current if mid_round else self.starts
        trained = submit_training(setup, blocks,
                                  list(zip(states, self.optims)), epoch, lr,
                                  share)
        if mid_round:
            setup.lifetimes.release(states)
        setup.lifetimes.release(self.optims)
        self.current, self.optims = trained.states, trained.optims
        return trained

    def _merge(self, trained):
        """Hand ``trained`` (a :class:`Round`) to the strategy; release
        what it no longer holds; what its merge returned for
        ``history_``."""
        info = self.strategy.merge(trained)
        if info is not None and not isinstance(info, (list, tuple)):
            raise TypeError(
                f"{type(self.strategy).__name__}.merge() must return None "
                f"or a list (of what history_ shows as 'merge_info'); it "
                f"returned {info!r}.")
        self.model_now = None
        self.current = [None] * self.setup.n_workers
        self.starts = None
        self._hand(trained.states, trained.starts)
        held = self._release_unheld()
        if info is not None and any(
                id(obj) in held and not is_value(obj) for obj in info):
            raise TypeError(
                f"{type(self.strategy).__name__}.merge() returned a future "
                f"that the strategy also holds: the master waits on what "
                f"merge returns, which ends the future (as compss_wait_on "
                f"does), so a later task could not read it. Return "
                f"futures that no later task reads.")
        return info

    def _model(self):
        """The strategy's model now (asked once per merge)."""
        if self.model_now is None:
            self.model_now = self._hand(self.strategy.model())
        return self.model_now

    def _hand(self, *objs):
        """Note the futures in ``objs`` (through lists, tuples and dicts)
        that came from (or went to) the strategy: the library releases
        them once the strategy holds them no more. Returns the first."""
        stack = list(objs)
        while stack:
            obj = stack.pop()
            if isinstance(obj, (list, tuple)):
                stack.extend(obj)
            elif isinstance(obj, dict):
                stack.extend(obj.values())
            elif obj is not None and not is_value(obj):
                self.handed[id(obj)] = obj
        return objs[0] if objs else None

    def _release_unheld(self):
        """Release the futures handed over that the strategy no longer
        holds; the ids of what it holds."""
        held = _reachable(vars(self.strategy))
        if self.model_now is not None:
            held.add(id(self.model_now))
        for key in [k for k in self.handed if k not in held]:
            self.setup.lifetimes.release(self.handed.pop(key))
        return held


def _reachable(value, depth=8):
    """The ids of everything in ``value``, through lists, tuples, sets and
    dicts (``depth`` levels)."""
    found = set()
    stack = [(value, 0)]
    while stack:
        obj, level = stack.pop()
        if id(obj) in found:
            continue
        found.add(id(obj))
        if level >= depth:
            continue
        if isinstance(obj, dict):
            stack.extend((v, level + 1) for v in obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend((v, level + 1) for v in obj)
    return found


def _named(spec):
    cls = spec if isinstance(spec, type) else type(spec)
    return cls.__name__


def is_user_strategy(spec):
    """Whether ``spec`` is a user-written strategy: a :class:`Strategy`
    subclass or instance."""
    return isinstance(spec, Strategy) or (
        isinstance(spec, type) and issubclass(spec, Strategy))
