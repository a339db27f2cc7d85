"""from_array, random and zeros: block geometry, dtypes, errors."""

import numpy as np
import pytest
import torch

import dislib_nn as dnn
from dislib_nn import runtime
from dislib_nn.exceptions import (DtypeError, InvalidParameterError,
                                  ShapeError)

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16,
          np.int32, np.int64, np.bool_, np.complex64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_from_array_keeps_values_and_dtype(backend, dtype):
    a = (np.arange(70) % 5).astype(dtype).reshape(10, 7)
    x = dnn.from_array(a, block_size=3)
    assert x.block_sizes == (3, 3, 3, 1)
    assert x.dtype == torch.from_numpy(a).dtype
    assert torch.equal(x.collect(), torch.from_numpy(a))


@pytest.mark.parametrize("data", [
    torch.arange(30.).reshape(10, 3),
    torch.arange(30.).reshape(3, 10).t(),              # not contiguous
    torch.arange(10, dtype=torch.bfloat16),
    torch.arange(20.).reshape(10, 2).requires_grad_(),
])
def test_from_array_accepts_torch_tensors(backend, data):
    x = dnn.from_array(data, n_blocks=3)
    assert x.block_sizes == (4, 3, 3)
    assert torch.equal(x.collect(), data.detach())


def test_from_array_accepts_non_contiguous_numpy(backend):
    a = np.arange(40).reshape(10, 4)[::-1, ::2]
    assert torch.equal(dnn.from_array(a, block_size=4).collect(),
                       torch.from_numpy(a.copy()))


def test_from_array_copies_the_data(backend):
    a = np.zeros((4, 2))
    x = dnn.from_array(a, block_size=2)
    a[:] = 1
    assert torch.equal(x.collect(), torch.zeros(4, 2, dtype=torch.float64))


@pytest.mark.parametrize("kwargs, sizes", [
    ({"block_size": 4}, (4, 4, 2)), ({"block_size": 10}, (10,)),
    ({"block_size": 1}, (1,) * 10), ({"n_blocks": 3}, (4, 3, 3)),
    ({"n_blocks": 10}, (1,) * 10), ({"n_blocks": 1}, (10,)),
    ({"block_size": [2, 8]}, (2, 8)),
])
def test_block_sizes(kwargs, sizes):
    x = dnn.zeros((10, 2), **kwargs)
    assert x.block_sizes == sizes


def test_default_is_one_block_per_worker(backend):
    assert dnn.zeros((10, 2)).n_blocks == runtime.n_workers()
    assert dnn.from_array(np.zeros(1)).block_sizes == (1,)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"block_size": 2, "n_blocks": 2}, InvalidParameterError,
     "from_array takes block_size or n_blocks, not both. Got block_size=2 "
     "and n_blocks=2"),
    ({"block_size": 0}, InvalidParameterError,
     r"The 'block_size' parameter of from_array must be an int in the "
     r"range \[1, 10\] \(the number of rows\). Got 0 instead."),
    ({"block_size": 11}, InvalidParameterError, r"\[1, 10\].*Got 11"),
    ({"block_size": 2.5}, InvalidParameterError, "Got 2.5 instead"),
    ({"block_size": True}, InvalidParameterError, "Got True instead"),
    ({"n_blocks": 0}, InvalidParameterError,
     r"The 'n_blocks' parameter of from_array must be an int in the range "
     r"\[1, 10\] \(the number of rows\). Got 0 instead."),
    ({"n_blocks": 11}, InvalidParameterError, "Got 11 instead"),
    ({"block_size": (5, 6)}, ShapeError,
     r"block sizes \(5, 6\) given to from_array add up to 11 rows, not to "
     r"the 10 rows of the data"),
    ({"block_size": (5, 0, 5)}, InvalidParameterError,
     r"must hold ints >= 1 \(rows per block\). Got \(5, 0, 5\)"),
])
def test_block_size_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        dnn.from_array(np.zeros((10, 2)), **kwargs)


