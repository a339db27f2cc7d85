"""The synchronous strategy: replicas merge together at epoch boundaries.

This module is the *when* of model averaging (the *how* is
:mod:`dislib_nn.training.merge._sums`). Every epoch each of the ``P`` workers
trains its replica on the blocks dealt to it (:mod:`._dealing`), by one
task; after every ``sync_every`` epochs (and at the end of every fit)
the replicas are merged by a binary tree of merge tasks, weighted by the
samples each saw (all alike with ``balance=True``), optionally followed
by an outer step (``outer_optimizer``, or ``outer_lr`` /
``outer_momentum``: :mod:`dislib_nn.training.merge._outer`) that the
tree's root task takes too, and all of them restart from the merged
model. With ``merge_precision="bf16"``
the training tasks a merge follows return their bf16 updates from the
global model instead (:mod:`dislib_nn.training.merge._payload`), which
the tree sums in float32 and adds to it. With ``merge="sharded"`` there
is no tree: worker ``j`` merges shard ``j`` of every replica where its
own replica was trained, and the next round reads the merged shards
(:mod:`~dislib_nn.training.tasks._sharded`). Everything here deals in
futures: the master fetches no weights.
"""

import numbers

from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training._param_validation import Interval, Options
from dislib_nn.training.strategies._interface import (Carry, EpochHandle,
                                                      EpochScalars,
                                                      EpochStrategy)
from dislib_nn.training.strategies._replicas import submit_training
from dislib_nn.training.tasks import _reduce, _sharded, _snapshot
from dislib_nn.training.tasks._held import held

__all__ = ["SyncStrategy"]


