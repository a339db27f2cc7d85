"""Moving rows between blocks: shuffle, train_test_split, partition.

The master never touches rows. It draws a small plan (how many rows of
each class go from each input block to each output block) and tasks do
the rest in two steps:

1. one small task per input block picks *which* of its rows go to each
   output block (uniformly at random, given the plan's counts);
2. each output block is filled with those rows, in a random order.

Step 2 has two equivalent task graphs with the same result for the same
seed. Under COMPSs, each input block is first cut into one piece per
output block and each output block merges its pieces, so every row
crosses the network once. On the local and sequential backends all
blocks are in one machine's shared memory, so output blocks gather their
rows directly from the input blocks, in one pass over the data, one task
per worker (each task maps every input block once).

A uniformly random permutation results: the counts follow the
multivariate hypergeometric law, the rows chosen inside a block and the
order inside an output block are uniform.
"""

import math
import numbers

import numpy as np

from dislib_nn.data import _rows, _tasks
from dislib_nn.data import _validation as v
from dislib_nn.data._lifetime import release
from dislib_nn.data._placing import per_block
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from dislib_nn.runtime import (blocks_share_memory, n_workers, placed,
                               wait_on)

#: The task graphs that move rows (the ``moves`` parameter): "gather"
#: (one pass: a task reads every input block, where blocks share one
#: machine's memory), "pieces" (two passes: each input block is split
#: into one piece per output block, which moves once, and the pieces are
#: merged), "auto" ("gather" where blocks share one machine's memory:
#: local, sequential; "pieces" elsewhere: COMPSs, dask).
MOVES = ("auto", "gather", "pieces")

# How many times partition redraws Dirichlet proportions that leave a
# part without rows before giving up.
_MAX_DRAWS = 1000


def shuffle(x, y=None, random_state=None, moves="auto"):
    """Shuffle the rows of ``x`` (and ``y``, alike) across all blocks.

    Every row appears exactly once in the result, block sizes are kept,
    and the same ``random_state`` gives the same order on every backend.

    Parameters
    ----------
    x : DsTensor
    y : DsTensor, default=None
        Rows aligned with ``x`` (labels, targets), moved the same way.
    random_state : int, numpy RandomState or Generator, default=None
    moves : {"auto", "gather", "pieces"}, default="auto"
        The task graph that moves the rows (the result is the same):
        ``"gather"``, one task per group of output blocks reading every
        input block, fewest tasks where blocks share one machine's
        memory; ``"pieces"``, each input block split into a piece per
        output block and the pieces merged, so that each row crosses the
        network once; ``"auto"``, gather on the local and sequential
        backends, pieces elsewhere.

    Returns
    -------
    x2 : DsTensor
    y2 : DsTensor
        Only when ``y`` is given.

    Examples
    --------
    >>> import numpy as np
    >>> import dislib_nn as dnn
    >>> x = dnn.from_array(np.arange(6), block_size=2)
    >>> y = dnn.from_array(np.arange(6) * 10, block_size=2)
    >>> x2, y2 = dnn.shuffle(x, y, random_state=0)
    >>> bool((y2.collect() == x2.collect() * 10).all())
    True
    """
    v.check_xy(x, y, "shuffle")
    one_pass = _one_pass(moves, "shuffle")
    return _shuffled(x, y, random_state, "shuffle", one_pass)


def _shuffled(x, y, random_state, caller, one_pass=None):
    rng, seeds = _randomness(random_state, caller, x.n_blocks, x.n_blocks)
    counts = _draw_counts(x.block_sizes, x.block_sizes, rng)
    x2 = _move(x, counts, None, seeds, one_pass)
    if y is None:
        return x2
    y2 = _move(y.rechunk(x.block_sizes), counts, None, seeds, one_pass)
    return x2, y2.rechunk(y.block_sizes)


