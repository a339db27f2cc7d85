"""Fault-injection tasks: each fails on its first calls, then works.

A call counter lives in a file, so that it counts executions in any
process (local workers, the sequential backend, a COMPSs executor).
"""

import fcntl
import os
import signal

from dislib_nn.runtime import COMMUTATIVE, INOUT, on_failure, task


def count_call(path):
    """Add one to the counter in ``path``; return the new count.

    Calls running at once in several processes take turns on a lock
    file, and the count is written aside and renamed into place, so a
    reader never sees a half-written counter.
    """
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        count = calls(path) + 1
        with open(path + ".tmp", "w") as f:
            f.write(str(count))
        os.replace(path + ".tmp", path)
    return count


def calls(path):
    """How many times the tasks counting in ``path`` ran."""
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return int(f.read())


def _fail_first(path, n_failures, value, fault="raise"):
    """``value``, once the calls counted in ``path`` exceed ``n_failures``.

    Before that each call fails: it raises (``fault="raise"``) or kills
    the process that runs it (``fault="kill"``, a worker's death).
    """
    count = count_call(path)
    if count <= n_failures:
        if fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError(f"injected failure {count} of {n_failures}")
    return value


@task(returns=1)
def flaky(path, n_failures, value, fault="raise"):
    return _fail_first(path, n_failures, value, fault)


@task(returns=1, on_failure="FAIL")
def flaky_fail(path, n_failures, value, fault="raise"):
    return _fail_first(path, n_failures, value, fault)


@task(returns=1, on_failure="IGNORE")
def flaky_ignore(path, n_failures, value, fault="raise"):
    return _fail_first(path, n_failures, value, fault)


@task(returns=1, on_failure="CANCEL_SUCCESSORS")
def flaky_cancel(path, n_failures, value, fault="raise"):
    return _fail_first(path, n_failures, value, fault)


@on_failure(management="IGNORE", returns=-1, acc={"n": -1}, path=None,
            n_failures=None)
@task(returns=1, acc=INOUT, on_failure="FAIL")
def flaky_update(acc, path, n_failures):
    """IGNORE (from @on_failure, over the task's FAIL), with defaults."""
    acc["n"] += 1
    return _fail_first(path, n_failures, acc["n"])


@task(returns=1, acc=INOUT)
def flaky_increment(acc, path, n_failures):
    """Changes its INOUT argument, then fails: a retry starts afresh."""
    acc["n"] += 1
    return _fail_first(path, n_failures, acc["n"])


@task(returns=0, acc=COMMUTATIVE)
def flaky_add(acc, path, n_failures, value):
    """Adds to a COMMUTATIVE argument, then fails on the first calls."""
    acc["sum"] += value
    _fail_first(path, n_failures, None)


@task(returns=2, on_failure="IGNORE")
def flaky_pair(path, n_failures):
    return _fail_first(path, n_failures, (1, 2))


@task(returns=1)
def describe(x, path):
    """The type name of ``x``; counts its calls in ``path``."""
    count_call(path)
    return type(x).__name__
