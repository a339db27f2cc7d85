"""A worker's training that raises, or whose process dies: ``on_failure``.

Fault injection: ``FaultOnCalls`` raises (or kills its process) on chosen
training forward calls, counted across processes in a file. On the
sequential backend, 2 workers of 16 rows and batches of 4, the e-th
epoch's forwards (e from 0; messages and ``history_`` count epochs from
1) are calls 8e+1..8e+4 (worker 0) then 8e+5..8e+8 (worker 1); a rerun's
forwards come right after the run it repeats.
"""

import copy

import numpy as np
import pytest
import torch

from dislib_nn import AsyncEpochAveragingRegressor, SyncEpochAveragingRegressor
from dislib_nn.exceptions import (InvalidParameterError, TaskFailureWarning,
                                  TrainingTaskError, WorkerDiedError)
from tests.conftest import use_backend
from tests.training import _reference as ref
from tests.training._models import FaultOnCalls
from tests.training.tasks._faulty_fits import assert_same as _assert_same
from tests.training.tasks._faulty_fits import calls as _calls
from tests.training.tasks._faulty_fits import clean_model as _clean_model
from tests.training.tasks._faulty_fits import data as _data
from tests.training.tasks._faulty_fits import estimator as _estimator

ESTIMATORS = [SyncEpochAveragingRegressor, AsyncEpochAveragingRegressor]


@pytest.fixture
def sequential():
    use_backend("sequential")
    yield
    use_backend("local")


@pytest.fixture
def local():
    use_backend("local")


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_retry_reruns_a_raising_epoch_from_its_start(sequential, tmp_path,
                                                     cls):
    est = _estimator(str(tmp_path), 6, 7, cls=cls).fit(*_data())
    # Worker 1 raised on calls 6 and 7 (its first two runs); the third run
    # (calls 8-11) went through: 2 reruns, max_retries' default.
    assert _calls(tmp_path) == 16 + 1 + 2
    assert [r["retried"] for r in est.history_] == [[1], []]
    assert [r["skipped"] for r in est.history_] == [[], []]
    # Same starting state and seed: the model of a run without the fault.
    _assert_same(est, _clean_model(tmp_path, cls=cls))


def test_retry_stops_after_max_retries_naming_epoch_and_worker(
        sequential, tmp_path):
    est = _estimator(str(tmp_path), 6, 100, max_retries=1)
    with pytest.raises(TrainingTaskError,
                       match=r"(?s)Worker 1's training in epoch 1 raised "
                             r"RuntimeError: injected fault on call 7 in "
                             r"each of its 2 runs; on_failure='retry' stops "
                             r"the fit"
                             r".*larger max_retries.*traceback.*forward"):
        est.fit(*_data())
    assert not hasattr(est, "module_")
    # Worker 1 ran the first epoch twice (one rerun), raising at the
    # 2nd and 3rd forward calls; the master stopped the fit when it read
    # that epoch, at most one epoch later.
    assert 7 <= _calls(tmp_path) <= 7 + 8


def test_raise_runs_once_and_stops(sequential, tmp_path):
    est = _estimator(str(tmp_path), 6, 6, on_failure="raise")
    with pytest.raises(TrainingTaskError,
                       match=r"Worker 1's training in epoch 1 raised "
                             r"RuntimeError: injected fault on call 6; "
                             r"on_failure='raise' stops the fit") as info:
        est.fit(*_data())
    assert (info.value.epoch, info.value.worker) == (1, 1)
    assert not hasattr(est, "module_")


def test_retry_with_no_retries_left_raises_at_once(sequential, tmp_path):
    est = _estimator(str(tmp_path), 2, 2, max_retries=0)
    with pytest.raises(TrainingTaskError, match=r"Worker 0's training in "
                       r"epoch 1 raised RuntimeError: injected fault on "
                       r"call 2; on_failure='retry'"):
        est.fit(*_data())


def test_skip_drops_the_failed_update_and_renormalises(sequential,
                                                       tmp_path):
    est = _estimator(str(tmp_path), 6, 6, on_failure="skip")
    with pytest.warns(TaskFailureWarning,
                      match=r"Worker 1's training in epoch 1 raised "
                            r"RuntimeError: injected fault on call 6; "
                            r"on_failure='skip' left its update out") as seen:
        est.fit(*_data())
    # The warning points at the user's fit(...) line.
    assert {w.filename for w in seen
            if issubclass(w.category, TaskFailureWarning)} == {__file__}
    assert [r["skipped"] for r in est.history_] == [[1], []]
    assert est.history_[0]["errors"] == {
        1: "RuntimeError: injected fault on call 6"}
    assert "in forward" in est.history_[0]["tracebacks"][1]
    assert [r["diverged"] for r in est.history_] == [[], []]
    # Plain PyTorch: the first epoch keeps worker 0's replica alone (the
    # merge is renormalised over the survivor), the second averages both.
    x, y = _data()
    parts = ref.split_like_blocks(torch.from_numpy(x),
                                  torch.from_numpy(y)[:, None], 2)
    torch.manual_seed(0)
    start = FaultOnCalls()
    survivor = copy.deepcopy(start)
    ref.train(survivor, torch.optim.SGD(survivor.parameters(), lr=0.05),
              torch.nn.MSELoss(), *parts[0], batch_size=4, lr=0.05)
    expected = ref.epoch_averaging(survivor, parts, torch.nn.MSELoss(),
                                   epochs=1, batch_size=4, lr=0.05)
    for key, value in expected.state_dict().items():
        torch.testing.assert_close(est.module_.state_dict()[key], value,
                                   atol=1e-6, rtol=1e-5, msg=key)


