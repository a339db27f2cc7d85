"""DsTensor: geometry, collect, map_blocks, rechunk, indexing, conversions."""

import functools
import pickle

import numpy as np
import pytest
import torch

import dislib_nn as dnn
from dislib_nn import runtime
from dislib_nn.data import DsTensor
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from tests.data import _fns


def _x(rows=23, block_size=5):
    return dnn.from_array(_fns.ARRAYS["2d"][:rows], block_size=block_size)


# ----------------------------------------------------------- geometry
def test_geometry_is_derived_from_block_sizes(backend):
    x = dnn.from_array(np.zeros((10, 3, 4)), block_size=4)
    assert x.block_sizes == (4, 4, 2)
    assert x.shape == (10, 3, 4)
    assert len(x) == 10
    assert x.n_blocks == 3
    assert x.sample_shape == (3, 4)
    assert x.ndim == 3
    assert x.dtype == torch.float64
    assert repr(x) == ("DsTensor(shape=(10, 3, 4), dtype=torch.float64, "
                       "block_sizes=(4, 4, 2))")


def test_repr_shortens_many_blocks(backend):
    x = dnn.zeros((100,), block_size=10)
    assert repr(x) == ("DsTensor(shape=(100,), dtype=torch.float32, "
                       "block_sizes=(10, 10, 10, ..., 10))")


def test_from_blocks_builds_without_tasks():
    blocks = [torch.zeros(2, 3), torch.ones(1, 3)]
    x = DsTensor._from_blocks(blocks, (2, 1), (3,), torch.float32)
    assert x.shape == (3, 3)
    assert x._blocks == blocks


def test_constructor_checks_geometry():
    with pytest.raises(ShapeError, match="got 2 blocks but 1 block sizes"):
        DsTensor([torch.zeros(1), torch.zeros(1)], (2,), (), torch.float32)
    with pytest.raises(InvalidParameterError, match="must hold ints >= 1"):
        DsTensor([torch.zeros(0)], (0,), (), torch.float32)
    x = DsTensor([torch.zeros(2, 3)], [2], [3], "float32")
    assert x.shape == (2, 3) and x.dtype == torch.float32


def test_not_iterable():
    x = DsTensor._from_blocks([torch.zeros(2)], (2,), (), torch.float32)
    with pytest.raises(TypeError):
        iter(x)


# ------------------------------------------------------------ collect
@pytest.mark.parametrize("name", sorted(_fns.ARRAYS))
@pytest.mark.parametrize("block_size", [1, 4, 23])
def test_collect_round_trip(backend, name, block_size):
    a = _fns.ARRAYS[name]
    x = dnn.from_array(a, block_size=block_size)
    out = x.collect()
    assert out.dtype == torch.from_numpy(a).dtype
    assert torch.equal(out, torch.from_numpy(a))


def test_collect_of_empty_selection(backend):
    x = _x()
    out = x[5:5].collect()
    assert out.shape == (0, 3) and out.dtype == torch.float32


# --------------------------------------------------------- map_blocks
def test_map_blocks_applies_by_block(backend):
    x = _x()
    y = x.map_blocks(_fns.double)
    assert y.block_sizes == x.block_sizes
    assert torch.equal(y.collect(), x.collect() * 2)


def test_map_blocks_with_aligned_others(backend):
    x = _x()
    y = x.map_blocks(_fns.add, x.map_blocks(_fns.double))
    assert torch.equal(y.collect(), x.collect() * 3)


def test_map_blocks_new_sample_shape_and_dtype(backend):
    x = dnn.from_array(_fns.ARRAYS["4d"], block_size=6)
    y = x.map_blocks(_fns.flatten_to_float16)
    assert y.sample_shape == (12,) and y.dtype == torch.float16
    expected = torch.from_numpy(_fns.ARRAYS["4d"]).reshape(23, 12)
    assert torch.equal(y.collect(), expected.to(torch.float16))


def test_map_blocks_accepts_numpy_results_and_partials(backend):
    x = dnn.from_array(_fns.ARRAYS["3d"], block_size=6)
    y = x.map_blocks(_fns.row_sums_numpy)
    assert y.shape == (23,) and y.dtype == torch.int64
    assert torch.equal(y.collect(),
                       torch.from_numpy(_fns.ARRAYS["3d"].sum(axis=(1, 2))))
    z = x.map_blocks(functools.partial(torch.mul, other=3))
    assert torch.equal(z.collect(), x.collect() * 3)


