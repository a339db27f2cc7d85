"""shuffle, train_test_split and partition: permutations made by tasks."""

import numpy as np
import pytest
import torch

import dislib_nn as dnn
from dislib_nn import runtime
from dislib_nn.exceptions import InvalidParameterError, ShapeError


def _xy(n=103, block_size=10, y_block_size=None, sample=(2, 3)):
    """x holds each row's number in every entry; y is 10 times it."""
    rows = np.arange(n)
    a = np.broadcast_to(rows.reshape((n,) + (1,) * len(sample)),
                        (n,) + sample).astype(np.float32)
    x = dnn.from_array(np.ascontiguousarray(a), block_size=block_size)
    y = dnn.from_array(rows * 10, block_size=y_block_size or block_size)
    return x, y


def _rows(x):
    """The row numbers held by a DsTensor made by _xy."""
    c = x.collect()
    return c.reshape(len(c), -1)[:, 0].long().numpy()


@pytest.fixture(params=["gather", "pieces"])
def strategy(request):
    """Both task graphs (``moves``): one-pass gather (local) and pieces
    (COMPSs)."""
    return request.param


# ------------------------------------------------------------ shuffle
def test_shuffle_is_a_permutation_keeping_xy_aligned(backend, strategy):
    x, y = _xy()
    x2, y2 = dnn.shuffle(x, y, random_state=0, moves=strategy)
    rows = _rows(x2)
    assert sorted(rows) == list(range(103))
    assert not np.array_equal(rows, np.arange(103))
    assert np.array_equal(y2.collect().numpy(), rows * 10)
    assert x2.block_sizes == x.block_sizes and y2.block_sizes == y.block_sizes
    assert x2.shape == x.shape and x2.dtype == x.dtype