def test_skip_in_the_asynchronous_strategy(sequential, tmp_path):
    est = _estimator(str(tmp_path), 6, 6, on_failure="skip",
                     cls=AsyncEpochAveragingRegressor)
    with pytest.warns(TaskFailureWarning, match="on_failure='skip'"):
        est.fit(*_data())
    assert [r["skipped"] for r in est.history_] == [[1], []]
    # Worker 1's first merge folds no update (weight 0).
    weights = {m["worker"]: m["weight"] for m in est.history_[0]["merges"]}
    assert weights[1] == 0.0 and weights[0] > 0.0
    assert all(np.isfinite(r["train_loss"]) for r in est.history_)


def test_skip_keeps_the_model_when_every_worker_failed(sequential,
                                                       tmp_path):
    before = _estimator(str(tmp_path), 1, 8, on_failure="skip")
    init = copy.deepcopy(before.module.state_dict())
    with pytest.warns(TaskFailureWarning):
        est = before.set_params(n_epochs=1).fit(*_data())
    assert est.history_[0]["skipped"] == [0, 1]
    assert np.isnan(est.history_[0]["train_loss"])
    for key, value in init.items():
        torch.testing.assert_close(est.module_.state_dict()[key], value,
                                   rtol=0, atol=0)


def test_skipped_worker_starts_its_next_round_from_its_own_start(
        sequential, tmp_path):
    # With sync_every=2 a skipped worker goes on from the state it started
    # the failed epoch with (not from a half-trained one).
    est = _estimator(str(tmp_path), 6, 6, on_failure="skip", sync_every=2,
                     n_epochs=2)
    with pytest.warns(TaskFailureWarning):
        est.fit(*_data())
    assert [r["skipped"] for r in est.history_] == [[1], []]
    x, y = _data()
    parts = ref.split_like_blocks(torch.from_numpy(x),
                                  torch.from_numpy(y)[:, None], 2)
    torch.manual_seed(0)
    start = FaultOnCalls()
    replicas = [copy.deepcopy(start) for _ in parts]
    # Worker 0 trains two epochs, worker 1 only the second.
    for epoch in range(2):
        for w, (r, part) in enumerate(zip(replicas, parts)):
            if (epoch, w) != (0, 1):
                ref.train(r, torch.optim.SGD(r.parameters(), lr=0.05),
                          torch.nn.MSELoss(), *part, batch_size=4, lr=0.05)
    expected = ref.average([r.state_dict() for r in replicas], [16, 16])
    for key, value in expected.items():
        torch.testing.assert_close(est.module_.state_dict()[key], value,
                                   atol=1e-6, rtol=1e-5, msg=key)


@pytest.mark.parametrize("on_failure", ["retry", "skip"])
def test_a_killed_worker_is_run_again(local, tmp_path, on_failure):
    est = _estimator(str(tmp_path), 3, 3, fault="kill",
                     on_failure=on_failure)
    with pytest.warns(TaskFailureWarning, match=r"WorkerDiedError.*"
                      r"running it again"):
        est.fit(*_data())
    # The runtime reran the task from the same inputs: nothing lost.
    _assert_same(est, _clean_model(tmp_path))
    assert [r["skipped"] for r in est.history_] == [[], []]


def test_a_killed_worker_under_raise_stops_the_fit(local, tmp_path):
    est = _estimator(str(tmp_path), 3, 3, fault="kill", on_failure="raise")
    with pytest.raises(WorkerDiedError, match=r"died \(killed by signal "
                       r"SIGKILL\)"):
        est.fit(*_data())
    assert not hasattr(est, "module_")
    # The pool is usable again.
    _clean_model(tmp_path)


def test_max_retries_is_validated_at_fit(sequential, tmp_path):
    est = _estimator(str(tmp_path), 0, 0, max_retries=-1)
    with pytest.raises(InvalidParameterError,
                       match=r"'max_retries' parameter.*Got -1"):
        est.fit(*_data())
    est = _estimator(str(tmp_path), 0, 0, max_retries=1.5)
    with pytest.raises(InvalidParameterError, match=r"'max_retries'"):
        est.fit(*_data())
