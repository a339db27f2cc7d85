"""The dataflow engine shared by the local and sequential backends.

It turns task calls into a graph with PyCOMPSs semantics: futures passed
as arguments (top level, or inside a declared collection) are
dependencies; an object passed ``INOUT`` gets a new version that later
readers depend on; tasks sharing a ``COMMUTATIVE`` object run one at a
time in any order; ``COLLECTION_OUT`` lists are filled with futures. How a
ready task runs is the executor's business (in-process or on a worker).

A task that fails follows its ``on_failure`` policy, as under COMPSs:
``RETRY`` runs it again (:data:`RETRY_ATTEMPTS` executions in all),
``FAIL`` fails it at once, ``IGNORE`` makes its outputs unavailable
(``None`` at ``wait_on``; a task that reads one fails) and
``CANCEL_SUCCESSORS`` cancels the tasks that read its outputs (``None``
at ``wait_on``). An exception raised by an ``IGNORE``'d task's own code
never reaches the engine: the worker gives the ``@on_failure`` defaults
as its outputs (see :mod:`._execute`). A task that runs past its
time-out is stopped by the executor (:mod:`._time_out`) and fails like
one whose code raised.
"""

import itertools
import pickle
import threading
import traceback
import warnings

from dislib_nn.exceptions import (BackendError, TaskCancelledError,
                                  TaskError, TaskFailureWarning)
from dislib_nn.runtime import (_placement, _serialize, _task_counts,
                               _time_out)
from dislib_nn.runtime._future import (_DONE, _FAILED, _PENDING, Failure,
                                       Future)
from dislib_nn.runtime._plan import _Group, _Plan, _dump_arguments

# Executions of a RETRY task before it fails: COMPSs resubmits a failed
# task once to the same node (and reschedules it on other nodes of a
# cluster); the local backends are one node.
RETRY_ATTEMPTS = 2
_MODES = {"IGNORE": "ignored", "CANCEL_SUCCESSORS": "cancelled"}


