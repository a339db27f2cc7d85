"""What array code written for numpy meets in a DsTensor.

scikit-learn's ``_safe_indexing`` selects rows as ``x[rows, ...]`` and
reads labels with ``numpy.asarray``: both work, the first as a DsTensor
row selection by tasks, the second by collecting the tensor.
"""

import numpy as np
import pytest
import torch
from sklearn.utils import _safe_indexing
from sklearn.utils.multiclass import type_of_target

import dislib_nn as dnn
from dislib_nn.data import DsTensor
from dislib_nn.exceptions import InvalidParameterError
from tests.data import _fns

ROWS = np.array([0, 3, 4, 11, 22])


def _x():
    return dnn.from_array(_fns.ARRAYS["2d"][:23], block_size=5)


@pytest.mark.parametrize("key", [(ROWS, Ellipsis), (ROWS, slice(None)),
                                 (ROWS,), (slice(2, 9), Ellipsis)])
def test_rows_with_the_sample_axes_kept(backend, key):
    x = _x()
    got = x[key]
    assert isinstance(got, DsTensor)
    assert torch.equal(got.collect(), x[key[0]].collect())
    np.testing.assert_array_equal(got.collect().numpy(),
                                  _fns.ARRAYS["2d"][:23][key])


@pytest.mark.parametrize("key, entries", [
    ((ROWS, 0), 2), ((ROWS, slice(1, None)), 2),
    ((ROWS, Ellipsis, Ellipsis), 3), ((ROWS, slice(None), slice(None)), 3),
    ((), 0)])
def test_a_key_that_selects_features_is_refused(key, entries):
    x = DsTensor._from_blocks([torch.zeros(23, 3)], (23,), (3,),
                              torch.float32)
    with pytest.raises(InvalidParameterError, match=(
            rf"DsTensor indexes rows only .* Got a key with {entries} "
            rf"entries")):
        x[key]


def test_safe_indexing_gives_a_ds_tensor(backend):
    x = _x()
    got = _safe_indexing(x, ROWS)
    assert isinstance(got, DsTensor) and got.shape == (5, 3)
    np.testing.assert_array_equal(got.collect().numpy(),
                                  _fns.ARRAYS["2d"][ROWS])


def test_numpy_asarray_collects(backend):
    x = _x()
    np.testing.assert_array_equal(np.asarray(x), _fns.ARRAYS["2d"][:23])
    assert np.asarray(x, dtype=np.float32).dtype == np.float32
    labels = dnn.from_array(np.array([2, 0, 1, 1, 0, 2, 2]), block_size=3)
    assert type_of_target(labels) == "multiclass"
    with pytest.raises(ValueError, match="always copied to the master"):
        np.asarray(x, copy=False)
