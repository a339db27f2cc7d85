"""Who trains on what in an epoch: shuffles, dealing blocks, balance.

Both strategies train epoch ``e`` of worker ``w`` on the blocks
:class:`EpochData` deals it, with the seeds it derives, so that the same
``random_state`` gives the same data to the same replica whichever
strategy runs.

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

Replicas
--------
An explicit ``n_workers`` above the number of blocks of a DsTensor X
(an array is always split into enough blocks) is met where the data
allows it (:func:`replicas`): with ``"global"`` the rows are re-dealt
every epoch anyway, so X and y are re-blocked once, as an array would
be, and ``n_workers`` replicas train; with ``"local"`` and ``"none"`` a
block is a worker's whole share, which fit does not split, so one
replica trains per block and a ``UserWarning`` says so.

Balance
-------
With ``balance=True`` the blocks of an epoch are dealt in proportion to
each worker's measured throughput (rows per second of its training
tasks, from the sample counts and compute times the epoch loop already
reads), so that workers finish together: see :func:`balanced_deal`.
"""

import math

import numpy as np

from dislib_nn._user_warning import warn_user
from dislib_nn.training import _seeds

__all__ = ["SHUFFLE_MODES", "block_order", "deal", "balanced_deal",
           "replicas", "Throughput", "EpochData"]

SHUFFLE_MODES = ("global", "local", "none")


def block_order(n_blocks, mode, seed):
    """The order blocks are dealt in: as they are, or permuted (local)."""
    if mode == "local":
        return np.random.default_rng(seed).permutation(n_blocks).tolist()
    return list(range(n_blocks))


def deal(n_blocks, n_workers, mode, seed):
    """Block indices per worker for one epoch (round robin, or re-dealt)."""
    order = block_order(n_blocks, mode, seed)
    return [order[w::n_workers] for w in range(n_workers)]


def replicas(x, y, asked, available, shuffle, blocks_per_worker=1):
    """The training data's blocks and the number of replicas to train.

    Parameters
    ----------
    x, y : DsTensor
        The training data, with the same block sizes.
    asked : int or None
        The ``n_workers`` parameter; None takes ``available`` as an upper
        bound, never re-blocks and never warns.
    available : int
        The workers to use: ``asked``, or the runtime's when None.
    shuffle : {"global", "local", "none"}
    blocks_per_worker : int, default=1
        Blocks per worker an array would be split into (``balance``).

    Returns
    -------
    x, y : DsTensor
        Re-blocked into ``min(asked * blocks_per_worker, rows)`` blocks
        when ``shuffle="global"`` and X has fewer blocks than ``asked``;
        else as given.
    n_replicas : int
    """
    if asked is None or x.n_blocks >= asked:
        return x, y, min(available, x.n_blocks)
    if shuffle == "global":
        x = x.rechunk(n_blocks=min(asked * blocks_per_worker, len(x)))
        # (After a validation split there may be fewer rows than asked.)
        return x, y.rechunk(x.block_sizes), min(asked, x.n_blocks)
    warn_user(
        f"n_workers={asked} but X has {x.n_blocks} blocks: training "
        f"{x.n_blocks} replicas; re-block X with X.rechunk(n_blocks="
        f"{asked}) (and y alike) to use {asked}. With shuffle={shuffle!r} "
        f"each worker keeps whole blocks, so fit does not split them; "
        f"shuffle='global' re-blocks by itself.", UserWarning)
    return x, y, x.n_blocks


def balanced_deal(order, sizes, rates):
    """Deal blocks so that each worker's rows are proportional to its rate.

    Blocks are taken in ``order`` and each goes to the worker furthest
    below its target (``rate_w / sum(rates)`` of all rows, measured in
    rows), ties to the lower index; every worker gets at least one block
    while there are enough. Deterministic for given rates.

    Parameters
    ----------
    order : sequence of int
        Block indices, in the order they are dealt.
    sizes : sequence of int
        Rows per block (indexed by block).
    rates : sequence of float
        Rows per second of each worker (> 0).

    Returns
    -------
    list of list of int
        Block indices per worker.
    """
    rates = np.asarray(rates, dtype=np.float64)
    n_workers = len(rates)
    total = float(sum(sizes[b] for b in order))
    target = rates / rates.sum() * total
    given = np.zeros(n_workers)
    out = [[] for _ in range(n_workers)]
    order = list(order)
    # One block each first (largest rates first), so nobody idles.
    for w in np.argsort(-rates, kind="stable")[:len(order)]:
        b = order.pop(0)
        out[w].append(b)
        given[w] += sizes[b]
    for b in order:
        w = int(np.argmax(target - given))
        out[w].append(b)
        given[w] += sizes[b]
    return [sorted(blocks) for blocks in out]


