"""Run independent scripts side by side, ahead of the tests that check them.

The docs blocks and the failure-policy applications each run as a
fresh ``python script.py`` process, independent of the others, and
much of their time is start-up (the interpreter, torch, the local
pool's fork server). ``RunAhead`` starts such runs in order, a few at a
time, in background threads; a test then waits for its own run and
checks it as before. Every run is still its own process in its own
folder, with the same command and environment. (The examples train for
longer: run side by side on two cores they were slower, not faster.)
"""

import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

#: The name prefix of the threads that start and wait for the runs.
THREAD_PREFIX = "run-ahead"


def default_jobs():
    """Runs at once: one per core, at least 2 and at most 4."""
    return max(2, min(4, os.cpu_count() or 1))


class RunAhead:
    """Runs commands in the background, at most ``jobs`` at a time.

    ``start(key, args, **popen_kwargs)`` queues a run; ``result(key)``
    waits for it and returns a ``subprocess.CompletedProcess`` (text
    output). ``close()`` kills what still runs and drops what is queued.
    """

    def __init__(self, jobs=None, timeout=600):
        # Named: a test that counts this process's reads leaves out the
        # pipes these threads read (tests/data/test_loaders.py).
        self._pool = ThreadPoolExecutor(max_workers=jobs or default_jobs(),
                                        thread_name_prefix=THREAD_PREFIX)
        self._timeout = timeout
        self._futures = {}
        self._running = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(self, key, args, **kwargs):
        self._futures[key] = self._pool.submit(self._run, args, kwargs)

    def started(self, key):
        return key in self._futures

    def result(self, key):
        return self._futures.pop(key).result()

    def close(self):
        with self._lock:
            self._closed = True
            running = list(self._running)
        for future in self._futures.values():
            future.cancel()
        for process in running:
            _end(process)
        self._pool.shutdown(wait=True)

    def _run(self, args, kwargs):
        with self._lock:
            if self._closed:
                raise RuntimeError("RunAhead was closed before this run")
            # A session of its own: _end() reaches the run's whole group.
            process = subprocess.Popen(args, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True,
                                       start_new_session=True, **kwargs)
            self._running.add(process)
        try:
            stdout, stderr = process.communicate(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            _end(process)
            try:
                # Bounded: a process the run started in a session of its
                # own may still hold the pipes open.
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            raise
        finally:
            with self._lock:
                self._running.discard(process)
        return subprocess.CompletedProcess(args, process.returncode,
                                           stdout, stderr)


def _end(process):
    """End a run and what it started: SIGTERM first (the COMPSs emulator
    then ends its executors, which live in sessions of their own), then
    SIGKILL to the run's process group."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def selected_params(request, function, name):
    """``(test id, value of parameter name)`` of the selected items of
    ``function`` in this session, in the order they will run."""
    return [(item.callspec.id, item.callspec.params[name])
            for item in request.session.items
            if getattr(item, "function", None) is function]
