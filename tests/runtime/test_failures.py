"""Errors inside tasks, and workers that die."""

import pytest

from dislib_nn.exceptions import BackendError, WorkerDiedError
from dislib_nn.runtime import wait_on
from tests.runtime import tasks


def test_exception_reraises_with_type_message_task_and_traceback(backend):
    fut = tasks.fail("bad value 3")
    with pytest.raises(ValueError, match="bad value 3") as info:
        wait_on(fut)
    exc = info.value
    assert any("task fail()" in note for note in exc.__notes__)
    remote = str(exc.__cause__)
    assert "Traceback in the task" in remote
    assert "in fail" in remote and "raise ValueError(message)" in remote


def test_dependents_of_a_failed_task_fail_too(backend):
    dependent = tasks.add(tasks.fail("upstream broke"), 1)
    chained = tasks.total([dependent])
    for fut in (dependent, chained):
        with pytest.raises(ValueError, match="upstream broke") as info:
            wait_on(fut)
        assert any("did not run" in n for n in info.value.__notes__)


def test_failure_does_not_stop_independent_work(backend):
    broken = tasks.fail("only me")
    fine = tasks.add(1, 1)
    assert wait_on(fine) == 2
    with pytest.raises(ValueError):
        wait_on(broken)


def test_killed_worker_is_an_error_naming_the_task(local):
    fut = tasks.die()
    with pytest.raises(WorkerDiedError,
                       match=r"task die\(\) died \(killed by signal "
                             r"SIGKILL\)"):
        wait_on(fut)
    # The pool replaced the worker and keeps working.
    assert wait_on([tasks.add(i, 1) for i in range(4)]) == [1, 2, 3, 4]


def test_dependent_of_a_dead_worker_task_fails(local):
    with pytest.raises(WorkerDiedError, match="died"):
        wait_on(tasks.add(tasks.die(), 1))


# The receiver thread re-raises after failing the tasks, so that a real
# bug shows its traceback; here that traceback is expected.
@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_internal_error_in_the_master_fails_tasks_instead_of_hanging(
        monkeypatch):
    # A pool of its own, so that breaking it leaves the others intact.
    from dislib_nn import runtime
    runtime.set_backend("local", n_workers=1, threads_per_worker=1)
    try:
        engine = runtime._current_engine()
        wait_on(tasks.add(1, 1))                  # the pool is running

        def broken(node, result):
            raise RuntimeError("bookkeeping bug")
        monkeypatch.setattr(engine, "complete", broken)
        with pytest.raises(RuntimeError, match="bookkeeping bug"):
            wait_on(tasks.add(1, 2))
        with pytest.raises(BackendError, match="pool stopped after an "
                                               "internal error"):
            wait_on(tasks.add(1, 3))
        # Let the thread end inside this test, where its warning is known.
        engine.executor._receiver.join(timeout=10)
        # As the error says: set_backend() starts a new pool.
        runtime.set_backend("local", n_workers=1, threads_per_worker=1)
        assert runtime._current_engine() is not engine
        assert wait_on(tasks.add(1, 4)) == 5
    finally:
        runtime.set_backend("local", n_workers=2, threads_per_worker=1)
