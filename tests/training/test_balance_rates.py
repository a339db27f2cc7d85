"""``balance=[r_0, r_1, ...]``: rows dealt by given rates from the first
epoch, reproducibly, instead of by rates measured in earlier epochs."""

import numpy as np
import pytest
import torch

from dislib_nn import AsyncEpochAveragingClassifier, \
    SyncEpochAveragingClassifier
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training.strategies._dealing import balanced_deal
from tests.training import _models


def _data(n=160):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    return X, (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0)


def _fit(cls=SyncEpochAveragingClassifier, **kwargs):
    torch.manual_seed(0)
    params = dict(module=_models.Classifier(batch_norm=False), n_workers=2,
                  n_epochs=2, batch_size=8, lr=0.1, random_state=0,
                  balance=[3, 1])
    params.update(kwargs)
    return cls(**params).fit(*_data())


@pytest.mark.parametrize("cls", [SyncEpochAveragingClassifier,
                                 AsyncEpochAveragingClassifier])
def test_given_rates_deal_from_the_first_epoch(backend, cls):
    est = _fit(cls)
    # 2 workers x 8 blocks of 10 rows, dealt 3:1: 120 and 40 rows in
    # every epoch, the first included (no epoch measures anything).
    blocks = balanced_deal(range(16), [10] * 16, [3.0, 1.0])
    expected = [10 * len(b) for b in blocks]
    assert expected == [120, 40]
    for record in est.history_:
        assert record["worker_samples"] == expected


def test_given_rates_give_the_same_model_for_a_seed(local):
    first, second = _fit(), _fit()
    for key, value in first.module_.state_dict().items():
        torch.testing.assert_close(second.module_.state_dict()[key], value,
                                   atol=0, rtol=0)


@pytest.mark.parametrize("params, message", [
    ({"balance": [3, 1], "n_workers": None},
     r"takes balance as a list of rates with n_workers of its length \(one "
     r"rate per worker\). Got balance=\[3, 1\] and n_workers=None"),
    ({"balance": [3, 1, 1]},
     r"Got balance=\[3, 1, 1\] and n_workers=2"),
    ({"balance": [3, 0]},
     r"The 'balance' parameter of SyncEpochAveragingClassifier must be an "
     r"instance of 'bool' or a list of positive numbers, one per worker. "
     r"Got \[3, 0\] instead"),
    ({"balance": [3, 1], "shuffle": "none"},
     r"takes balance=\[3, 1\] only with shuffle='global' or 'local'"),
])
def test_bad_rates_are_named(sequential, params, message):
    with pytest.raises(InvalidParameterError, match=message):
        _fit(**params)
