"""The local backend: tasks run in a pool of worker processes.

Each worker is a long-lived process, like a COMPSs executor, connected to
the master by a Unix socket. The master keeps the task graph; a receiver
thread collects results, resolves futures and hands the next ready task
to the worker that just became idle. A worker that dies fails the task it
was running with :class:`~dislib_nn.exceptions.WorkerDiedError` and is
replaced. A task that runs past its time-out (counted from when its
worker took it) is stopped the same way: the receiver waits for at
most the nearest deadline, then kills the worker, and the task fails
with :class:`~dislib_nn.exceptions.TaskTimeoutError`.

Workers start from a fork server by default, so they are clean processes
that import the user's script the way COMPSs workers do (code under
``if __name__ == "__main__":`` does not run there); ``start_method="fork"``
is faster to start and also sees tasks defined interactively.

A script the workers cannot import (one read from standard input, code
given with ``python -c``, an interactive session) still runs: the workers
start without it. Its classes and functions reach them by value (see
:mod:`~dislib_nn.runtime._by_value`), so an estimator whose module is
defined there trains as usual; only a task defined there is refused,
when it is called, since the workers find tasks by importing their module.
"""

import collections
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import resource
import socket
import threading
import time

from dislib_nn.exceptions import BackendError, WorkerDiedError
from dislib_nn.runtime import _channel, _execute, _time_out, _worker
from dislib_nn.runtime._local_start import (describe_exit, describe_main,
                                            main_importable,
                                            start_method_modules,
                                            startup_failure,
                                            unimportable_main_hidden)


class _Worker:
    __slots__ = ("index", "process", "sock", "node", "ready", "deadline",
                 "expired")

    def __init__(self, index, process, sock):
        self.index = index
        self.process = process
        self.sock = sock
        self.node = None
        self.ready = False      # said hello: it started without error
        self.deadline = None    # time.monotonic() its node must end by
        self.expired = None     # the node it is killed for running late