def test_map_blocks_asks_a_block_when_empty_probe_fails(backend):
    x = _x()
    y = x.map_blocks(_fns.needs_rows)
    assert y.sample_shape == (1,) and y.dtype == torch.float32
    assert torch.equal(y.collect(), x.collect()[:, :1])


def test_map_blocks_errors(backend):
    x = _x()
    with pytest.raises(InvalidParameterError, match="'fn' parameter of "
                       "map_blocks must be callable. Got 3"):
        x.map_blocks(3)
    with pytest.raises(InvalidParameterError, match=r"others\[0\] .* must "
                       r"be a DsTensor|'others\[0\]' parameter"):
        x.map_blocks(_fns.add, np.zeros(3))
    with pytest.raises(ShapeError, match=r"same block sizes as x. Got "
                       r"\(5, 5, 5, 5, 3\) for x and \(23,\) for "
                       r"others\[0\]"):
        x.map_blocks(_fns.add, x.rechunk(23))


def test_map_blocks_sends_lambdas_and_closures_by_value(backend):
    # No worker could import them by name; map_blocks sends them whole.
    x = _x()
    offset = 2.5
    shifted = x.map_blocks(lambda b: b + offset)
    assert torch.equal(shifted.collect(), x.collect() + offset)


@pytest.mark.parametrize("fn, match", [
    (_fns.drops_a_row, "must keep the rows of its block: given 5 rows"),
    (_fns.not_a_tensor, "must return a torch tensor or a numpy array. "
                        "Got list"),
    (_fns.geometry_depends_on_data, "must not depend on the data"),
])
def test_map_blocks_bad_results_fail_in_the_task(backend, fn, match):
    # Raised by map_blocks itself when it had to wait for a block to learn
    # the output geometry, else when the blocks are collected.
    with pytest.raises((ValueError, TypeError), match=match):
        _x().map_blocks(fn).collect()


# ------------------------------------------------------------ rechunk
@pytest.mark.parametrize("kwargs, sizes", [
    ({"block_size": 7}, (7, 7, 7, 2)),
    ({"block_size": 23}, (23,)),
    ({"n_blocks": 4}, (6, 6, 6, 5)),
    ({"block_size": (1, 20, 2)}, (1, 20, 2)),
])
def test_rechunk(backend, kwargs, sizes):
    x = _x()
    y = x.rechunk(**kwargs)
    assert y.block_sizes == sizes
    assert torch.equal(y.collect(), x.collect())


def test_rechunk_defaults_to_one_block_per_worker(backend):
    x = _x()
    y = x.rechunk()
    assert y.n_blocks == runtime.n_workers()
    assert torch.equal(y.collect(), x.collect())


def test_rechunk_keeps_whole_blocks():
    x = DsTensor._from_blocks([torch.zeros(2), torch.ones(3)], (2, 3), (),
                              torch.float32)
    y = x.rechunk((2, 3))
    assert y._blocks[0] is x._blocks[0] and y._blocks[1] is x._blocks[1]


def test_rechunk_errors():
    x = DsTensor._from_blocks([torch.zeros(5)], (5,), (), torch.float32)
    with pytest.raises(ShapeError, match=r"block sizes \(2, 2\) given to "
                       r"rechunk add up to 4 rows, not to the 5 rows"):
        x.rechunk((2, 2))
    with pytest.raises(InvalidParameterError, match=r"'block_size' "
                       r"parameter of rechunk must be an int in the range "
                       r"\[1, 5\] \(the number of rows\). Got 6 instead"):
        x.rechunk(6)
    with pytest.raises(InvalidParameterError, match="rechunk takes "
                       "block_size or n_blocks, not both"):
        x.rechunk(2, n_blocks=2)


# ----------------------------------------------------------- indexing
@pytest.mark.parametrize("key", [
    slice(3, 17), slice(None), slice(5, 10), slice(0, 1), slice(-4, None),
    slice(20, 3, -2), slice(None, None, 3), slice(30, 40),
])
def test_slices(backend, key):
    x = _x()
    y = x[key]
    expected = torch.from_numpy(_fns.ARRAYS["2d"][key].copy())
    assert y.shape == tuple(expected.shape)
    assert torch.equal(y.collect(), expected)


def test_slice_keeps_whole_blocks_and_cuts_the_ends():
    blocks = [torch.arange(5) + 5 * i for i in range(3)]
    x = DsTensor._from_blocks(blocks, (5, 5, 5), (), torch.int64)
    y = x[3:15]
    assert y.block_sizes == (2, 5, 5)
    assert y._blocks[1] is blocks[1] and y._blocks[2] is blocks[2]