def train_test_split(x, y=None, test_size=0.25, random_state=None,
                     shuffle=True):
    """Split rows into a training and a test set, as scikit-learn does.

    Parameters
    ----------
    x : DsTensor
    y : DsTensor, default=None
    test_size : float or int, default=0.25
        A fraction in (0, 1) of the rows (rounded up), or a number of
        rows in [1, n - 1].
    random_state : int, numpy RandomState or Generator, default=None
    shuffle : bool, default=True
        Draw the test rows uniformly at random (the rows are shuffled
        across all blocks on the way, as :func:`shuffle` does); if
        False the test set is the last rows.

    Returns
    -------
    x_train, x_test : DsTensor
        Each has as many blocks as ``x`` (fewer only when it has fewer
        rows than that), of sizes that differ by at most one row, so
        that workers get even shares of either.
    y_train, y_test : DsTensor
        Only when ``y`` is given; blocked as ``x_train`` and ``x_test``.

    Examples
    --------
    >>> import numpy as np
    >>> import dislib_nn as dnn
    >>> x = dnn.from_array(np.arange(1797), n_blocks=4)
    >>> x_train, x_test = dnn.train_test_split(x, test_size=0.2,
    ...                                        random_state=0)
    >>> x_train.block_sizes, x_test.block_sizes
    ((360, 359, 359, 359), (90, 90, 90, 90))
    """
    caller = "train_test_split"
    v.check_xy(x, y, caller)
    n_test = _n_test(test_size, len(x))
    n_train = len(x) - n_test
    sizes = (v.balanced(n_train, min(x.n_blocks, n_train))
             + v.balanced(n_test, min(x.n_blocks, n_test)))
    if shuffle:
        # One movement straight into the balanced output blocks: no
        # second pass to even out the blocks that a cut would leave.
        rng, seeds = _randomness(random_state, caller, x.n_blocks,
                                 len(sizes))
        counts = _draw_counts(x.block_sizes, sizes, rng)
        if y is not None:
            y = _move(y.rechunk(x.block_sizes), counts, None, seeds)
        x = _move(x, counts, None, seeds)
    else:
        x = x.rechunk(sizes)
        y = None if y is None else y.rechunk(sizes)
    out = [x[:n_train], x[n_train:]]
    if y is not None:
        out += [y[:n_train], y[n_train:]]
    return tuple(out)


def partition(x, y, n_parts, alpha=None, random_state=None, moves="auto"):
    """Regroup rows into ``n_parts`` blocks, one per federated client.

    Parameters
    ----------
    x : DsTensor
    y : DsTensor or None
        Labels aligned with ``x`` (one per row: shape ``(n,)`` or
        ``(n, 1)``); needed when ``alpha`` is given.
    n_parts : int
        Number of parts, in [1, n]; part ``i`` is block ``i`` of the
        result.
    alpha : float, default=None
        None gives IID parts of nearly equal size. A float > 0 gives
        label skew: each class is spread over the parts with proportions
        drawn from Dirichlet(alpha), as in the non-IID benchmarks of
        NIID-Bench (Li et al., 2022), including its rule that parts
        already above the mean size get no more rows of later classes.
        Smaller alpha, more skew. Every part gets at least one row.
    random_state : int, numpy RandomState or Generator, default=None
    moves : {"auto", "gather", "pieces"}, default="auto"
        The task graph that moves the rows, as in :func:`shuffle`.

    Returns
    -------
    x2 : DsTensor
        ``n_parts`` blocks; rows inside a part are in random order.
    y2 : DsTensor
        Only when ``y`` is given.
    """
    caller = "partition"
    v.check_xy(x, y, caller)
    one_pass = _one_pass(moves, caller)
    n_parts = v.check_int(n_parts, "n_parts", caller, 1, len(x),
                          " (the number of rows)")
    if alpha is not None:
        if isinstance(alpha, bool) or not isinstance(
                alpha, numbers.Real) or not 0 < alpha < math.inf:
            raise InvalidParameterError(
                f"The 'alpha' parameter of partition must be None or a "
                f"float in the range (0, inf). Got {alpha!r} instead.")
        if y is None:
            raise InvalidParameterError(
                "partition with alpha (label skew) needs the labels y. "
                "Got y=None.")
    rng, seeds = _randomness(random_state, caller, x.n_blocks, n_parts)
    if y is not None and y.block_sizes != x.block_sizes:
        y = y.rechunk(x.block_sizes)
    if alpha is None:
        out_sizes = v.balanced(len(x), n_parts)
        counts = _draw_counts(x.block_sizes, out_sizes, rng)
        labels = None
    else:
        labels, per_block = _labels(y)
        targets = _dirichlet_targets(per_block.sum(axis=0), n_parts,
                                     float(alpha), rng)
        counts = _draw_class_counts(per_block, targets, rng)
    x2 = _move(x, counts, labels, seeds, one_pass)
    y2 = None if y is None else _move(y, counts, labels, seeds, one_pass)
    release(labels)
    return x2 if y is None else (x2, y2)