class Throughput:
    """Each worker's rows per second, from the epochs read so far; or
    ``fixed`` rates (``balance=[...]``), never measured."""

    def __init__(self, n_workers, fixed=None):
        self.fixed = fixed is not None
        self.rates = [float(r) for r in fixed] if self.fixed \
            else [None] * n_workers

    def observe(self, counts, compute_s):
        if self.fixed:
            return
        for w, (n, s) in enumerate(zip(counts, compute_s)):
            if n and s and s > 0:
                self.rates[w] = n / s

    def known(self):
        return all(r is not None for r in self.rates)


class EpochData:
    """The blocks each worker trains on, epoch by epoch.

    Parameters
    ----------
    x, y : DsTensor
        The training data (y already encoded).
    n_workers : int
    shuffle : {"global", "local", "none"}
    seed : int
        The base of the epochs' seed streams.
    shuffle_fn : callable
        ``shuffle_fn(x, y, seed) -> (x, y)`` for ``shuffle="global"``.
    balance : bool
    keep_last : bool, default=False
        Keep the blocks last dealt (:meth:`last_dealt`) after the epoch
        is forgotten, until the next epoch is dealt: what the BatchNorm
        recompute at the end of a fit reads.
    rates : list of float, default=None
        With ``balance``: each worker's relative speed, dealt by from
        the first epoch instead of measured.
    """

    def __init__(self, x, y, n_workers, shuffle, seed, shuffle_fn,
                 balance=False, keep_last=False, rates=None):
        self.x, self.y = x, y
        self.keep_last = keep_last
        self._last = None
        self.n_workers = n_workers
        self.shuffle = shuffle
        self.seed = seed
        self.balance = balance
        self.throughput = Throughput(n_workers, rates)
        self._shuffle_fn = shuffle_fn
        self._prepared = {}

    @property
    def n_rows(self):
        return int(sum(self.x.block_sizes))

    def prepare(self, epoch):
        """Submit the data movement of ``epoch`` (ahead of time is fine)."""
        if epoch not in self._prepared:
            if self.shuffle == "global":
                seed = _seeds.seed_for(self.seed, _seeds.SHUFFLE, epoch)
                self._prepared[epoch] = self._shuffle_fn(self.x, self.y,
                                                         seed)
            else:
                self._prepared[epoch] = (self.x, self.y)
        return self._prepared[epoch]

    def assignment(self, epoch):
        """Block indices per worker for ``epoch``."""
        x, _ = self.prepare(epoch)
        seed = _seeds.seed_for(self.seed, _seeds.DEAL, epoch)
        if self.balance and self.throughput.known():
            return balanced_deal(block_order(x.n_blocks, self.shuffle, seed),
                                 x.block_sizes, self.throughput.rates)
        return deal(x.n_blocks, self.n_workers, self.shuffle, seed)

    def blocks(self, epoch):
        """``(x_blocks, y_blocks)`` per worker for ``epoch``."""
        x, y = self.prepare(epoch)
        x_blocks, y_blocks = x.blocks, y.blocks
        dealt = [([x_blocks[b] for b in blocks],
                  [y_blocks[b] for b in blocks])
                 for blocks in self.assignment(epoch)]
        if self.keep_last:
            # Holding x and y keeps their blocks' leases alive.
            self._last = (epoch, dealt, x, y)
        return dealt

    def last_dealt(self):
        """``(epoch, blocks)`` of the epoch dealt last (``blocks`` as
        :meth:`blocks` returned them), with ``keep_last``; else None."""
        return None if self._last is None else self._last[:2]

    def block_homes(self, epoch):
        """Per worker, ``((b, n), nbytes)``: its first block of ``epoch``
        is block ``b`` of ``n``, made on the node of replica ``b`` of
        ``n`` (:mod:`dislib_nn.data._placing`), and its blocks of X and
        y hold ``nbytes``; None for a worker with no block."""
        x, y = self.prepare(epoch)
        row_bytes = sum(math.prod(t.sample_shape) * t.dtype.itemsize
                        for t in (x, y))
        return [None if not blocks else (
                    (blocks[0], x.n_blocks),
                    row_bytes * sum(x.block_sizes[b] for b in blocks))
                for blocks in self.assignment(epoch)]

    def rows(self, epoch):
        """Rows per worker for ``epoch``."""
        x, _ = self.prepare(epoch)
        return [int(sum(x.block_sizes[b] for b in blocks))
                for blocks in self.assignment(epoch)]

    def train_seed(self, epoch, worker):
        return _seeds.seed_for(self.seed, _seeds.TRAIN, epoch, worker)

    def forget(self, epoch):
        """Drop an epoch's shuffled copy once its tasks are submitted.

        Its blocks are released with the last DsTensor holding them (see
        ``dislib_nn.data._lifetime``); the training data's own blocks,
        held by ``self.x``, stay.
        """
        self._prepared.pop(epoch, None)