@pytest.mark.parametrize("index", [
    [0, 5, 6, 22], [22, 0, 7, 7, 3], [-1, -23], np.array([4, 4, 4]),
    torch.tensor([10, 2, 19]), np.arange(23)[::-1].copy(),
])
def test_index_arrays(backend, index):
    x = _x()
    y = x[index]
    rows = np.asarray(index)
    assert torch.equal(y.collect(),
                       torch.from_numpy(_fns.ARRAYS["2d"][rows]))


def test_unordered_index_uses_first_block_size(backend):
    x = _x()
    y = x[np.arange(23)[::-1].copy()]
    assert y.block_sizes == (5, 5, 5, 5, 3)


def test_boolean_masks(backend):
    x = _x()
    mask = np.arange(23) % 3 == 0
    assert torch.equal(x[mask].collect(),
                       torch.from_numpy(_fns.ARRAYS["2d"][mask]))
    assert torch.equal(x[torch.from_numpy(mask)].collect(),
                       torch.from_numpy(_fns.ARRAYS["2d"][mask]))
    assert x[np.zeros(23, dtype=bool)].shape == (0, 3)


@pytest.mark.parametrize("key, match", [
    (3, r"use x\[3:4\] or x\[\[3\]\]"),
    ((slice(None), 0), "indexes rows only"),
    ([23], "Row index 23 is out of range for a DsTensor with 23 rows"),
    ([-24], "Row index -24 is out of range"),
    (np.zeros(5, dtype=bool), r"one entry per row \(23\). Got 5"),
    (np.zeros((2, 2), dtype=int), "1-D array of ints"),
    ([0.5, 1.5], "1-D array of ints"),
    ("rows", "1-D array of ints"),
])
def test_indexing_errors(key, match):
    x = DsTensor._from_blocks([torch.zeros(23, 3)], (23,), (3,),
                              torch.float32)
    with pytest.raises(InvalidParameterError, match=match):
        x[key]


# ------------------------------------------------ astype and reshape
@pytest.mark.parametrize("dtype, expected", [
    ("float16", torch.float16), (np.int32, torch.int32),
    (torch.float64, torch.float64), (torch.bfloat16, torch.bfloat16),
])
def test_astype(backend, dtype, expected):
    x = _x()
    y = x.astype(dtype)
    assert y.dtype == expected
    assert torch.equal(y.collect(), x.collect().to(expected))


def test_astype_same_dtype_shares_blocks():
    x = DsTensor._from_blocks([torch.zeros(2)], (2,), (), torch.float32)
    assert x.astype(torch.float32)._blocks[0] is x._blocks[0]


@pytest.mark.parametrize("dtype", ["U3", object, "datetime64[s]", "nope"])
def test_astype_errors(dtype):
    x = DsTensor._from_blocks([torch.zeros(2)], (2,), (), torch.float32)
    with pytest.raises(TypeError, match="dtype"):
        x.astype(dtype)


@pytest.mark.parametrize("shape, expected", [
    ((1, 28, 28), (1, 28, 28)), ((-1, 28), (28, 28)), (784, (784,)),
    ((784, 1), (784, 1)),
])
def test_reshape_samples(backend, shape, expected):
    a = np.arange(4 * 784, dtype=np.float32).reshape(4, 784)
    x = dnn.from_array(a, block_size=3)
    y = x.reshape_samples(shape)
    assert y.sample_shape == expected
    assert torch.equal(y.collect(),
                       torch.from_numpy(a).reshape((4,) + expected))


def test_reshape_to_scalar_samples(backend):
    x = dnn.from_array(np.arange(6).reshape(6, 1), block_size=4)
    y = x.reshape_samples(())
    assert y.shape == (6,)
    assert torch.equal(y.collect(), torch.arange(6))


@pytest.mark.parametrize("shape, error, match", [
    ((5, 5), ShapeError, r"samples of shape \(784,\) \(784 values\) into "
                         r"\(5, 5\) \(25 values\)"),
    ((-1, 5), ShapeError, r"into \(-1, 5\)"),
    ((-1, -1), InvalidParameterError, "at most one -1"),
    ("a", InvalidParameterError, "tuple of ints"),
])
def test_reshape_samples_errors(shape, error, match):
    x = DsTensor._from_blocks([torch.zeros(2, 784)], (2,), (784,),
                              torch.float32)
    with pytest.raises(error, match=match):
        x.reshape_samples(shape)


def test_blocks_are_futures_not_data(backend):
    """The master holds geometry only: blocks are runtime futures."""
    x = dnn.random((50, 4), block_size=10, random_state=0)
    assert not any(isinstance(b, torch.Tensor) for b in x._blocks)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(x._blocks[0])
