"""The asynchronous strategy: each worker merges as soon as it is done.

Each worker runs its own chain of training tasks. At the end of each of
its rounds (``sync_every`` epochs, a share of an epoch when
``sync_every`` is a fraction or ``"step"``, and the end of the fit) a
merge task (:mod:`dislib_nn.training.tasks._async_merge`) folds its
update into the global model (:func:`dislib_nn.training.merge._stale.fold`,
on a :class:`~dislib_nn.training.merge._stale.GlobalModel`): it is the
task's ``COMMUTATIVE`` argument, so merges run one at a time, in
whatever order workers finish, and each returns the fresh global model
this worker starts its next round from, without waiting for the others.
An ``outer_optimizer`` takes the delayed outer step of Async Local-SGD
there (see :mod:`dislib_nn.training.merge._stale`).

``max_lag`` bounds how many rounds (merges) ahead a worker may run,
purely as task dependencies: worker ``w``'s round ``r`` starts from the
freshest of its own merge of round ``r - 1`` and the other workers'
merges of round ``r - 1 - max_lag`` (a small task picks it: it reads
those P models, so it depends on all of them). With ``max_lag=0`` every
round starts from the model with all of the previous round's merges,
which is the synchronous strategy; that model is the global one once
the round's merges are done, so one task folds the whole round
(:func:`~dislib_nn.training.tasks._async_merge.submit_fold_round`) and
every worker starts from the snapshot it returns: the P replicas travel
to it and its snapshot to the P workers, one task a round instead of
P + 1, and no global model carried from fold to fold. Since that task
waits for the whole round, it folds in worker order: floating-point
sums in one order, so the same seed gives the same model bit for bit
whichever worker ends first. ``max_lag=None`` adds no dependency
between workers.
The default, ``"auto"``, is 1, and 0 where the replicas make few steps
an epoch (:data:`LAG_FEW_STEPS`, :meth:`AsyncStrategy.adapt`). Nothing
in the chains waits on the master; the master reads scalars only, up to
the epochs that ``max_lag`` rounds span behind (see
:attr:`AsyncStrategy.scalar_lag`).

``merge_delay=1`` (with ``max_lag`` 0 or None) starts a worker's round
without its merge of the round before: from its own replica, corrected
by its merge of the round before that
(:mod:`dislib_nn.training.tasks._delayed_fold`). The strategy then keeps
each round's replicas until the second round after it has started.
"""

import math
import numbers

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training._param_validation import (Interval, NoneValue,
                                                  Options)
from dislib_nn.training.merge import _stale
from dislib_nn.training.strategies._interface import (Carry, EpochHandle,
                                                      EpochScalars,
                                                      EpochStrategy)
from dislib_nn.training.strategies._replicas import submit_training
from dislib_nn.training.tasks import _async_merge, _delayed_fold, _snapshot

__all__ = ["AsyncStrategy", "LAG", "LAG_FEW_STEPS"]

#: ``max_lag="auto"``: a worker may run one round ahead ...
LAG = 1
#: ... and none where the replicas make few steps an epoch (the
#: adaptive defaults' condition, :attr:`.._adaptive.Plan.few`): there a
#: round is a few steps at a scaled rate, and an update one round stale
#: is as large as a fresh one. Measured (docs/benchmarks.md, "Accuracy
#: from 2 to 64 replicas"): with one round of lag the rule lost 16.4
#: points at 64 replicas on the MLP and 21.1 at 16 on the CNN against
#: single-process, where without lag (the synchronous model) it gained
#: 5.3 and lost 1.8.
LAG_FEW_STEPS = 0

