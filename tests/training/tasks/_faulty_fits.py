"""Small fits whose training forward fails on chosen calls, for the tests
of ``on_failure`` (test_task_failures.py) and ``task_timeout``
(test_task_time_outs.py).

``FaultOnCalls`` counts its training forwards across processes in a
file; on the sequential backend, 2 workers of 16 rows and batches of 4,
the e-th epoch's forwards (e from 0) are calls 8e+1..8e+4 (worker 0)
then 8e+5..8e+8 (worker 1), and a rerun's come right after the run it
repeats.
"""

import os

import numpy as np
import torch

from dislib_nn import SyncEpochAveragingRegressor
from tests.training._models import FaultOnCalls

__all__ = ["data", "estimator", "calls", "clean_model", "assert_same"]


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    return x, x.sum(axis=1).astype(np.float32)


def estimator(folder, first, last, fault="raise",
              cls=SyncEpochAveragingRegressor, **kwargs):
    """An estimator whose forward calls ``first``..``last`` (from 1) do
    ``fault``; 0, 0 for none."""
    torch.manual_seed(0)
    module = FaultOnCalls(counter=os.path.join(folder, "calls"),
                          first=first, last=last, fault=fault)
    params = dict(module=module, n_workers=2, batch_size=4, n_epochs=2,
                  shuffle="none", lr=0.05, random_state=0)
    params.update(kwargs)
    return cls(**params)


def calls(folder):
    """Training forwards counted so far."""
    path = os.path.join(folder, "calls")
    return os.path.getsize(path) if os.path.exists(path) else 0


def clean_model(tmp_path, cls=SyncEpochAveragingRegressor, **kwargs):
    """The same fit with no fault."""
    folder = tmp_path / "clean"
    folder.mkdir()
    return estimator(str(folder), 0, 0, cls=cls, **kwargs).fit(*data())


def assert_same(got, expected):
    """The two fitted models are equal to the last bit."""
    for key, value in expected.module_.state_dict().items():
        torch.testing.assert_close(got.module_.state_dict()[key], value,
                                   rtol=0, atol=0, msg=key)
