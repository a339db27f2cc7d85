"""The synchronous strategy: who trains on what, and when replicas merge.

This module is the *when* of model averaging (the *how* is
:mod:`dislib_nn.training._merge`). Every epoch each of the ``P`` workers
trains its replica on the blocks dealt to it, by one task; after every
``sync_every`` epochs (and at the end of every fit) the replicas are
merged by a binary tree of merge tasks and all of them restart from the
merged model. Everything here deals in futures: the master fetches no
weights.

Shuffle modes
-------------
``"global"``
    Rows are reshuffled across all blocks every epoch
    (:func:`dislib_nn.data.shuffle`); block ``b`` goes to worker
    ``b % P``.
``"local"``
    No data moves between blocks: each worker visits its rows in a new
    random order, and blocks are re-dealt to workers at random every
    epoch.
``"none"``
    Block ``b`` stays on worker ``b % P`` and rows are visited in order:
    the federated setting, where each worker keeps its own data.
"""

import numpy as np

from dislib_nn.runtime import delete_object
from dislib_nn.training import _tasks
from dislib_nn.training._epoch import EpochSettings

__all__ = ["SHUFFLE_MODES", "deal", "merges_after", "seed_for",
           "SyncTrainer"]

SHUFFLE_MODES = ("global", "local", "none")


def deal(n_blocks, n_workers, mode, seed):
    """Block indices per worker for one epoch (round robin, or re-dealt)."""
    order = np.arange(n_blocks)
    if mode == "local":
        order = np.random.default_rng(seed).permutation(n_blocks)
    return [order[w::n_workers].tolist() for w in range(n_workers)]


def merges_after(epoch, sync_every, last):
    """Whether replicas merge after ``epoch`` (0-based, across fits)."""
    return last or (epoch + 1) % sync_every == 0


def seed_for(base, *keys):
    """A 31-bit seed derived from a base seed and integer keys."""
    seq = np.random.SeedSequence([int(base)] + [int(k) for k in keys])
    return int(seq.generate_state(1)[0] & 0x7FFFFFFF)


class EpochFutures:
    """What one epoch submitted: scalar futures, and the merged model."""

    def __init__(self, counts, losses, merged):
        self.counts = counts
        self.losses = losses
        self.merged = merged   # future of the merged state, or None


class SyncTrainer:
    """Submits the tasks of the synchronous strategy, one epoch at a time.

    Parameters
    ----------
    components : Components
    x, y : DsTensor
        The training data (y already encoded for classifiers).
    n_workers : int
    state : dict or future
        The global model the replicas start from.
    optims : list
        One optimizer state (or None) per worker.
    velocity : dict or None
        The outer momentum buffer.
    config : dict
        ``batch_size``, ``shuffle``, ``optimizer_state``, ``device``,
        ``outer_lr``, ``outer_momentum``, ``sync_every``, ``seed``,
        ``output`` (OutputAdapter), ``param_keys``.
    shuffle_fn : callable
        ``shuffle_fn(x, y, seed) -> (x, y)`` for ``shuffle="global"``.
    """

    def __init__(self, components, x, y, n_workers, state, optims,
                 velocity, config, shuffle_fn):
        self.components = components
        self.x, self.y = x, y
        self.n_workers = n_workers
        self.state = state
        self.states = [state] * n_workers
        self.optims = list(optims)
        self.velocity = velocity
        self.config = config
        self._shuffle_fn = shuffle_fn
        self._prepared = {}
        self._task = _tasks.train_task_for(config["device"])

    def prepare(self, epoch):
        """Submit the data movement of ``epoch`` (ahead of time is fine)."""
        if epoch not in self._prepared:
            if self.config["shuffle"] == "global":
                seed = seed_for(self.config["seed"], 1, epoch)
                self._prepared[epoch] = self._shuffle_fn(self.x, self.y,
                                                         seed)
            else:
                self._prepared[epoch] = (self.x, self.y)
        return self._prepared[epoch]

    def run_epoch(self, epoch, lr, merge):
        """Submit one epoch's training tasks, and the merge if ``merge``."""
        cfg = self.config
        x, y = self.prepare(epoch)
        assignment = deal(x.n_blocks, self.n_workers, cfg["shuffle"],
                          seed_for(cfg["seed"], 2, epoch))
        counts, losses, states, optims = [], [], [], []
        for w, blocks in enumerate(assignment):
            settings = EpochSettings(
                lr=lr, batch_size=cfg["batch_size"],
                seed=seed_for(cfg["seed"], 3, epoch, w),
                shuffle_rows=cfg["shuffle"] == "local",
                device=cfg["device"],
                optimizer_state=cfg["optimizer_state"],
                output=cfg["output"])
            state, optim, count, loss = self._task(
                self.components, self.states[w], self.optims[w],
                [x._blocks[b] for b in blocks],
                [y._blocks[b] for b in blocks], settings)
            states.append(state)
            optims.append(optim)
            counts.append(count)
            losses.append(loss)
        self._forget(epoch)
        self._release(self.states + self.optims)
        self.states = states
        if cfg["optimizer_state"] == "reset":
            self._release(optims)
            optims = [None] * self.n_workers
        self.optims = optims
        merged = self._merge(counts) if merge else None
        return EpochFutures(counts, losses, merged)

    def _merge(self, counts):
        cfg = self.config
        average_optims = cfg["optimizer_state"] == "average"
        replicas, replica_optims = self.states, self.optims
        merged, merged_optim = _tasks.submit_merge(
            replicas, replica_optims if average_optims else None, counts)
        if cfg["outer_lr"] != 1.0 or cfg["outer_momentum"] != 0.0:
            averaged, velocity = merged, self.velocity
            merged, self.velocity = _tasks._outer_step(
                self.state, averaged, velocity, cfg["outer_lr"],
                cfg["outer_momentum"], cfg["param_keys"])
            self._release([averaged, velocity])
        self.state = merged
        self.states = [merged] * self.n_workers
        if self.n_workers > 1:
            self._release(replicas)
        if average_optims:
            self.optims = [merged_optim] * self.n_workers
            if self.n_workers > 1:
                self._release(replica_optims)
        return merged

    def _release(self, objs):
        """Tell the runtime these futures will not be used again.

        Under COMPSs every object version otherwise stays on the workers
        until the application ends (epochs x replicas x model size). Only
        replicas, optimizer states and momentum buffers already handed to
        the tasks that consume them are released; global models never
        (early stopping may come back to one), nor plain values.
        """
        seen = set()
        for obj in objs:
            if obj is None or obj is self.state or id(obj) in seen \
                    or isinstance(obj, dict) or _is_value(obj):
                continue
            seen.add(id(obj))
            delete_object(obj)

    def _forget(self, epoch):
        """Release an epoch's shuffled copy once its tasks are submitted."""
        data = self._prepared.pop(epoch, None)
        if data is None or data[0] is self.x:
            return
        for ds in data:
            for block in ds._blocks:
                if not _is_value(block):
                    delete_object(block)


def _is_value(obj):
    return hasattr(obj, "shape")