class AsyncStrategy(EpochStrategy):
    """Submits per-worker chains of epochs and their merges.

    What carries over to the next fit: each worker's optimizer state
    (``optimizer_state="keep"``) or the averaged one (``"average"``), and
    the outer step's state: the momentum buffer (``"velocity"``) and,
    with an ``outer_optimizer``, its ``state_dict``
    (``"outer_optimizer"``).
    """

    parameters = {"max_lag": "auto", "staleness_exponent": 0.5,
                  "merge_delay": 0}
    merges_within_epochs = True
    constraints = {
        "max_lag": [Options("auto"), NoneValue(),
                    Interval(numbers.Integral, 0, None)],
        "staleness_exponent": [Interval(numbers.Real, 0, None)],
        "merge_delay": [Interval(numbers.Integral, 0, 1)]}

    @classmethod
    def check_params(cls, params, name):
        if params.own.merge_delay == 0:
            return
        lag = params.own.max_lag
        if lag not in ("auto", None, 0):
            raise InvalidParameterError(
                f"{name} takes merge_delay=1 only with max_lag=0, None or "
                f"'auto' (which is then 0): a worker's start takes its own "
                f"merge of the round before last, and another worker's "
                f"older snapshot may already hold this worker's last "
                f"update. Got merge_delay=1 and max_lag={lag!r}.")
        for key, value, allowed in (
                ("merge_precision", params.merge_precision, ("fp32",)),
                ("optimizer_state", params.optimizer_state,
                 ("keep", "reset"))):
            if value not in allowed:
                shown = " or ".join(repr(a) for a in allowed)
                raise InvalidParameterError(
                    f"{name} takes merge_delay=1 only with {key}={shown}: "
                    f"a worker that starts its next round before its "
                    f"merge goes on from its own float32 state and "
                    f"optimizer state. Got merge_delay=1 and "
                    f"{key}={value!r}.")

    @classmethod
    def adapt(cls, own, few):
        """``max_lag="auto"``: :data:`LAG_FEW_STEPS` where the replicas
        make few steps an epoch, else :data:`LAG`; 0 with
        ``merge_delay=1`` (the delay is a round of lag by itself)."""
        if own.max_lag != "auto":
            return own
        if own.merge_delay:
            return own._replace(max_lag=0)
        return own._replace(max_lag=LAG_FEW_STEPS if few else LAG)

    def __init__(self, setup):
        super().__init__(setup)
        p, n = setup.params, setup.n_workers
        self.max_lag = p.own.max_lag
        self.average = p.optimizer_state == "average"
        initial_optims = setup.initial_optims()
        start_optim = initial_optims[0] if self.average else None
        carried = setup.carried.state
        self.glob = _stale.new_global(
            setup.state, start_optim, carried.get("velocity"),
            carried.get("outer_optimizer"))
        outer = p.outer_optimizer
        self.rules = _stale.FoldRules(
            setup.data.n_rows, n, p.own.staleness_exponent, p.outer_lr,
            p.outer_momentum, setup.param_keys, self.average,
            equal_shares=p.balance, outer_build=None if outer is None
            else setup.components.build_outer_optimizer)
        snapshot = (setup.state, start_optim, _stale.SnapshotInfo(0))
        self.initial = snapshot
        self.start = [snapshot] * n        # each worker's round start
        self.picked = [False] * n          # start made by a task
        self.current = [None] * n          # trained state, mid-round
        self.optims = [None if self.average else o for o in initial_optims]
        self.rounds = []                   # merge outputs per round
        # max_lag=0: the next round's start, shared by every worker.
        self.next_start = None
        # merge_delay=1: each round's trained replicas and rows
        # (read by the starts one and two rounds later), and with
        # max_lag=0 the start before next_start.
        self.delay = p.own.merge_delay
        self.trained, self.trained_rows = [], []
        self.start_before = None
        self.round_open = [True] * n
        self.rounds_per_epoch = 1
        # sync_every of the epoch submitted last (read by scalar_lag).
        self.every = 1 if callable(p.sync_every) else p.sync_every
        self._parts = None

    @property
    def scalar_lag(self):
        """Reading epoch ``e``'s scalars waits for every worker's epoch
        ``e``: a worker may run ``max_lag`` rounds ahead anyway, so the
        master reads the epochs those rounds span behind (at least one;
        the whole fit ahead with ``max_lag=None``). With ``balance``, the
        first epoch is read at once, so that the second is already dealt
        by measurement, and later ones at most one epoch behind with
        ``max_lag=None``."""
        p = self.setup.params
        if p.balance and not self.setup.data.throughput.known():
            return 0
        if self.max_lag is None:
            return 1 if p.balance else p.n_epochs + 1
        every = self.every
        if every == "step" or every < 1:
            # Rounds are shares of an epoch (as many as the last epoch
            # submitted had): max_lag of them span this many epochs.
            return max(1, math.ceil(self.max_lag / self.rounds_per_epoch))
        return max(1, self.max_lag) * every

    def submit_epoch(self, epoch, lr, last, want_model, want_readable=False):
        setup = self.setup
        data = setup.data
        blocks = data.blocks(epoch)
        plans = setup.clock.rounds(epoch, last)
        self.rounds_per_epoch = len(plans)
        self.every = setup.clock.sync_every(epoch)
        counts, stats, records, model = [], [], [], None
        for plan in plans:
            trained = self._train(blocks, epoch, lr, plan.share, plan.merges)
            counts.append(trained.counts)
            stats.append(trained.stats)
            if plan.merges:
                records_k, model = self._merge(
                    trained.counts, trained.stats, epoch,
                    (want_model or want_readable) and plan.ends_epoch,
                    None if plan.share is None else plan.rows)
                records.extend(records_k)
        data.forget(epoch)
        if not last:
            data.prepare(epoch + 1)
        return EpochHandle(epoch, lr, bool(records),
                           EpochScalars(counts, stats, records), model)

    def _train(self, blocks, epoch, lr, share, merges=False):
        """Submit one training task per worker for ``share`` of the
        epoch: a worker whose round ended starts from its next round's
        snapshot, the others continue their round."""
        setup = self.setup
        lifetimes = setup.lifetimes
        inputs = []
        for w in range(setup.n_workers):
            if self.round_open[w]:
                self._begin_round(w)
                inputs.append((self.start[w][0], self.start[w][1]
                               if self.average else self.optims[w]))
            else:
                inputs.append((self.current[w], self.optims[w]))
        # A fold follows (``merges``): it adds the update to the round's
        # start, which a bf16 payload is the update from.
        trained = submit_training(
            setup, blocks, inputs, epoch, lr, share,
            merge_from=[start[0] for start in self.start] if merges
            else None)
        for w, (state_in, optim_in) in enumerate(inputs):
            if not self.round_open[w]:
                # Mid-round: the previous epoch's outputs, read only here.
                lifetimes.release(state_in, optim_in)
            elif not self.average:
                # The worker's own optimizer chain (an averaged one belongs
                # to the snapshot, released with its round).
                lifetimes.release(optim_in)
            self.round_open[w] = False
        self.current = list(trained.states)
        self.optims = list(trained.optims)
        return trained

    def merge_fields(self, handle, scalars):
        # MergeReports; history_ shows plain dicts.
        return {"merges": [
            {"worker": int(r.worker), "index": int(r.index),
             "staleness": float(r.staleness), "weight": float(r.weight)}
            for r in _reports(scalars.merges)]}

    def final_model(self):
        if self.trained:
            # merge_delay=1: the replicas no start will read any more.
            self.setup.lifetimes.release(self.trained[-2:])
            self.trained = []
        return self._global_parts()[0]

    def carry(self):
        return self._carry(self._global_parts())

    def checkpoint_parts(self):
        """The global model after this round's merges. Reading it makes
        the next round's merges wait for all of this round's (training
        does not wait)."""
        parts = _async_merge.submit_global_parts(self.glob)
        snapshot = _snapshot.snapshot(parts[0], self._carry(parts))
        self.setup.lifetimes.release(list(parts))
        return snapshot

    def _carry(self, parts):
        """The :class:`Carry` of the global model's parts (futures)."""
        optims = None
        if self.setup.params.optimizer_state == "keep":
            optims = list(self.optims)
        elif self.average:
            optims = [parts[1]]
        state = {"velocity": parts[2]}
        if self.setup.params.outer_optimizer is not None:
            state["outer_optimizer"] = parts[3]
        return Carry(optims, state)

    def _global_parts(self):
        """Futures of the final global state, optimizer state, velocity
        and outer optimizer state (one task reading the global model,
        submitted once)."""
        if self._parts is None:
            self._parts = _async_merge.submit_global_parts(self.glob)
        return self._parts

    # ------------------------------------------------------------ rounds
    def _begin_round(self, w):
        """Choose the snapshot worker ``w`` starts its next round from."""
        r = len(self.rounds)
        if r == 0:
            return
        if self.delay:
            self._begin_delayed_round(w, r)
            return
        if self.max_lag == 0:
            # Released with the round that starts from it (_merge).
            self.start[w], self.picked[w] = self.next_start, False
            return
        own = self.rounds[r - 1][w]
        others = []
        if self.max_lag is not None and r - 1 - self.max_lag >= 0:
            others = [snap for v, snap in
                      enumerate(self.rounds[r - 1 - self.max_lag]) if v != w]
        if not others:
            self.start[w], self.picked[w] = own, False
            return
        self.start[w] = _async_merge.submit_freshest([own] + others)
        self.picked[w] = True

    def _begin_delayed_round(self, w, r):
        """``merge_delay=1``: worker ``w`` starts round ``r`` from its
        own replica, corrected by the global snapshot of round
        ``r - 2`` (:mod:`~dislib_nn.training.tasks._delayed_fold`), so
        it does not wait for its merge of round ``r - 1``."""
        own = self.trained[r - 1][w]
        if r == 1:
            merged = replica = None
            fallback, info = self.initial[0], self.initial[2]
        else:
            snap = self.start_before if self.max_lag == 0 \
                else self.rounds[r - 2][w]
            merged, replica, fallback, info = (snap[0],
                                               self.trained[r - 2][w],
                                               snap[0], snap[2])
        start, start_info = _delayed_fold.submit_delayed_round_start(
            own, merged, replica, fallback, info,
            _stale.round_rows_of(self.rules, self.trained_rows[r - 1]))
        self.start[w], self.picked[w] = (start, None, start_info), True
        if r >= 2:
            self.setup.lifetimes.release(self.trained[r - 2][w])

    def _merge(self, counts, stats, epoch, want_model, round_rows):
        lifetimes = self.setup.lifetimes
        if self.max_lag == 0:
            # One task folds the round; its snapshot is the next start.
            round_start, reports = _async_merge.submit_fold_round(
                self.glob, self.start, self.current,
                self.optims if self.average else None, counts, stats,
                epoch + 1, self.rules, round_rows)
            outputs, records = [(None, None, None)] * len(counts), [reports]
        else:
            folds = [_async_merge.submit_fold(
                self.glob, self.start[w], self.current[w],
                self.optims[w] if self.average else None, count, stats[w],
                w, epoch + 1, self.rules, round_rows)
                for w, count in enumerate(counts)]
            outputs = [snapshot for snapshot, _ in folds]
            records = [record for _, record in folds]
        for w in range(len(counts)):
            if not self.delay:
                # With the delay the next two starts read it.
                lifetimes.release(self.current[w])
            if self.average:
                lifetimes.release(self.optims[w])
            if self.picked[w]:
                lifetimes.release(list(self.start[w]))
        self.rounds.append(outputs)
        if self.delay:
            self.trained.append(self.current)
            self.trained_rows.append(round_rows)
        self.current = [None] * len(counts)
        self.round_open = [True] * len(counts)
        # A round's outputs are read by the next round of their worker
        # and by the others' round r + 1 + max_lag: release what no
        # round still to start can read.
        keep = 1 + (self.max_lag or 0) + self.delay
        old = len(self.rounds) - 1 - keep
        if old >= 0:
            lifetimes.release([list(snap) for snap in self.rounds[old]])
        model = None
        if self.max_lag == 0:
            # Read by the next round's starts (two rounds on with the
            # delay), all submitted by now.
            old_start = self.start_before if self.delay else self.next_start
            lifetimes.release(list(old_start or ()))
            if self.delay:
                self.start_before = self.next_start
            self.next_start = round_start
            if want_model:
                model = lifetimes.keep(self.next_start[0])
        elif want_model:
            model = lifetimes.keep(
                _async_merge.submit_freshest_state(outputs))
        return records, model


def _reports(merges):
    """The epoch's :class:`~.tasks._async_merge.MergeReport` records:
    one per fold, or (``max_lag=0``) one list per round."""
    for entry in merges:
        yield from entry if isinstance(entry, list) else (entry,)
