"""Task time-outs: ``@task(time_out=...)`` and ``runtime.time_out``.

A task that runs past its time-out fails as if its code had raised
``TaskTimeoutError`` then, and its ``on_failure`` applies, on every
backend. Fault injection: the tasks in tests/runtime/hanging.py sleep
for minutes on their first N calls (counted in a file), so only the
time-out ends them. The same program against the real binding's
time-outs: tests/compss/test_time_outs_under_compss.py.
"""

import signal
import threading
import warnings

import pytest

from dislib_nn import runtime
from dislib_nn.exceptions import (InvalidParameterError, TaskDefinitionError,
                                  TaskError, TaskFailureWarning,
                                  TaskTimeoutError)
from dislib_nn.runtime import task, wait_on
from tests.conftest import BACKENDS
from tests.runtime import failing, hanging, tasks

EXPIRED = r"did not finish within its time-out of 1 s \(time_out=1\)"

pytestmark = pytest.mark.filterwarnings("ignore::dislib_nn.exceptions."
                                        "TaskFailureWarning")


def test_retry_runs_a_timed_out_task_again(backend, tmp_path):
    path = str(tmp_path / "calls")
    with pytest.warns(TaskFailureWarning, match=r"hangs\(\) failed "
                      r"\(TaskTimeoutError: task hangs\(\) " + EXPIRED
                      + r".*attempt 2 of 2"):
        result = hanging.hangs(path, 1, 7)
        assert wait_on(tasks.add(result, 1)) == 8 and wait_on(result) == 7
    assert hanging.calls(path) == 2


def test_retry_gives_up_after_two_time_outs(backend, tmp_path):
    path = str(tmp_path / "calls")
    with pytest.raises(TaskTimeoutError, match=r"task hangs\(\) "
                       + EXPIRED) as info:
        wait_on(hanging.hangs(path, 5, 7))
    assert hanging.calls(path) == 2
    assert (info.value.task_name, info.value.time_out) == ("hangs", 1)
    assert any("on each of its 2 attempts" in n for n in info.value.__notes__)


def test_fail_stops_at_the_first_time_out(backend, tmp_path):
    path = str(tmp_path / "calls")
    with pytest.raises(TaskTimeoutError, match=r"hangs_fail\(\) " + EXPIRED):
        wait_on(hanging.hangs_fail(path, 1, 7))
    assert hanging.calls(path) == 1
    # The backend goes on.
    assert wait_on([tasks.add(i, 1) for i in range(4)]) == [1, 2, 3, 4]


def test_ignore_gives_the_defaults_as_if_the_task_raised(backend, tmp_path):
    # As PyCOMPSs's worker does: its time-out raises inside the task.
    with pytest.warns(TaskFailureWarning, match=r"hangs_ignore\(\) raised "
                      r"TaskTimeoutError: .*on_failure='IGNORE': its "
                      r"outputs take their @on_failure defaults"):
        ignored = hanging.hangs_ignore(str(tmp_path / "a"), 1, 7)
        assert wait_on(tasks.add(ignored, 1)) == 0
    assert wait_on(ignored) == -1
    assert hanging.calls(str(tmp_path / "a")) == 1


def test_cancel_successors_cancels_the_readers(backend, tmp_path):
    cancelled = hanging.hangs_cancel(str(tmp_path / "a"), 1, 7)
    reader = failing.describe(cancelled, str(tmp_path / "b"))
    with pytest.warns(TaskFailureWarning, match="has no value"):
        assert wait_on([reader, cancelled]) == [None, None]
    assert failing.calls(str(tmp_path / "b")) == 0


def test_retry_starts_again_from_the_inout_argument(backend, tmp_path):
    acc = {"n": 0}
    result = hanging.hangs_after_increment(acc, str(tmp_path / "calls"), 1)
    assert wait_on(result) == 1 and wait_on(acc) == {"n": 1}


def test_a_block_gives_its_time_out_to_tasks_without_one(backend,
                                                         tmp_path):
    path = str(tmp_path / "calls")
    with pytest.warns(TaskFailureWarning, match=r"hangs_undeclared\(\) "
                      r".*time-out of 0.7 s \(time_out=0.7\)"):
        with runtime.time_out(0.7):
            result = hanging.hangs_undeclared(path, 1, 8)
        assert wait_on(result) == 8
    assert hanging.calls(path) == 2


