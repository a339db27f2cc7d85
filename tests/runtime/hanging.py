"""Tasks that hang: each sleeps far past its time-out on its first calls,
then returns.

Calls are counted in a file (as in ``failing``), so that they count
executions in any process (local workers, dask helpers, the sequential
backend, a COMPSs executor). Only a time-out ends a hanging call before
``HANG_S``, which merely bounds a test that would otherwise hang.
"""

import os
import time

from dislib_nn.runtime import INOUT, on_failure, task
from tests.runtime.failing import calls, count_call  # noqa: F401

TIME_OUT = 1
HANG_S = 120


def _hang_first(path, n_hangs, value):
    """``value``, once the calls counted in ``path`` exceed ``n_hangs``;
    before that each call sleeps for ``HANG_S``."""
    if count_call(path) <= n_hangs:
        time.sleep(HANG_S)
    return value


@task(returns=1, time_out=TIME_OUT)
def hangs(path, n_hangs, value):
    return _hang_first(path, n_hangs, value)


@task(returns=1, time_out=TIME_OUT, on_failure="FAIL")
def hangs_fail(path, n_hangs, value):
    return _hang_first(path, n_hangs, value)


@on_failure(management="IGNORE", returns=-1)
@task(returns=1, time_out=TIME_OUT)
def hangs_ignore(path, n_hangs, value):
    return _hang_first(path, n_hangs, value)


@task(returns=1, time_out=TIME_OUT, on_failure="CANCEL_SUCCESSORS")
def hangs_cancel(path, n_hangs, value):
    return _hang_first(path, n_hangs, value)


@task(returns=1, acc=INOUT, time_out=TIME_OUT)
def hangs_after_increment(acc, path, n_hangs):
    """Changes its INOUT argument, then hangs: a retry starts afresh."""
    acc["n"] += 1
    return _hang_first(path, n_hangs, acc["n"])


@task(returns=1)
def hangs_undeclared(path, n_hangs, value):
    """No time-out of its own: ``runtime.time_out`` may give one."""
    return _hang_first(path, n_hangs, value)


@task(returns=1, time_out=30)
def sleeps(seconds, value):
    """Sleeps ``seconds``, well within its own time-out, then returns."""
    time.sleep(seconds)
    return value


@task(returns=1, time_out=TIME_OUT)
def pid_then_hang(path, n_hangs):
    """The id of the process that runs it; before it hangs, that id and
    its parent's go to ``path.pid``, one line per call."""
    with open(path + ".pid", "a") as f:
        f.write(f"{os.getpid()} {os.getppid()}\n")
    return _hang_first(path, n_hangs, os.getpid())


@task(returns=1)
def naps(seconds, value):
    """``sleeps`` without a time-out of its own."""
    time.sleep(seconds)
    return value