def test_shuffle_mixes_rows_across_blocks(backend):
    x, _ = _xy(n=100, block_size=25)
    first = _rows(dnn.shuffle(x, random_state=1))[:25]
    assert len(set(first // 25)) == 4


def test_shuffle_with_differently_blocked_y(backend, strategy):
    x, y = _xy(block_size=10, y_block_size=17)
    x2, y2 = dnn.shuffle(x, y, random_state=5, moves=strategy)
    assert y2.block_sizes == y.block_sizes
    assert np.array_equal(y2.collect().numpy(), _rows(x2) * 10)


def test_shuffle_same_seed_same_result_on_every_graph(backend):
    x, y = _xy()
    results = []
    for graph in ("gather", "pieces", "gather", "auto"):
        x2, y2 = dnn.shuffle(x, y, random_state=42, moves=graph)
        results.append((_rows(x2), y2.collect().numpy()))
    for rows, labels in results[1:]:
        assert np.array_equal(rows, results[0][0])
        assert np.array_equal(labels, results[0][1])
    other = _rows(dnn.shuffle(x, random_state=43))
    assert not np.array_equal(other, results[0][0])


def test_shuffle_without_y_returns_x_only(backend):
    x, _ = _xy()
    x2 = dnn.shuffle(x, random_state=0)
    assert isinstance(x2, dnn.DsTensor)
    y_only = dnn.shuffle(x, None, random_state=0)
    assert np.array_equal(_rows(x2), _rows(y_only))


def test_shuffle_one_block(backend):
    x, y = _xy(n=7, block_size=7)
    x2, y2 = dnn.shuffle(x, y, random_state=3)
    assert sorted(_rows(x2)) == list(range(7))
    assert np.array_equal(y2.collect().numpy(), _rows(x2) * 10)


def test_shuffle_is_uniform(backend):
    """Each row lands in each position about equally often (300 seeds)."""
    if backend != "sequential":
        pytest.skip("a statistical check of the plan: one backend is enough")
    x = dnn.from_array(np.arange(6), block_size=2)
    counts = np.zeros((6, 6), dtype=int)
    for seed in range(300):
        rows = dnn.shuffle(x, random_state=seed).collect().numpy()
        counts[rows, np.arange(6)] += 1
    # Binomial(300, 1/6): mean 50, sd 6.5.
    assert counts.min() >= 25 and counts.max() <= 80, counts


def test_shuffle_errors():
    x, y = _xy()
    with pytest.raises(ShapeError, match="x and y given to shuffle must "
                       "have the same number of rows. Got 103 rows in x "
                       "and 100 in y"):
        dnn.shuffle(x, y[:100])
    with pytest.raises(InvalidParameterError, match="The 'x' parameter of "
                       "shuffle must be a DsTensor. Got ndarray"):
        dnn.shuffle(np.zeros(3))
    with pytest.raises(InvalidParameterError, match="'y' parameter of "
                       "shuffle must be a DsTensor. Got list"):
        dnn.shuffle(x, [1, 2])
    with pytest.raises(InvalidParameterError, match="'random_state' "
                       "parameter of shuffle"):
        dnn.shuffle(x, random_state=-1)


# --------------------------------------------------- train_test_split
@pytest.mark.parametrize("test_size, n_test", [
    (0.25, 26), (0.5, 52), (10, 10), (1, 1), (102, 102), (0.001, 1),
])
def test_train_test_split_sizes(backend, test_size, n_test):
    x, y = _xy()
    x_tr, x_te, y_tr, y_te = dnn.train_test_split(
        x, y, test_size=test_size, random_state=0)
    assert len(x_te) == len(y_te) == n_test
    assert len(x_tr) == len(y_tr) == 103 - n_test
    rows_tr, rows_te = _rows(x_tr), _rows(x_te)
    assert sorted(np.concatenate([rows_tr, rows_te])) == list(range(103))
    assert np.array_equal(y_tr.collect().numpy(), rows_tr * 10)
    assert np.array_equal(y_te.collect().numpy(), rows_te * 10)


def test_train_test_split_is_reproducible(backend):
    x, y = _xy()
    a = dnn.train_test_split(x, y, random_state=7)
    b = dnn.train_test_split(x, y, random_state=7)
    assert np.array_equal(_rows(a[1]), _rows(b[1]))
    c = dnn.train_test_split(x, y, random_state=8)
    assert not np.array_equal(_rows(a[1]), _rows(c[1]))


def test_train_test_split_without_shuffle_or_y(backend):
    x, _ = _xy()
    x_tr, x_te = dnn.train_test_split(x, test_size=3, shuffle=False)
    assert np.array_equal(_rows(x_te), [100, 101, 102])
    assert np.array_equal(_rows(x_tr), np.arange(100))


@pytest.mark.parametrize("n, n_blocks, test_size", [
    (1797, 4, 0.2), (103, 11, 0.25), (103, 11, 102), (103, 11, 1),
    (50, 3, 0.5),
])
@pytest.mark.parametrize("shuffle", [True, False])
def test_train_test_split_blocks_are_even(backend, n, n_blocks, test_size,
                                          shuffle):
    x, y = _xy(n=n, block_size=-(-n // n_blocks))
    x = x.rechunk(n_blocks=n_blocks)
    x_tr, x_te, y_tr, y_te = dnn.train_test_split(
        x, y, test_size=test_size, random_state=0, shuffle=shuffle)
    for part, other in ((x_tr, y_tr), (x_te, y_te)):
        assert part.n_blocks == min(n_blocks, len(part))
        assert max(part.block_sizes) - min(part.block_sizes) <= 1
        assert other.block_sizes == part.block_sizes
        assert np.array_equal(other.collect().numpy(), _rows(part) * 10)
    assert sorted(np.concatenate([_rows(x_tr), _rows(x_te)])) == \
        list(range(n))


@pytest.mark.parametrize("test_size, error, match", [
    (0, InvalidParameterError, r"'test_size' parameter of train_test_split "
                               r"must be an int in the range \[1, 102\]"),
    (103, InvalidParameterError, "Got 103 instead"),
    (1.0, InvalidParameterError, r"a float in the range \(0, 1\) or an int "
                                 r"in the range \[1, 102\]. Got 1.0"),
    (-0.1, InvalidParameterError, "Got -0.1 instead"),
    ("0.2", InvalidParameterError, "Got '0.2' instead"),
    (0.9999, ShapeError, "leaves 103 test and 0 training rows"),
])
def test_train_test_split_errors(test_size, error, match):
    x, y = _xy()
    with pytest.raises(error, match=match):
        dnn.train_test_split(x, y, test_size=test_size)


def test_train_test_split_length_mismatch():
    x, y = _xy()
    with pytest.raises(ShapeError, match="x and y given to train_test_split "
                       "must have the same number of rows"):
        dnn.train_test_split(x, y[1:])


# ---------------------------------------------------------- partition
def _labels(n=600, n_classes=5, seed=0, values=None):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_classes, n)
    return labels if values is None else np.asarray(values)[labels]


def _skew(y2, classes):
    """Mean total-variation distance of part label mixes to the global."""
    parts = [y2.collect().numpy()[a:b] for a, b in _bounds(y2.block_sizes)]
    overall = np.array([np.mean(np.concatenate(parts) == c)
                        for c in classes])
    return np.mean([0.5 * np.abs(np.array([np.mean(p == c) for c in classes])
                                 - overall).sum() for p in parts])


def _bounds(sizes):
    ends = np.cumsum(sizes)
    return zip(ends - np.array(sizes), ends)


def test_partition_iid(backend, strategy):
    x, y = _xy(n=103, block_size=20)
    x2, y2 = dnn.partition(x, y, 4, random_state=0, moves=strategy)
    assert x2.block_sizes == y2.block_sizes == (26, 26, 26, 25)
    rows = _rows(x2)
    assert sorted(rows) == list(range(103))
    assert np.array_equal(y2.collect().numpy(), rows * 10)


def test_partition_iid_without_y(backend):
    x, _ = _xy()
    x2 = dnn.partition(x, None, 3, random_state=0)
    assert x2.block_sizes == (35, 34, 34)


@pytest.mark.parametrize("alpha", [100.0, 1.0, 0.1])
def test_partition_label_skew_keeps_every_row_once(backend, strategy, alpha):
    labels = _labels()
    x = dnn.from_array(np.arange(600), block_size=150)
    y = dnn.from_array(labels, block_size=150)
    x2, y2 = dnn.partition(x, y, 6, alpha=alpha, random_state=1,
                           moves=strategy)
    assert x2.n_blocks == y2.n_blocks == 6
    assert min(x2.block_sizes) >= 1 and x2.block_sizes == y2.block_sizes
    rows = x2.collect().numpy()
    assert sorted(rows) == list(range(600))
    assert np.array_equal(y2.collect().numpy(), labels[rows])


def test_partition_skew_grows_as_alpha_shrinks(backend):
    labels = _labels(n=2000, n_classes=10)
    x = dnn.from_array(np.arange(2000), block_size=500)
    y = dnn.from_array(labels, block_size=500)
    skews = []
    for alpha in (1000.0, 1.0, 0.05):
        per_seed = [_skew(dnn.partition(x, y, 8, alpha=alpha,
                                        random_state=s)[1], range(10))
                    for s in range(3)]
        skews.append(np.mean(per_seed))
    assert skews[0] < 0.1 < skews[1] < skews[2], skews
    iid = _skew(dnn.partition(x, y, 8, random_state=0)[1], range(10))
    assert iid < 0.1


def test_partition_any_label_values_and_column_labels(backend):
    labels = _labels(n=200, n_classes=3, values=[-7, 3, 11])
    x = dnn.from_array(np.arange(200), block_size=60)
    y = dnn.from_array(labels.reshape(200, 1), block_size=45)
    x2, y2 = dnn.partition(x, y, 4, alpha=0.5, random_state=0)
    rows = x2.collect().numpy()
    assert y2.sample_shape == (1,)
    assert np.array_equal(y2.collect().numpy()[:, 0], labels[rows])


def test_partition_is_reproducible(backend):
    labels = _labels(n=300)
    x = dnn.from_array(np.arange(300), block_size=100)
    y = dnn.from_array(labels, block_size=100)
    a = dnn.partition(x, y, 5, alpha=0.3, random_state=9)
    b = dnn.partition(x, y, 5, alpha=0.3, random_state=9)
    assert a[0].block_sizes == b[0].block_sizes
    assert torch.equal(a[0].collect(), b[0].collect())
    c = dnn.partition(x, y, 5, alpha=0.3, random_state=10)
    assert not torch.equal(a[0].collect(), c[0].collect())


def test_partition_fails_when_parts_cannot_all_get_rows(backend):
    x = dnn.from_array(np.arange(50), block_size=25)
    y = dnn.from_array(np.zeros(50, dtype=np.int64), block_size=25)
    with pytest.raises(ShapeError, match="could not give each of the 10 "
                       "parts at least one row in 1000 draws with "
                       "alpha=0.001 and 1 classes. Use a larger alpha"):
        dnn.partition(x, y, 10, alpha=0.001, random_state=0)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"n_parts": 104}, InvalidParameterError,
     r"The 'n_parts' parameter of partition must be an int in the range "
     r"\[1, 103\] \(the number of rows\). Got 104 instead."),
    ({"n_parts": 0}, InvalidParameterError, "Got 0 instead"),
    ({"n_parts": 2.0}, InvalidParameterError, "Got 2.0 instead"),
    ({"n_parts": 2, "alpha": 0}, InvalidParameterError,
     r"'alpha' parameter of partition must be None or a float in the range "
     r"\(0, inf\). Got 0 instead"),
    ({"n_parts": 2, "alpha": float("inf")}, InvalidParameterError, "Got inf"),
    ({"n_parts": 2, "alpha": float("nan")}, InvalidParameterError, "Got nan"),
    ({"n_parts": 2, "alpha": "1"}, InvalidParameterError, "Got '1'"),
])
def test_partition_errors(kwargs, error, match):
    x, y = _xy()
    with pytest.raises(error, match=match):
        dnn.partition(x, y, **kwargs)