class Engine:
    """Task graph bookkeeping; ``executor`` runs the ready nodes."""

    def __init__(self, executor_factory, name):
        self.name = name
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self._versions = {}
        self._running = 0
        self._closed = False
        self._ids = itertools.count(1)
        # Nodes not finished yet: node -> [on_failure, executions so far].
        self._nodes = {}
        self._cancelling = False
        self.executor = executor_factory(self)

    # ------------------------------------------------------------ submit
    def submit(self, task_fn, args, kwargs):
        try:
            return self._submit(task_fn, args, kwargs)
        except KeyboardInterrupt:
            # The sequential backend runs tasks here, inline.
            self.cancel_all()
            raise

    def _submit(self, task_fn, args, kwargs):
        spec = task_fn.spec
        # The local pool refuses a task its workers could not find.
        check_task = getattr(self.executor, "check_task", None)
        if check_task is not None:
            check_task(task_fn)
        try:
            bound = spec.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"task {spec.name}(): {exc}") from None
        with self.lock:
            if self._closed:
                raise BackendError(
                    f"the {self.name} backend was shut down; task "
                    f"{spec.name}() cannot be submitted to it.")
            plan = _Plan(self, spec, task_fn)
            arguments = {name: plan.argument(name, value)
                         for name, value in bound.arguments.items()}
            reference = getattr(self.executor, "task_reference", None)
            # Its own time-out, else the caller's runtime.time_out().
            time_out = spec.time_out or _time_out.current()
            header = {"name": spec.name,
                      "function": (reference(task_fn) if reference
                                   else task_fn),
                      "returns": spec.returns, "outputs": plan.outputs,
                      "threads": self.executor.threads,
                      "on_failure": spec.on_failure,
                      "defaults": spec.defaults, "time_out": time_out}
            args_payload = _dump_arguments(spec, arguments, plan.slots,
                                           self.shares_memory)
            node = plan.commit(
                _serialize.dumps(header, share=self.shares_memory),
                args_payload)
            node.seq = next(self._ids)
            node.time_out = time_out
            node.home = _placement.current()
            self._nodes[node] = [spec.on_failure, 0]
            self._running += 1
            self._schedule(node)
        _task_counts.note_submitted(spec.name)
        return plan.returned

    def _schedule(self, node):
        failed = next((f for f in node.waits if f._state == _FAILED), None)
        if failed is not None:
            self._fail_dependent(node, failed._failure)
            return
        for fut in node.waits:
            if fut._state == _PENDING:
                node.pending += 1
                fut._waiters.append(node)
        if node.pending == 0:
            self._ready(node)

    def _ready(self, node):
        if self._cancelling:
            return      # cancel_all() fails it
        if any(g.busy for g in node.groups):
            next(g for g in node.groups if g.busy).queue.append(node)
            return
        for group in node.groups:
            group.busy = True
        self.executor.dispatch(node)

    # ---------------------------------------------------------- dispatch
    def message(self, node):
        """The payloads a node runs from (again, when it is retried),
        counting one more execution."""
        self._nodes[node][1] += 1
        return self.payloads(node)

    def payloads(self, node):
        """:meth:`message`, counting nothing."""
        deps = []
        for dep in node.deps:
            if isinstance(dep, _Group):
                deps.append(dep.current if dep.current is not None
                            else dep.base._payload)
            else:
                deps.append(dep._payload)
        return [node.header, node.args] + deps

    def _release(self, fut):
        fut._consumers -= 1
        if fut._deleted and fut._consumers == 0:
            fut._payload = None

    # ---------------------------------------------------------- complete
    def complete(self, node, result):
        """Record what a node's execution returned (payload list)."""
        with self.lock:
            if node not in self._nodes:
                return      # cancelled while it ran
            status = _serialize.loads(result[0])
            if status[0] == "ok":
                if len(status) > 1:
                    _warn(f"task {node.name}() raised {status[1]}; "
                          f"on_failure='IGNORE': its outputs take their "
                          f"@on_failure defaults (None without one).")
                # Every output first, then the readers they made ready, in
                # the order they were submitted: a reader of two outputs
                # (say a checkpoint's copy of a model and its momentum)
                # does not queue behind later tasks that read one.
                ready = []
                for target, payload in zip(node.targets, result[1:]):
                    if isinstance(target, _Group):
                        target.current = payload
                    else:
                        ready += self._resolve(target, payload)
                self._start(ready)
                self._finish(node)
            else:
                _, kind, message, remote_tb, exc_data = status
                self._job_failed(node, Failure(node.name, kind, message,
                                               remote_tb, exc_data))

    def fail(self, node, exc, retryable=True):
        """A node could not run or its worker died: fail it with ``exc``.

        ``retryable=False`` when running it again cannot help (the
        executor itself is broken).
        """
        with self.lock:
            if node in self._nodes:
                self._job_failed(node, _failure_of(node.name, exc),
                                 retryable=retryable)

    def _job_failed(self, node, failure, ran=True, retryable=True):
        """Apply ``node``'s on_failure policy to one failed execution."""
        policy, attempts = self._nodes[node]
        failure.attempts = max(attempts, 1)
        what = f"{failure.kind.rpartition('.')[2]}: {failure.message}"
        if policy == "RETRY" and retryable and attempts < RETRY_ATTEMPTS:
            _warn(f"task {node.name}() failed ({what}); "
                  f"on_failure='RETRY': running "
                  f"it again (attempt {attempts + 1} of {RETRY_ATTEMPTS}).")
            self.executor.dispatch(node)
            return
        failure.mode = _MODES.get(policy, "raise")
        if failure.mode != "raise":
            _warn(f"task {node.name}() failed ({what}); "
                  f"on_failure={policy!r}: its "
                  f"outputs are {failure.mode}"
                  + (", and so are the tasks that read them."
                     if failure.mode == "cancelled" else "."))
        self._fail(node, failure, ran=ran)

    def _fail_dependent(self, node, failure):
        """``node`` reads an output of a failed task: it cannot run."""
        if failure.mode != "ignored":
            self._fail(node, failure.for_dependent(node.name))
            return
        # The IGNORE'd output does not exist: for COMPSs, the reader's
        # own execution fails, and its own policy applies (a retry
        # cannot help).
        exc = TaskError(
            f"task {node.name}() could not run: it reads an output of "
            f"task {failure.task}(), which failed ({failure.message}) "
            f"with on_failure='IGNORE' and no default for it.",
            task_name=node.name)
        self._job_failed(node, _failure_of(node.name, exc), ran=False,
                         retryable=False)

    def _resolve(self, fut, payload):
        """Give ``fut`` its value; the readers that were waiting only for
        it (for :meth:`_start`)."""
        fut._state = _DONE
        fut._payload = (None if fut._deleted and fut._consumers == 0
                        else payload)
        waiters, fut._waiters = fut._waiters, []
        ready = []
        for node in waiters:
            node.pending -= 1
            if node.pending == 0:
                ready.append(node)
        return ready

    def _start(self, readers):
        """Dispatch readers made ready: ``priority=True`` tasks first,
        then in the order they were submitted."""
        for node in sorted(readers, key=lambda n: (not n.priority, n.seq)):
            self._ready(node)

    def _fail(self, node, failure, ran=False):
        for target in node.targets:
            if isinstance(target, _Group):
                target.failure = target.failure or failure
            elif target._state == _PENDING:
                self._reject(target, failure)
        self._finish(node, ran=ran)

    def _reject(self, fut, failure):
        fut._state = _FAILED
        fut._failure = failure
        waiters, fut._waiters = fut._waiters, []
        for node in waiters:
            if node.pending > 0:
                node.pending = -1   # never becomes ready
                self._fail_dependent(node, failure)

    def _finish(self, node, ran=True):
        if self._nodes.pop(node, None) is None:
            return      # already finished (cancelled)
        for dep in node.deps:
            if isinstance(dep, Future):
                self._release(dep)
        for group in node.groups:
            if ran:
                group.busy = False
            group.finished += 1
            self._maybe_close_result(group)
        self._running -= 1
        for group in node.groups:
            while group.queue and not group.busy:
                self._ready(group.queue.pop(0))
        self.cond.notify_all()

    def _maybe_close_result(self, group):
        if group.closed and group.finished == group.members \
                and group.result._state == _PENDING:
            if group.failure is not None:
                self._reject(group.result, group.failure)
            else:
                self._start(self._resolve(
                    group.result, group.current if group.current is not None
                    else group.base._payload))

    # ---------------------------------------------------------- versions
    def latest(self, obj):
        """The Future that holds ``obj``'s latest value, or ``None``."""
        record = self._versions.get(id(obj))
        if record is not None and record.obj is obj:
            latest = record.latest
            if isinstance(latest, _Group):
                latest.closed = True
                record.latest = latest.result
                self._maybe_close_result(latest)
                return latest.result
            return latest
        if isinstance(obj, Future):
            if obj._engine is not self:
                raise BackendError(
                    f"{obj!r} belongs to the {obj._engine.name} backend, "
                    f"which is no longer the current one.")
            return obj
        return None

    def tracks(self, obj):
        """Whether ``obj`` was passed INOUT or COMMUTATIVE to a task."""
        record = self._versions.get(id(obj))
        return record is not None and record.obj is obj

    # ------------------------------------------------------ synchronise
    def wait(self, obj):
        """The value of ``obj``: waits for it when it is a future."""
        with self.lock:
            fut = self.latest(obj)
            if fut is None:
                return obj
            self._versions.pop(id(obj), None)
            if fut._deleted:
                raise BackendError(f"{fut!r} was deleted with "
                                   f"delete_object(); it has no value.")
            if fut._synced:
                raise BackendError(
                    f"{fut!r} was already resolved by an earlier wait_on. "
                    f"Under COMPSs, wait_on ends the futures it resolves "
                    f"(their data is deleted and no longer tracked), so a "
                    f"second wait_on would return the empty future itself: "
                    f"keep and use the value the first wait_on returned.")
            self._sleep_while(lambda: fut._state == _PENDING)
            # Only a wait that ended resolves it (Ctrl-C may interrupt).
            fut._synced = True
            if fut._state == _FAILED:
                failure = fut._failure
                if failure.mode == "raise":
                    raise failure.exception()
                _warn(f"{fut!r} has no value: task {failure.task}() "
                      f"failed and its on_failure made its outputs "
                      f"{failure.mode}; wait_on gives None, as COMPSs "
                      f"does.")
                return None
            payload = fut._payload
        fetch = getattr(self.executor, "fetch", None)
        if fetch is not None:
            payload = fetch(payload)    # held by a remote worker
        return _serialize.loads(payload)

    def barrier(self):
        with self.lock:
            self._sleep_while(lambda: self._running)

    def _sleep_while(self, condition):
        try:
            while condition():
                self.cond.wait()
        except KeyboardInterrupt:
            self.cancel_all()
            raise

    def cancel_all(self):
        """Cancel every unfinished task (after Ctrl-C): none keeps running.

        Their futures raise :class:`TaskCancelledError`; the backend stays
        usable for new tasks.
        """
        with self.lock:
            self._cancelling = True
            try:
                self.executor.abort()
                for node in list(self._nodes):
                    if node in self._nodes:
                        exc = TaskCancelledError(
                            f"task {node.name}() was cancelled: the "
                            f"program was interrupted (KeyboardInterrupt) "
                            f"before it finished.")
                        self._fail(node, _failure_of(node.name, exc),
                                   ran=True)
            finally:
                self._cancelling = False
            self.cond.notify_all()

    def delete(self, obj):
        with self.lock:
            fut = self.latest(obj)
            self._versions.pop(id(obj), None)
            if fut is not None:
                fut._deleted = True
                if fut._consumers == 0:
                    fut._payload = None

    @property
    def shares_memory(self):
        """Whether payloads may refer to this machine's shared memory
        (False where tasks run on other machines)."""
        return getattr(self.executor, "shares_memory", True)

    @property
    def usable(self):
        """Whether tasks submitted now can run."""
        return not self._closed and getattr(self.executor, "usable", True)

    def shutdown(self):
        with self.lock:
            self._closed = True
        self.executor.shutdown()


def _failure_of(task_name, exc):
    return Failure(task_name, type(exc).__name__, str(exc),
                   "".join(traceback.format_exception_only(type(exc), exc)),
                   pickle.dumps(exc))


def _warn(message):
    warnings.warn(message, TaskFailureWarning, stacklevel=2)