@pytest.mark.parametrize("data, error, match", [
    (np.zeros((0, 3)), ShapeError,
     r"from_array needs data with at least one row. Got shape \(0, 3\)"),
    (np.float64(3.0), InvalidParameterError, "Got float64 instead"),
    (np.array(3.0), ShapeError, r"Got shape \(\)"),
    (torch.zeros(0), ShapeError, r"Got shape \(0,\)"),
    (np.array(["a", "b"]), DtypeError,
     r"from_array needs numeric data, but 'data' has dtype <U1 \(strings\)"),
    (np.array([object(), 1]), DtypeError, r"dtype object \(Python objects\)"),
    (np.zeros(2, dtype=[("a", int)]), DtypeError, "raw or structured"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), DtypeError,
     "datetimes"),
    ([[1, 2], [3, 4]], InvalidParameterError,
     "must be a numpy array or a torch tensor. Got list instead"),
    (torch.zeros(3, 3).to_sparse(), InvalidParameterError,
     "must be a dense tensor"),
])
def test_from_array_errors(data, error, match):
    with pytest.raises(error, match=match):
        dnn.from_array(data)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64,
                                   torch.int64, torch.uint8, torch.bool,
                                   torch.bfloat16, "float16"])
def test_random_is_reproducible(backend, dtype):
    x = dnn.random((30, 2, 3), block_size=7, random_state=3, dtype=dtype)
    again = dnn.random((30, 2, 3), block_size=7, random_state=3, dtype=dtype)
    other = dnn.random((30, 2, 3), block_size=7, random_state=4, dtype=dtype)
    assert x.shape == (30, 2, 3) and x.block_sizes == (7, 7, 7, 7, 2)
    a, b, c = x.collect(), again.collect(), other.collect()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    if a.dtype.is_floating_point:
        assert 0 <= float(a.min()) and float(a.max()) < 1


def test_random_blocks_differ(backend):
    x = dnn.random((20, 5), block_size=10, random_state=0).collect()
    assert not torch.equal(x[:10], x[10:])


def test_random_state_forms(backend):
    a = dnn.random((5,), random_state=np.random.RandomState(0)).collect()
    b = dnn.random((5,), random_state=np.random.RandomState(0)).collect()
    c = dnn.random((5,), random_state=np.random.default_rng(0)).collect()
    assert torch.equal(a, b) and c.shape == (5,)


def test_zeros(backend):
    x = dnn.zeros((9, 3), n_blocks=2, dtype=np.int16)
    assert x.dtype == torch.int16 and x.block_sizes == (5, 4)
    assert torch.equal(x.collect(), torch.zeros(9, 3, dtype=torch.int16))


@pytest.mark.parametrize("fn", [dnn.random, dnn.zeros])
@pytest.mark.parametrize("shape, error, match", [
    ((0, 3), ShapeError, r"needs a shape with at least one row. Got shape "
                         r"\(0, 3\)"),
    ((), ShapeError, r"Got shape \(\)"),
    ((3, -1), InvalidParameterError, r"'shape' parameter of (random|zeros) "
                                     r"must be a tuple of ints >= 0"),
    ("abc", InvalidParameterError, "tuple of ints"),
])
def test_shape_errors(fn, shape, error, match):
    with pytest.raises(error, match=match):
        fn(shape)


def test_random_errors():
    with pytest.raises(InvalidParameterError, match="'random_state' "
                       "parameter of random must be None, an int >= 0"):
        dnn.random((3,), random_state="seed")
    with pytest.raises(DtypeError, match="'dtype' parameter of random must "
                       "be a torch or numpy dtype. Got 'nope'"):
        dnn.random((3,), dtype="nope")
    with pytest.raises(DtypeError, match="must be a numeric dtype"):
        dnn.random((3,), dtype=torch.quint8)