def test_partition_label_errors(backend):
    x, y = _xy()
    with pytest.raises(InvalidParameterError, match="partition with alpha "
                       r"\(label skew\) needs the labels y. Got y=None"):
        dnn.partition(x, None, 2, alpha=1.0)
    with pytest.raises(ShapeError, match=r"one label per row: y of shape "
                       r"\(n,\) or \(n, 1\). Got y of shape \(103, 2, 3\)"):
        dnn.partition(x, x, 2, alpha=1.0)
    with pytest.raises(ShapeError, match="x and y given to partition must "
                       "have the same number of rows. Got 103 rows in x and "
                       "3 in y"):
        dnn.partition(x, y[:3], 2)


def test_shuffled_blocks_are_released_when_dropped(backend):
    """No reference cycle keeps output blocks (shared memory) alive."""
    import gc
    import weakref
    x, y = _xy()
    gc.disable()
    try:
        x2, y2 = dnn.shuffle(x, y, random_state=0)
        runtime.barrier()
        refs = [weakref.ref(b) for b in x2._blocks + y2._blocks]
        del x2, y2
        assert all(r() is None for r in refs)
    finally:
        gc.enable()


@pytest.mark.parametrize("fn", ["shuffle", "partition"])
def test_moves_must_be_a_known_graph(fn):
    x, y = _xy()
    args = (x, y) if fn == "shuffle" else (x, y, 2)
    with pytest.raises(InvalidParameterError, match=(
            rf"The 'moves' parameter of {fn} must be a str among "
            r"\{'auto', 'gather', 'pieces'\}. Got 'fast' instead.")):
        getattr(dnn, fn)(*args, moves="fast")
