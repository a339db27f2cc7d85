"""ds-array interoperability.

from_ds_array reads only a ds-array's attributes, so most tests use a
stand-in with dislib's layout; the last ones use dislib itself (installed
with ``pip install --no-deps dislib``) over PyCOMPSs's real binding (the
sources ``tests/_compss_sources`` finds; outside runcompss its tasks run
inline), and are skipped when dislib or the binding is absent.
"""

import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import dislib_nn as dnn
from dislib_nn.exceptions import InvalidParameterError
from tests._compss_sources import PYCOMPSS


class FakeDsArray:
    """The attributes of dislib.data.array.Array that from_ds_array reads."""

    def __init__(self, array, block_shape, sparse=False):
        rows, cols = block_shape
        self.shape = array.shape
        self._top_left_shape = block_shape
        self._reg_shape = block_shape
        self._blocks = [[array[i:i + rows, j:j + cols]
                         for j in range(0, array.shape[1], cols)]
                        for i in range(0, array.shape[0], rows)]
        if sparse:
            self._blocks = [[sp.csr_matrix(b) for b in row]
                            for row in self._blocks]
        self.deleted = []

    def __del__(self):
        pass


@pytest.mark.parametrize("block_shape", [(3, 4), (10, 7), (1, 1), (4, 7)])
def test_from_ds_array_concatenates_column_blocks(backend, block_shape):
    a = np.arange(70.).reshape(10, 7)
    x = dnn.from_ds_array(FakeDsArray(a, block_shape))
    rows = block_shape[0]
    assert x.shape == (10, 7) and x.dtype == torch.float64
    assert x.block_sizes == tuple(min(rows, 10 - i)
                                  for i in range(0, 10, rows))
    assert torch.equal(x.collect(), torch.from_numpy(a))


def test_from_ds_array_sparse_and_dtype(backend):
    a = np.eye(6, dtype=np.float64)
    x = dnn.from_ds_array(FakeDsArray(a, (4, 4), sparse=True),
                          dtype=torch.float32)
    assert x.dtype == torch.float32
    assert torch.equal(x.collect(), torch.eye(6))


def test_from_ds_array_keeps_int_dtype(backend):
    a = np.arange(12, dtype=np.int32).reshape(4, 3)
    x = dnn.from_ds_array(FakeDsArray(a, (2, 2)))
    assert x.dtype == torch.int32
    assert torch.equal(x.collect(), torch.from_numpy(a))


def test_from_ds_array_errors():
    with pytest.raises(InvalidParameterError, match="The 'a' parameter of "
                       "from_ds_array must be a dislib ds-array .* Got "
                       "ndarray, which lacks _blocks, _top_left_shape, "
                       "_reg_shape"):
        dnn.from_ds_array(np.zeros((3, 3)))
    with pytest.raises(InvalidParameterError, match="cannot produce "
                       "bfloat16"):
        dnn.from_ds_array(FakeDsArray(np.zeros((2, 2)), (1, 1)),
                          dtype=torch.bfloat16)


# ---------------------------------------------------------- with dislib
@pytest.fixture(scope="module")
def dislib(_sources):
    # dislib imports pycompss at import time: outside runcompss the real
    # binding runs its tasks inline, as it does for any dislib script.
    try:
        import pycompss  # noqa: F401
    except ImportError:
        sys.path.insert(0, PYCOMPSS)       # dislib imports pycompss
    return pytest.importorskip("dislib")


def test_from_ds_array_matches_ds_array_collect(backend, dislib):
    a = np.random.default_rng(0).random((25, 9))
    ds = dislib.array(a, block_size=(7, 4))
    x = dnn.from_ds_array(ds)
    assert x.block_sizes == (7, 7, 7, 4)
    assert torch.equal(x.collect(), torch.from_numpy(ds.collect()))


def test_from_ds_array_of_sparse_ds_array(backend, dislib):
    a = sp.random(12, 5, density=0.3, format="csr", random_state=0)
    ds = dislib.array(a, block_size=(5, 2))
    x = dnn.from_ds_array(ds)
    assert torch.equal(x.collect(), torch.from_numpy(a.toarray()))


@pytest.mark.parametrize("sizes", [(4, 4, 2), (4, 3, 3), (3, 3, 2, 2),
                                   (10,), (3, 7)])
def test_to_ds_array_round_trip(backend, dislib, sizes):
    a = np.arange(10 * 2 * 3, dtype=np.float32).reshape(10, 2, 3)
    x = dnn.from_array(a, block_size=sizes)
    ds = x.to_ds_array()
    assert type(ds).__name__ == "Array" and ds._sparse is False
    assert ds.shape == (10, 6)
    assert np.array_equal(ds.collect(), a.reshape(10, 6))
    back = dnn.from_ds_array(ds)
    assert torch.equal(back.collect(), torch.from_numpy(a.reshape(10, 6)))


def test_to_ds_array_of_labels(backend, dislib):
    x = dnn.from_array(np.arange(7), block_size=3)
    ds = x.to_ds_array()
    assert ds.shape == (7, 1)
    assert np.array_equal(ds.collect(squeeze=False),
                          np.arange(7).reshape(7, 1))