# ------------------------------------------------------------- the plan
def _randomness(random_state, caller, n_in, n_out):
    """The plan's generator, and the integer seeds of the tasks.

    The seeds are drawn once so that x and y, moved by separate tasks,
    move alike.
    """
    plan, tasks = v.seed_sequence(random_state, caller).spawn(2)
    # 32-bit seeds: COMPSs hands ints above 2**31 to its Python workers
    # through a float, which keeps them exact only up to 2**53.
    states = [int(s) for s in tasks.generate_state(n_in + n_out,
                                                   dtype=np.uint32)]
    return np.random.default_rng(plan), (states[:n_in], states[n_in:])


def _draw_counts(in_sizes, out_sizes, rng):
    """``counts[i, j, 0]``: rows going from block i to output j."""
    return _draw_class_counts(np.array(in_sizes, dtype=np.int64)[:, None],
                              np.array(out_sizes, dtype=np.int64)[None, :],
                              rng)


def _draw_class_counts(per_block, targets, rng):
    """Counts per (block, output, class), given per-class output totals.

    ``per_block[i, c]`` rows of class c are in block i and
    ``targets[c, j]`` of them must reach output j; which rows go where
    follows the multivariate hypergeometric law, block after block.
    """
    n_in, n_classes = per_block.shape
    n_out = targets.shape[1]
    counts = np.zeros((n_in, n_out, n_classes), dtype=np.int64)
    left = targets.astype(np.int64).copy()
    for c in range(n_classes):
        for i in range(n_in):
            if per_block[i, c]:
                counts[i, :, c] = rng.multivariate_hypergeometric(
                    left[c], int(per_block[i, c]))
                left[c] -= counts[i, :, c]
    return counts


def _dirichlet_targets(class_totals, n_parts, alpha, rng):
    """``targets[c, j]``: rows of class c for part j (every part >= 1)."""
    n_rows = int(class_totals.sum())
    for _ in range(_MAX_DRAWS):
        targets = np.zeros((len(class_totals), n_parts), dtype=np.int64)
        sizes = np.zeros(n_parts, dtype=np.int64)
        for c, total in enumerate(class_totals):
            share = rng.dirichlet(np.full(n_parts, alpha))
            share = share * (sizes < n_rows / n_parts)
            share /= share.sum()
            cuts = (np.cumsum(share)[:-1] * total).astype(np.int64)
            targets[c] = np.diff(np.concatenate(([0], cuts, [total])))
            sizes += targets[c]
        if sizes.min() >= 1:
            return targets
    raise ShapeError(
        f"partition could not give each of the {n_parts} parts at least "
        f"one row in {_MAX_DRAWS} draws with alpha={alpha} and "
        f"{len(class_totals)} classes. Use a larger alpha or fewer parts.")