class SyncStrategy(EpochStrategy):
    """Submits the tasks of the synchronous strategy, one epoch at a time.

    What carries over to the next fit: every worker's optimizer state
    (``optimizer_state="keep"``), the averaged one (``"average"``), and
    the outer step's state: the momentum buffer (``"velocity"``) or the
    outer optimizer's ``state_dict`` (``"outer_optimizer"``).
    """

    merges_within_epochs = True
    parameters = {"merge_delay": 0, "merge": "tree"}
    constraints = {"merge_delay": [Interval(numbers.Integral, 0, 1)],
                   "merge": [Options("tree", "sharded")]}

    @classmethod
    def check_params(cls, params, name):
        if params.own.merge == "sharded":
            _check_sharded(params, name)
        if params.own.merge_delay == 0:
            return
        for key, value, allowed in (
                ("merge_precision", params.merge_precision, "fp32"),
                ("optimizer_state", params.optimizer_state,
                 "keep' or 'reset")):
            if value == "average" or (key == "merge_precision"
                                      and value != "fp32"):
                raise InvalidParameterError(
                    f"{name} takes merge_delay=1 only with {key}="
                    f"'{allowed}': a replica that starts its next round "
                    f"before the merge keeps its own "
                    f"{'full-precision state' if key == 'merge_precision' else 'optimizer state'}"
                    f". Got merge_delay=1 and {key}={value!r}.")

    def __init__(self, setup):
        super().__init__(setup)
        n = setup.n_workers
        self.sharded = setup.params.own.merge == "sharded" and n > 1
        # The global model: whole (a future), or, after a sharded merge
        # without an outer step, its `shards`, joined into `state` only
        # when something reads it whole (None until then). Sharded, the
        # starting model is held by the runtime: each worker reads it
        # once, to train and to cut its shard of the merge's fallback.
        self.state = setup.lifetimes.keep(
            held(setup.state) if self.sharded else setup.state)
        self.shards = None
        self.states = [self.state] * n
        self.optims = setup.initial_optims()
        # The outer step's state (the momentum buffer, the outer
        # optimizer's), whole or, sharded, a ShardedModel; `joined`: its
        # sharded entries joined for carry(), once per round.
        self.outer = dict(setup.carried.state)
        self.joined = {}
        self.delay = setup.params.own.merge_delay
        # merge_delay=1: the replicas of the last merge, whose correction
        # the next round's starts take (None before the first merge).
        self.merged_replicas = None

    @property
    def scalar_lag(self):
        """1, or 0 with ``balance``: the next epoch is dealt with this
        one's measurements. Waiting costs little here: the counts arrive
        when training ends, while the merge, which the next epoch waits
        for anyway, still runs."""
        return 0 if self.setup.params.balance else 1

    def submit_epoch(self, epoch, lr, last, want_model, want_readable=False):
        setup = self.setup
        data = setup.data
        blocks = data.blocks(epoch)
        counts, stats = [], []
        merged = False
        for plan in setup.clock.rounds(epoch, last):
            if plan.share is not None and plan.rows == 0:
                # Fewer batches than shares: no worker has rows in this
                # one, so there is nothing to train or merge.
                continue
            share_counts, share_stats = self._train(
                blocks, epoch, lr, plan.share, plan.merges)
            counts.append(share_counts)
            stats.append(share_stats)
            if plan.merges:
                merged = self._merge(share_counts, share_stats,
                                     final=plan.last)
        data.forget(epoch)
        if not last:
            data.prepare(epoch + 1)
        model = readable = None
        if merged and want_model:
            model = self._global()
        if merged and (want_model or want_readable):
            # Validation reads the shards where they were merged: the
            # whole model is joined (a task, 1 - 1/P of a model into one
            # node) only when something else reads it.
            readable = self._global() if self.shards is None \
                else self.shards
        return EpochHandle(epoch, lr, merged,
                           EpochScalars(counts, stats, []), model, readable)

    def merge_fields(self, handle, scalars):
        # A merge follows every round of a merged epoch.
        return {"n_merges": len(scalars.counts) if handle.merged else 0}

    def _train(self, blocks, epoch, lr, share, merges):
        """Submit one training task per worker (for ``share`` of the
        epoch): each continues from its state and optimizer state; when
        a merge ``merges`` after them, into the global model."""
        start = self._round_start()
        trained = submit_training(
            self.setup, blocks, list(zip(self.states, self.optims)), epoch,
            lr, share,
            merge_from=[start] * self.setup.n_workers if merges else None)
        # The round's start stays: its merge falls back to it.
        self.setup.lifetimes.release(
            [s for s in self.states if s is not start], self.optims)
        self.states, self.optims = trained.states, trained.optims
        return trained.counts, trained.stats

    def _start_delayed(self, replicas, previous):
        """``merge_delay=1``: the next round starts from each replica's
        own state, corrected by the merge before this one
        (:mod:`dislib_nn.training.merge._delay`); this round's merge,
        just submitted, is read only by the round after, so it runs
        while the next round trains."""
        lifetimes = self.setup.lifetimes
        before = self.merged_replicas
        # The merge before this one is `previous` (kept as a global
        # model) when there was one in this fit.
        self.states = _reduce.submit_delayed_starts(
            replicas, None if before is None else previous, before,
            previous)
        if before is not None:
            lifetimes.release(before)
        self.merged_replicas = replicas

    def final_model(self):
        if self.merged_replicas is not None:
            self.setup.lifetimes.release(self.merged_replicas)
            self.merged_replicas = None
        model = self._global()
        if self.shards is not None:
            self.setup.lifetimes.release(self.shards)
            self.shards = None
        # What the fit carries out is whole: a sharded momentum buffer
        # is joined (once), and its shards released.
        whole = self._outer_whole()
        self.setup.lifetimes.release(
            [v for v in self.outer.values()
             if isinstance(v, _sharded.ShardedModel)])
        self.outer, self.joined = whole, {}
        return model

    def checkpoint_parts(self):
        return _snapshot.snapshot(self._global(), self.carry())

    def _global(self):
        """The future of the whole global model (joined from its shards
        the first time it is asked for)."""
        if self.state is None:
            self.state = self.setup.lifetimes.keep(
                _sharded.submit_join(self.shards))
        return self.state

    def carry(self):
        keep = self.setup.params.optimizer_state
        optims = None if keep == "reset" else (
            self.optims if keep == "keep" else self.optims[:1])
        return Carry(optims, self._outer_whole())

    def _outer_whole(self):
        """The outer state as the next fit, a checkpoint and ``save``
        take it: a sharded momentum buffer joined by one task."""
        whole = {}
        for key, value in self.outer.items():
            if isinstance(value, _sharded.ShardedModel):
                if key not in self.joined:
                    self.joined[key] = _sharded.submit_join(value)
                value = self.joined[key]
            whole[key] = value
        return whole

    def _forget_outer(self):
        """Release the outer state the merges just submitted read, and
        its joined copies."""
        self.setup.lifetimes.release(list(self.outer.values()),
                                     list(self.joined.values()))
        self.outer, self.joined = {}, {}

    def _merge(self, counts, stats, final=False):
        """Submit one merge of the replicas (and the outer step, if any);
        the next round starts from it. Returns True."""
        setup, p = self.setup, self.setup.params
        lifetimes = setup.lifetimes
        weights = counts
        if p.balance:
            # An uneven deal is for speed only: every replica weighs the
            # same (see docs/strategies.md, "balance=True").
            weights = [1] * len(counts)
        if self.sharded:
            self._merge_sharded(weights, stats)
            return True
        average_optims = p.optimizer_state == "average"
        replicas, replica_optims = self.states, self.optims
        step = _reduce.outer_step_of(p, setup.param_keys)
        # The tree's root takes the outer step too (one task less); one
        # replica's merge is no tree.
        folded = step is not None and len(replicas) > 1
        merged, merged_optim, new_outer = _reduce.submit_merge(
            replicas, replica_optims if average_optims else None, weights,
            lifetimes, stats, self.state,
            deltas=p.merge_precision != "fp32",
            outer=(step, self.outer.get(step.key), setup.task_components)
            if folded else None)
        if folded:
            lifetimes.release(list(self.outer.values()))
            self.outer = {step.key: new_outer}
        else:
            merged = self._outer_step(merged)
        previous = self.state
        # Global models are kept: early stopping may come back to one.
        self.state = lifetimes.keep(merged)
        if self.delay and not final:
            self._start_delayed(replicas, previous)
        else:
            self.states = [merged] * setup.n_workers
            # Merged is a new future even for one replica (a check of
            # it).
            lifetimes.release(replicas)
        if average_optims:
            self.optims = [merged_optim] * setup.n_workers
            if setup.n_workers > 1:
                lifetimes.release(replica_optims)
        return True

    def _outer_step(self, averaged):
        """The global model after the outer step on ``averaged`` (itself
        when the step is plain averaging)."""
        setup, outer = self.setup, self.outer
        merged, self.outer = _reduce.submit_outer_step(
            self.state, averaged, outer, setup.params, setup.task_components,
            setup.param_keys)
        if merged is not averaged:
            setup.lifetimes.release(averaged, list(outer.values()))
        return merged

    def _merge_sharded(self, weights, stats):
        """``merge="sharded"``: shard ``j`` is merged where replica ``j``
        was trained (:mod:`~dislib_nn.training.tasks._sharded`), and
        with ``outer_lr`` / ``outer_momentum`` takes its outer step
        there, its momentum buffer sharded too. With an
        ``outer_optimizer`` the shards are joined for its step, and the
        next round starts from the whole model it returns."""
        setup = self.setup
        lifetimes = setup.lifetimes
        replicas, start = self.states, self._round_start()
        step = _reduce.outer_step_of(setup.params, setup.param_keys)
        if step is not None and not step.optimizer:
            shards, velocity = _sharded.submit_sharded_merge_stepped(
                replicas, weights, stats, start, lifetimes, step,
                self.outer.get(step.key))
            self._forget_outer()
            if step.momentum:
                self.outer = {step.key: velocity}
            else:
                lifetimes.release(velocity)
        else:
            shards = _sharded.submit_sharded_merge(replicas, weights, stats,
                                                   start, lifetimes)
        lifetimes.release(replicas)
        if self.shards is not None:
            # The round's start: read by its training tasks and merges,
            # all submitted.
            lifetimes.release(self.shards)
            self.shards = None
        if step is not None and step.optimizer:
            averaged = _sharded.submit_join(shards)
            lifetimes.release(shards)
            self.state = lifetimes.keep(self._outer_step(averaged))
            self.states = [self.state] * setup.n_workers
        else:
            self.shards, self.state = shards, None
            self.states = [shards] * setup.n_workers

    def _round_start(self):
        """What the replicas' current round started from: the global
        model's shards, or the whole model."""
        return self.shards if self.shards is not None else self.state


def _check_sharded(params, name):
    """What ``merge="sharded"`` does not combine with, refused when the
    fit starts."""
    for key, value, allowed in (
            ("merge_delay", params.own.merge_delay, (0,)),
            ("merge_precision", params.merge_precision, ("fp32",)),
            ("optimizer_state", params.optimizer_state, ("keep", "reset"))):
        if value not in allowed:
            shown = " or ".join(repr(a) for a in allowed)
            raise InvalidParameterError(
                f"{name} takes merge='sharded' only with {key}={shown}: "
                f"the shards merge the replicas' float32 state dicts, "
                f"and nothing else. Got merge='sharded' and "
                f"{key}={value!r}; use merge='tree' for it.")