class LocalExecutor:
    name = "local"

    def __init__(self, engine, n_workers, threads, start_method):
        self.engine = engine
        self.n_workers = n_workers
        self.threads = threads
        self.start_method = start_method
        self._context = None
        self._workers = []
        self._idle = collections.deque()
        self._ready = collections.deque()
        self._receiver = None
        self._wake_r, self._wake_w = None, None
        self._stopping = False
        self._failure = None
        # Forked workers are copies of this process; others import the
        # main script, when there is a file to import.
        self._workers_import_main = (start_method == "fork"
                                     or main_importable())

    def check_task(self, task_fn):
        """Refuse, at call time, a task the workers cannot find.

        Workers find a task by importing its module; one defined in a
        main script they cannot import would fail on every worker.
        """
        if task_fn.__module__ == "__main__" and not self._workers_import_main:
            raise BackendError(
                f"the local backend's workers import the script that "
                f"started the program to find the tasks it defines, as "
                f"COMPSs workers do, and this one ({describe_main()}) is "
                f"not a file they can import: task {task_fn.__qualname__}() "
                f"is defined in it. Define tasks in a module the workers "
                f"can import, or save the script to a file and run "
                f"'python script.py', or call set_backend('local', "
                f"start_method='fork') (workers then start as copies of "
                f"this process) or set_backend('sequential'). Classes and "
                f"functions of the script passed to tasks (an nn.Module "
                f"given to an estimator, say) need no change: they travel "
                f"by value.")

    @property
    def usable(self):
        """False once the pool has stopped for good: after an internal
        error, or when its workers cannot import the program."""
        return self._failure is None

    # ----------------------------------------------------------- workers
    def _start(self):
        _raise_fd_limit()
        self._context = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":
            # Imported once in the fork server instead of in every
            # worker: torch, and what torch imports on the first
            # optimizer step (about 1.5 s here).
            # The guard first: the server dies with the master, even
            # while it imports (see dislib_nn._forkserver).
            self._context.set_forkserver_preload(
                ["dislib_nn._forkserver_guard",
                 "dislib_nn.runtime._worker", "torch", "torch._dynamo"]
                + start_method_modules())
        self._wake_r, self._wake_w = socket.socketpair()
        # Stop the pool before multiprocessing's own exit handler
        # terminates daemonic children (in a process that is itself a
        # multiprocessing child, such as a joblib worker, it runs before
        # atexit): otherwise the receiver would see its workers die and
        # start new ones while the interpreter exits.
        multiprocessing.util.Finalize(None, self.shutdown, exitpriority=100)
        for i in range(self.n_workers):
            self._spawn(i)
        self._receiver = threading.Thread(
            target=self._receive, name="dislib_nn-receiver", daemon=True)
        self._receiver.start()

    def _spawn(self, index):
        master_end, worker_end = socket.socketpair()
        inherited = ()
        if self.start_method == "fork":
            # A forked worker holds copies of the master's descriptors;
            # it closes those that would keep other workers' sockets
            # open after the master died.
            inherited = [w.sock.fileno() for w in self._workers
                         if w.sock.fileno() >= 0]
            inherited += [master_end.fileno(), self._wake_r.fileno(),
                          self._wake_w.fileno()]
        process = self._context.Process(
            target=_worker.main,
            args=(worker_end, self.threads, os.getpid(), inherited),
            name=f"dislib_nn-worker-{index}", daemon=True)
        with unimportable_main_hidden(self._workers_import_main):
            process.start()
        worker_end.close()
        worker = _Worker(index, process, master_end)
        if index < len(self._workers):
            self._workers[index] = worker
        else:
            self._workers.append(worker)
        self._idle.append(worker)
        return worker

    @property
    def started(self):
        """Whether the worker processes were started."""
        return self._receiver is not None

    # ---------------------------------------------------------- dispatch
    def dispatch(self, node):
        """Queue a ready node (the engine lock is held)."""
        if self._failure is not None:
            self.engine.fail(node, self._failure, retryable=False)
            return
        if self._receiver is None:
            self._start()
        if node.priority:
            # Ahead of every queued task without priority, behind the
            # queued ones with it.
            ahead = 0
            while ahead < len(self._ready) and self._ready[ahead].priority:
                ahead += 1
            self._ready.insert(ahead, node)
        else:
            self._ready.append(node)
        self._pump()

    def _pump(self):
        while self._ready and self._idle:
            worker = self._idle.popleft()
            node = self._ready.popleft()
            worker.node = node
            self._arm(worker)
            try:
                _channel.send(worker.sock, self.engine.message(node))
            except OSError:
                # The worker is gone; the receiver reports it and
                # fails the node.
                pass

    def _arm(self, worker):
        """Start the clock of the node a started worker holds (a new
        worker's starts with its hello: it takes the node right after)."""
        node = worker.node
        if node is None or node.time_out is None or not worker.ready:
            return
        worker.deadline = time.monotonic() + node.time_out
        if threading.current_thread() is not self._receiver:
            try:        # wake the receiver: it waits for this one too
                self._wake_w.send(b"t", socket.MSG_DONTWAIT)
            except BlockingIOError:
                pass    # it has wake-ups to read already

    # ----------------------------------------------------------- receive
    def _receive(self):
        try:
            self._receive_loop()
        except BaseException as exc:  # noqa: B902 - never die silently
            self._broken(exc)
            raise

    def _broken(self, exc):
        # A bug in the master's bookkeeping: fail every running task, and
        # every later one, rather than leave wait_on() hanging.
        self._unusable(BackendError(
            f"the local worker pool stopped after an internal error "
            f"({type(exc).__name__}: {exc}); start a new one with "
            f"set_backend()."), exc)

    def _unusable(self, failure, exc):
        """Fail running and queued nodes with ``exc``, later ones with
        ``failure``."""
        with self.engine.lock:
            self._failure = failure
            nodes = [w.node for w in self._workers if w.node is not None]
            nodes += list(self._ready)
            self._ready.clear()
            for worker in self._workers:
                worker.node = None
            for node in nodes:
                self.engine.fail(node, exc, retryable=False)

    def _receive_loop(self):
        while True:
            with self.engine.lock:
                if self._stopping:
                    return
                alive = [w for w in self._workers if w.sock.fileno() >= 0]
                watched = {w.sock: w for w in alive}
                watched.update({w.process.sentinel: w for w in alive})
                deadlines = [w.deadline for w in alive
                             if w.deadline is not None]
            wait = None if not deadlines else max(
                0.0, min(deadlines) - time.monotonic())
            ready = multiprocessing.connection.wait(
                list(watched) + [self._wake_r], wait)
            for obj in ready:
                if obj is self._wake_r:
                    self._wake_r.recv(4096)
                    continue
                worker = watched[obj]
                if obj is worker.sock:
                    self._collect(worker)
                elif self._workers[worker.index] is worker:
                    self._died(worker)
            if deadlines:
                self._expire()

    def _expire(self):
        """Kill the workers whose node ran past its deadline: the
        receiver then sees them die (:meth:`_died`)."""
        now = time.monotonic()
        with self.engine.lock:
            for worker in self._workers:
                if worker.deadline is None or worker.deadline > now:
                    continue
                worker.deadline = None
                if worker.node is not None:
                    worker.expired = worker.node
                    try:
                        worker.process.kill()
                    except (OSError, ValueError):
                        pass

    def _collect(self, worker):
        try:
            result = _channel.recv(worker.sock)
        except OSError:
            result = None
        if result is None:
            self._died(worker)
            return
        if not worker.ready:
            with self.engine.lock:
                worker.ready = True     # the hello message
                self._arm(worker)
            return
        with self.engine.lock:
            if worker.expired is not None:
                return      # too late: it is being killed (see _died)
            worker.deadline = None
            if worker.node is not None:
                # The node stays on the worker until it is recorded, so
                # that a failure here still fails it (see _broken).
                self.engine.complete(worker.node, result)
            worker.node = None
            self._idle.append(worker)
            self._pump()

    def _died(self, worker):
        with self.engine.lock:
            if self._stopping or self._workers[worker.index] is not worker \
                    or worker.sock.fileno() < 0:
                return
            worker.process.join(timeout=5)
            code = worker.process.exitcode
            worker.sock.close()
            if worker in self._idle:
                self._idle.remove(worker)
            node, worker.node = worker.node, None
            if not worker.ready and code is not None and code > 0:
                # It failed while importing the program: so will any
                # new one, and every task.
                error = BackendError(startup_failure(code))
                if node is not None:
                    self.engine.fail(node, error, retryable=False)
                self._unusable(error, error)
                return
            try:
                self._spawn(worker.index)
            except Exception as exc:  # noqa: BLE001 - e.g. fork server gone
                if node is not None:
                    self.engine.fail(node, exc, retryable=False)
                self._broken(exc)
                return
            if node is not None and node is worker.expired:
                # As if its code had raised at the deadline (IGNORE: the
                # @on_failure defaults), as under PyCOMPSs.
                exc = _time_out.expired(
                    node.name, node.time_out, "its worker process was "
                    "killed, and a new one replaces it")
                self.engine.complete(node, _execute.stopped(
                    self.engine.payloads(node), exc))
            elif node is not None:
                self.engine.fail(node, WorkerDiedError(
                    f"the worker process running task {node.name}() died "
                    f"({describe_exit(code)}). It may have run out of "
                    f"memory or crashed in native code.",
                    task_name=node.name, exitcode=code))
            self._pump()

    def abort(self):
        """Drop queued nodes and kill the workers running one (lock held).

        The receiver replaces the killed workers; the engine fails the
        nodes.
        """
        self._ready.clear()
        for worker in self._workers:
            if worker.node is not None:
                worker.node = worker.deadline = None
                try:
                    worker.process.kill()
                except (OSError, ValueError):
                    pass

    # ---------------------------------------------------------- shutdown
    def shutdown(self):
        with self.engine.lock:
            if self._receiver is None or self._stopping:
                return
            self._stopping = True
            workers = list(self._workers)
            for worker in workers:
                if worker.node is None:
                    try:
                        _channel.send(worker.sock, [_worker.STOP])
                    except OSError:
                        pass
            self._wake_w.send(b"x")
        # The receiver stops before anything it watches is closed.
        if self._receiver is not threading.current_thread():
            self._receiver.join(timeout=5)
        for worker in workers:
            worker.process.join(timeout=2 if worker.node is None else 0)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=2)
            worker.sock.close()
        self._wake_r.close()
        self._wake_w.close()


def _raise_fd_limit():
    # Shared-memory buffers travel as file descriptors: give the master
    # the room its hard limit allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (
                hard if hard != resource.RLIM_INFINITY else 65536, hard))
        except (ValueError, OSError):
            pass


def default_workers():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