def test_a_task_keeps_its_own_time_out_in_a_block(backend):
    # sleeps() declares 30 s: the block's 0.3 s does not stop it.
    with runtime.time_out(0.3):
        result = hanging.sleeps(1, 9)
    assert wait_on(result) == 9


def test_tasks_after_a_block_have_no_time_out(sequential):
    with runtime.time_out(0.5):
        pass
    # Half a second would time it out twice, and wait_on would raise.
    assert wait_on(hanging.naps(1, 3)) == 3


def test_the_worker_of_a_timed_out_task_is_killed_and_replaced(local,
                                                               tmp_path):
    path = str(tmp_path / "calls")
    second = wait_on(hanging.pid_then_hang(path, 1))
    first = _pids(path)[0][0]
    assert first != second and not _alive(first)
    # The pool still has two workers, and they work.
    pids = set(wait_on([tasks.worker_pid() for _ in range(8)]))
    assert first not in pids and len(pids) <= 2
    assert wait_on([tasks.add(i, 1) for i in range(4)]) == [1, 2, 3, 4]


@pytest.mark.skipif("dask" not in BACKENDS,
                    reason="dask.distributed is not installed")
def test_dask_kills_the_helper_and_keeps_its_worker(fresh_python, tmp_path):
    # A task with a time-out runs in a helper process of its dask
    # worker: the helper is killed, the dask worker goes on.
    from tests.conftest import use_backend
    use_backend("dask")
    try:
        path = str(tmp_path / "calls")
        helper = wait_on(hanging.pid_then_hang(path, 1))
        (hung, dask_worker), (again, same_worker) = _pids(path)
        assert helper == again and hung != again and not _alive(hung)
        assert _alive(dask_worker) and _alive(same_worker)
        pids = set(wait_on([tasks.worker_pid() for _ in range(8)]))
        assert hung not in pids and helper not in pids
    finally:
        use_backend("local")


def test_sequential_rings_only_in_the_main_thread(sequential):
    # SIGALRM reaches the main thread only: elsewhere a warning says the
    # time-out is not enforced, and the task runs to its end.
    out = {}

    def call():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with runtime.time_out(0.5):
                out["value"] = wait_on(hanging.naps(1, 5))
        out["warnings"] = [str(w.message) for w in caught]
    thread = threading.Thread(target=call)
    thread.start()
    thread.join(60)
    assert out["value"] == 5
    assert any("only in the main thread" in w and "naps()" in w
               for w in out["warnings"]), out["warnings"]


def test_sequential_keeps_the_programs_own_alarm(sequential):
    rang = []

    def handler(signum, frame):
        rang.append(signum)
    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 60)
        assert wait_on(hanging.sleeps(0, 4)) == 4
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < left <= 60 and not rang
        assert signal.getsignal(signal.SIGALRM) is handler
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _plain(x):
    return x


@pytest.mark.parametrize("value", [-1, -0.5, float("inf"), float("nan"),
                                   "10", True, [2]])
def test_bad_time_outs_are_refused_where_declared(value):
    with pytest.raises(TaskDefinitionError, match=(
            r"@task on _plain\(\): 'time_out' must be a positive finite "
            r"number of seconds \(or None, or 0: no time-out\)\. Got "
            + _escaped(value) + " instead")):
        task(returns=1, time_out=value)(_plain)
    with pytest.raises(InvalidParameterError, match=(
            r"runtime.time_out\(\): 'seconds' must be a positive finite "
            r"number of seconds.*Got " + _escaped(value))):
        with runtime.time_out(value):
            pass


@pytest.mark.parametrize("value", [None, 0, 0.0])
def test_no_time_out_as_pycompss_spells_it(sequential, value):
    declared = task(returns=1, time_out=value)(_plain)
    assert declared.spec.time_out is None
    with runtime.time_out(value):
        assert wait_on(tasks.identity(3)) == 3


def test_time_out_errors_are_told_apart():
    assert runtime.is_time_out(TaskTimeoutError("late"))
    assert not runtime.is_time_out(TaskError("failed"))
    assert not runtime.is_time_out(TimeoutError("a socket"))


def _pids(path):
    """The ``(pid, parent pid)`` lines ``pid_then_hang`` wrote."""
    with open(path + ".pid") as f:
        return [tuple(map(int, line.split())) for line in f]


def _alive(pid):
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _escaped(value):
    import re
    return re.escape(repr(value))