def _labels(y):
    """Per-block class numbers (futures) and per-block class counts."""
    if len(y.sample_shape) > 1 or (y.sample_shape and
                                   y.sample_shape[0] != 1):
        raise ShapeError(
            f"partition with alpha needs one label per row: y of shape "
            f"(n,) or (n, 1). Got y of shape {y.shape}.")
    found = wait_on([_tasks._class_counts(b) for b in y._blocks])
    classes = np.unique(np.concatenate([values for values, _ in found]))
    per_block = np.zeros((y.n_blocks, len(classes)), dtype=np.int64)
    for i, (values, counts) in enumerate(found):
        per_block[i, np.searchsorted(classes, values)] = counts
    labels = [_tasks._encode_labels(b, classes) for b in y._blocks]
    return labels, per_block


# --------------------------------------------------------- the movement
def _move(x, counts, labels, seeds, one_pass=None):
    """The rows of ``x`` moved as ``counts`` says (see the module doc).

    Every intermediate (the index plans, the pieces) is released as soon
    as the tasks that read it are submitted: nothing of a shuffle stays
    with the runtime but the output blocks.
    """
    n_in, n_out, _ = counts.shape
    split_seeds, merge_seeds = seeds
    # One plan per input block (its rows for every output block): the
    # master handles O(blocks) futures per shuffle, not blocks squared.
    index = [_tasks._split_index(None if labels is None else labels[i],
                                 counts[i], split_seeds[i])
             for i in range(n_in)]
    if one_pass is None:
        one_pass = _one_pass("auto", "")
    if one_pass:
        blocks = [None] * n_out
        per_task = -(-n_out // n_workers())
        for start in range(0, n_out, per_task):
            group = list(range(start, min(start + per_task, n_out)))
            out = _placeholders(len(group))
            with placed(start, of=n_out):
                _tasks._shuffle_gather(x._blocks, index, group,
                                       [merge_seeds[j] for j in group], out)
            blocks[start:start + len(group)] = out
        release(index)
    else:
        pieces = []
        for i in range(n_in):
            row = _placeholders(n_out)
            _tasks._split(x._blocks[i], index[i], row)
            pieces.append(row)
        release(index)
        # Output block j is made where a fit trains block j of n_out.
        blocks = per_block(n_out, lambda j: _tasks._merge(
            [pieces[i][j] for i in range(n_in)], merge_seeds[j]))
        release(pieces)
    sizes = tuple(int(s) for s in counts.sum(axis=(0, 2)))
    return _rows._like(x, blocks, sizes)


def _one_pass(moves, caller):
    """Whether ``moves`` (:data:`MOVES`) moves rows in one pass."""
    if moves not in MOVES:
        raise InvalidParameterError(
            f"The 'moves' parameter of {caller} must be a str among "
            f"{{{', '.join(repr(m) for m in MOVES)}}}. Got {moves!r} "
            f"instead.")
    if moves == "auto":
        return blocks_share_memory()
    return moves == "gather"


def _placeholders(n):
    """A COLLECTION_OUT list: ``n`` distinct objects that stand for the
    outputs (COMPSs tracks them by ``id()``; ``None`` would be one datum
    for all of them, and could not be rebuilt on the worker)."""
    return [object() for _ in range(n)]


def _n_test(test_size, n_rows):
    caller = "train_test_split"
    if isinstance(test_size, numbers.Integral) and not isinstance(
            test_size, bool):
        return v.check_int(test_size, "test_size", caller, 1, n_rows - 1,
                           " (rows, leaving one to train on)")
    if isinstance(test_size, numbers.Real) and not isinstance(
            test_size, bool) and 0 < test_size < 1:
        n_test = math.ceil(test_size * n_rows)
        if 1 <= n_test <= n_rows - 1:
            return n_test
        raise ShapeError(
            f"train_test_split with test_size={test_size} on {n_rows} "
            f"rows leaves {n_test} test and {n_rows - n_test} training "
            f"rows; both need at least one.")
    raise InvalidParameterError(
        f"The 'test_size' parameter of train_test_split must be a float in "
        f"the range (0, 1) or an int in the range [1, {n_rows - 1}]. Got "
        f"{test_size!r} instead.")
