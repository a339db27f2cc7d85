"""Task time-outs: ``@task(time_out=SECONDS)`` and :func:`time_out`.

A task that runs longer than its time-out fails as if its code had
raised :class:`~dislib_nn.exceptions.TaskTimeoutError` at that moment:
PyCOMPSs's worker arms ``SIGALRM`` when a task starts and raises its
``TimeOutError`` inside the task's code. The task's ``on_failure`` then
applies as to any failure: ``RETRY`` runs it again, ``FAIL`` stops,
``IGNORE`` gives its outputs their ``@on_failure`` defaults,
``CANCEL_SUCCESSORS`` cancels its readers. The clock starts when the
task starts on its worker. How each backend stops a task:

* ``local``: the master kills the worker process at the deadline and
  the pool starts a new one (``_local``);
* ``dask``: the task runs in a helper process of its dask worker, which
  the worker's thread kills at the deadline (``_dask_timed``): the dask
  worker, its thread and its data are left as they were;
* ``sequential``: ``SIGALRM`` in the calling process, as PyCOMPSs does
  (:func:`alarm`), which interrupts Python code and sleeps, not a call
  stuck in native code; only where tasks are called from the main
  thread (elsewhere a warning says the time-out is not enforced);
* ``compss``: PyCOMPSs's own, in whole seconds (``_compss``).

:func:`time_out` gives a time-out to the tasks called inside a block
that declare none of their own: an estimator's ``task_timeout``.
"""

import contextlib
import math
import signal
import threading
import time
import warnings

from dislib_nn.exceptions import InvalidParameterError, TaskTimeoutError
from dislib_nn.runtime._params import parse_time_out

__all__ = ["time_out", "current", "is_time_out", "expired", "alarm"]

_state = threading.local()
# Set by the compss backend (see use_process_wide): under COMPSs the
# value lives in PyCOMPSs's own task declarations, shared by threads.
_process_wide = {"apply": None, "errors": ()}


@contextlib.contextmanager
def time_out(seconds):
    """Give tasks called inside the block a time-out of ``seconds``.

    Tasks that declare their own ``time_out`` keep it. None leaves
    things as they are (an enclosing block's time-out, if any, holds).
    On the ``local``, ``sequential`` and ``dask`` backends the block
    covers the tasks this thread calls; under COMPSs it covers every task
    the program calls while it runs (PyCOMPSs reads a task's time-out
    from its declaration), rounded up to whole seconds.
    """
    seconds = parse_time_out("runtime.time_out()", seconds,
                             InvalidParameterError, "seconds")
    if seconds is None:
        yield
        return
    previous = current()
    _state.seconds = seconds
    apply = _process_wide["apply"]
    if apply is not None:
        apply(seconds)
    try:
        yield
    finally:
        _state.seconds = previous
        if apply is not None:
            apply(previous)


def current():
    """The time-out :func:`time_out` gives now in this thread, or None."""
    return getattr(_state, "seconds", None)


def use_process_wide(apply, errors):
    """Under COMPSs: ``apply(seconds or None)`` sets the time-out of the
    tasks without one of their own; ``errors`` are the exception classes
    PyCOMPSs raises inside a task that ran out of time."""
    _process_wide["apply"] = apply
    _process_wide["errors"] = tuple(errors)


def is_time_out(exc):
    """Whether ``exc``, raised inside a task, is the task running out of
    time: code that catches a task's errors must let it through, so that
    the task's ``on_failure`` handles it (PyCOMPSs raises it inside the
    task's code, and so does the sequential backend)."""
    return isinstance(exc, (TaskTimeoutError,) + _process_wide["errors"])


def whole_seconds(seconds):
    """A time-out as COMPSs takes it: whole seconds, rounded up."""
    return None if seconds is None else max(1, math.ceil(seconds))


def expired(name, seconds, how):
    """The :class:`TaskTimeoutError` of task ``name`` (``how``: what
    stopped it)."""
    return TaskTimeoutError(
        f"task {name}() did not finish within its time-out of "
        f"{seconds:g} s (time_out={seconds:g}): {how}.",
        task_name=name, time_out=seconds)


@contextlib.contextmanager
def alarm(seconds, name):
    """Raise :func:`expired`'s error in this thread after ``seconds``
    (``SIGALRM``, as PyCOMPSs's worker does); None: no limit.

    Only the main thread receives signals: elsewhere the block runs
    without a limit, with a ``RuntimeWarning``. An alarm the program had
    set is suspended meanwhile and set again for its remaining time.
    """
    if seconds is None:
        yield
        return
    if threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "setitimer"):
        warnings.warn(
            f"task {name}() has a time-out of {seconds:g} s, which the "
            f"sequential backend enforces with SIGALRM, only in the main "
            f"thread; it was called from thread "
            f"{threading.current_thread().name!r} and runs without one.",
            RuntimeWarning, stacklevel=3)
        yield
        return

    armed = [True]

    def ring(signum, frame):
        if armed[0]:
            armed[0] = False
            raise expired(name, seconds, "SIGALRM interrupted it, as "
                          "PyCOMPSs's worker does")

    previous = signal.signal(signal.SIGALRM, ring)
    started = time.monotonic()
    outer = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        try:
            armed[0] = False    # (the alarm may still ring just before)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer[0] > 0:
                left = outer[0] - (time.monotonic() - started)
                signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3),
                                 outer[1])
