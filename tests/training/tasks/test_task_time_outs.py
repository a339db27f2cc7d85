"""A worker's training that hangs: ``task_timeout`` and ``on_failure``.

Fault injection: ``FaultOnCalls(fault="hang")`` sleeps for minutes on
chosen training forward calls, counted across processes in a file, so
only the time-out ends it. On the sequential backend, 2 workers of 16
rows and batches of 4, the first epoch's forwards are calls 1..4
(worker 0) then 5..8 (worker 1), and a rerun's come right after the run
it repeats (as in test_task_failures.py).
"""

import pytest
import torch

from dislib_nn import AsyncEpochAveragingRegressor, SyncEpochAveragingRegressor
from dislib_nn.exceptions import (InvalidParameterError, TaskFailureWarning,
                                  TaskTimeoutError)
from tests.training.tasks._faulty_fits import assert_same as _assert_same
from tests.training.tasks._faulty_fits import calls as _calls
from tests.training.tasks._faulty_fits import clean_model as _clean_model
from tests.training.tasks._faulty_fits import data as _data
from tests.training.tasks._faulty_fits import estimator

# A training task of these fits takes milliseconds once torch has made
# its first optimizer step in the process (_warm: about 1.5 s before).
TIMEOUT = 3
EXPIRED = (r"did not finish within its time-out of 3 s \(time_out=3\)")


@pytest.fixture(scope="module", autouse=True)
def _warm():
    x, y = _data()
    SyncEpochAveragingRegressor(module=torch.nn.Linear(4, 1), n_epochs=1,
                                n_workers=1).fit(x, y)


def _estimator(folder, first, last, **kwargs):
    kwargs.setdefault("task_timeout", TIMEOUT)
    return estimator(folder, first, last, fault="hang", **kwargs)


@pytest.mark.parametrize("policy, cls", [
    ("retry", SyncEpochAveragingRegressor),
    ("retry", AsyncEpochAveragingRegressor),
    ("skip", SyncEpochAveragingRegressor)])
def test_a_hung_training_task_runs_again_from_its_inputs(sequential,
                                                         tmp_path, policy,
                                                         cls):
    with pytest.warns(TaskFailureWarning, match=(
            r"task _train_epoch\(\) failed \(TaskTimeoutError: task "
            r"_train_epoch\(\) " + EXPIRED + r": SIGALRM interrupted it"
            r".*running it again \(attempt 2 of 2\)")):
        est = _estimator(str(tmp_path), 5, 5, cls=cls,
                         on_failure=policy).fit(*_data())
    # Worker 1 hung at its first forward; its task ran again (4 calls).
    assert _calls(tmp_path) == 16 + 1
    # The runtime's rerun: the task cannot tell it from a first run.
    assert [r["retried"] for r in est.history_] == [[], []]
    assert [r["skipped"] for r in est.history_] == [[], []]
    # Same inputs and seed: the model of a fit where nothing hung.
    _assert_same(est, _clean_model(tmp_path, cls=cls))


def test_raise_stops_the_fit_naming_the_task_time_out_and_epoch(
        sequential, tmp_path):
    est = _estimator(str(tmp_path), 5, 5, on_failure="raise")
    with pytest.raises(TaskTimeoutError, match=(
            r"task _train_epoch_once\(\) " + EXPIRED + r": SIGALRM "
            r"interrupted it.* SyncEpochAveragingRegressor stopped in "
            r"epoch 1 \(task_timeout=3, on_failure='raise'\)")) as info:
        est.fit(*_data())
    assert (info.value.task_name, info.value.time_out) == (
        "_train_epoch_once", TIMEOUT)
    assert _calls(tmp_path) == 5        # never run again
    assert not hasattr(est, "module_")


def test_skip_stops_when_the_rerun_hangs_too(sequential, tmp_path):
    # A task that cannot finish leaves no update to drop: as for a worker
    # that died, the runtime's one rerun, then the fit stops.
    est = _estimator(str(tmp_path), 5, 6, on_failure="skip")
    with pytest.warns(TaskFailureWarning, match="attempt 2 of 2"), \
            pytest.raises(TaskTimeoutError, match=(
                r"task _train_epoch\(\) " + EXPIRED + r".* stopped in "
                r"epoch 1 \(task_timeout=3, on_failure='skip'\)")) as info:
        est.fit(*_data())
    notes = info.value.__cause__.__notes__
    assert any("on each of its 2 attempts" in n for n in notes), notes
    assert _calls(tmp_path) == 6
    assert not hasattr(est, "module_")


def test_local_kills_the_hung_worker_and_the_fit_goes_on(local, tmp_path):
    # Two workers train at once: whichever makes the third forward hangs.
    with pytest.warns(TaskFailureWarning, match=(
            r"_train_epoch\(\) failed \(TaskTimeoutError: .*its worker "
            r"process was killed, and a new one replaces it")):
        est = _estimator(str(tmp_path), 3, 3).fit(*_data())
    _assert_same(est, _clean_model(tmp_path))


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), "10",
                                   True])
def test_task_timeout_is_validated_at_fit(sequential, tmp_path, value):
    est = _estimator(str(tmp_path), 0, 0, task_timeout=value)
    with pytest.raises(InvalidParameterError, match=(
            r"The 'task_timeout' parameter of SyncEpochAveragingRegressor "
            r"must be None or a float in the range \(0, inf\)\. Got "
            + _escaped(value) + " instead")):
        est.fit(*_data())
    assert SyncEpochAveragingRegressor().get_params()["task_timeout"] is None


def test_a_resumed_fit_may_change_task_timeout(sequential, tmp_path):
    folder = tmp_path / "checkpoint"
    first = _estimator(str(tmp_path), 0, 0, n_epochs=1, task_timeout=None,
                       checkpoint_dir=str(folder)).fit(*_data())
    resumed = _estimator(str(tmp_path), 0, 0, task_timeout=30,
                         checkpoint_dir=str(folder)).fit(*_data(),
                                                         resume=True)
    assert len(first.history_) == 1 and len(resumed.history_) == 2
    _assert_same(resumed, _clean_model(tmp_path))


def _escaped(value):
    import re
    return re.escape(repr(value))
