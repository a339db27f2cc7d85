"""Tasks with a time-out on the dask backend: run in a helper process.

A dask worker runs tasks in threads of its own process, and a thread
cannot be stopped from outside, nor signalled (only a process's main
thread receives signals, and a dask worker's runs its event loop). So a
task with a time-out runs in a *helper* process that its dask worker
starts: the dask thread hands the task over, waits for the result until
the deadline, and kills the helper when it passes; the task then fails
with :class:`~dislib_nn.exceptions.TaskTimeoutError` (under ``IGNORE``
it takes its ``@on_failure`` defaults instead, computed here). The dask
worker, its thread and the data it holds are left as they were: nothing
stays stuck, and no dask task is lost.

A helper is a local-backend worker (:func:`._worker.main`) started with
``subprocess`` (dask's worker processes are daemonic, and
``multiprocessing`` refuses them children); it serves one task at a time
and keeps its bytes inside their pickles, since results leave the
machine. Idle helpers are kept for the next timed task; each exits when
its dask worker does (its socket closes). The clock starts once the
helper has started, so its start is not counted: importing torch and
what torch imports on a first optimizer step (a few seconds), done
before the helper serves. Tasks without a time-out run in the dask
worker's thread, as always.
"""

import os
import select
import socket
import subprocess
import sys
import threading
import time

from dislib_nn.exceptions import WorkerDiedError
from dislib_nn.runtime import _channel, _execute, _serialize, _time_out

__all__ = ["run"]

# What torch imports on a task's first optimizer step (about a second),
# imported before the helper says it has started, as the local backend's
# fork server does: a task's time-out then counts the task, not the
# helper's imports.
_BOOT = ("import socket, sys\n"
         "import torch._dynamo\n"
         "from dislib_nn.runtime import _worker\n"
         "_worker.main(socket.socket(fileno=int(sys.argv[1])), 1, "
         "share=False)\n")
_idle = []
_lock = threading.Lock()


def run(payloads, time_out):
    """``_execute.run(payloads, share=False)`` in a helper process, which
    is killed once it has run for ``time_out`` seconds."""
    name = _serialize.loads(payloads[0])["name"]
    helper = _take()
    if isinstance(helper, Exception):
        return _execute.error_status(name, helper)
    deadline = time.monotonic() + time_out
    try:
        _channel.send(helper.sock, payloads)
        result = helper.result(deadline)
    except OSError:
        result = None
    if result is _LATE:
        helper.close()
        return _execute.stopped(payloads, _time_out.expired(
            name, time_out, "the helper process running it on its dask "
            "worker was killed (the dask worker goes on)"), share=False)
    if result is None:
        code = helper.close()
        return _execute.error_status(name, WorkerDiedError(
            f"the helper process running task {name}() on its dask worker "
            f"(for its time-out) died (exit code {code}). It may have run "
            f"out of memory or crashed in native code.", task_name=name,
            exitcode=code))
    with _lock:
        _idle.append(helper)
    return result


_LATE = object()


class _Helper:
    """One helper process and the socket to it."""

    def __init__(self):
        mine, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            path for path in sys.path if path))
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env,
                stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.sock = mine

    def result(self, deadline):
        """The helper's answer, None if it died, ``_LATE`` past the
        deadline."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return _LATE
            readable, _, _ = select.select([self.sock], [], [], left)
            if readable:
                return _channel.recv(self.sock)

    def close(self):
        """Kill the helper; its exit code."""
        self.process.kill()
        code = self.process.wait()
        self.sock.close()
        return code


def _take():
    """An idle helper, or a new one once it said hello (an exception if
    it could not start)."""
    with _lock:
        if _idle:
            return _idle.pop()
    helper = _Helper()
    if _channel.recv(helper.sock) is None:
        code = helper.close()
        return WorkerDiedError(
            f"a helper process for tasks with a time-out could not start "
            f"on its dask worker (exit code {code}); its error is in the "
            f"dask worker's log.", exitcode=code)
    return helper
