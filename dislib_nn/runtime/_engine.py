"""The dataflow engine shared by the local and sequential backends.

It turns task calls into a graph with PyCOMPSs semantics: futures passed
as arguments (top level, or inside a declared collection) are
dependencies; an object passed ``INOUT`` gets a new version that later
readers depend on; tasks sharing a ``COMMUTATIVE`` object run one at a
time in any order; ``COLLECTION_OUT`` lists are filled with futures. How a
ready task runs is the executor's business (in-process or on a worker).
"""

import itertools
import pickle
import threading
import traceback

from dislib_nn.exceptions import BackendError
from dislib_nn.runtime import _serialize
from dislib_nn.runtime._future import (_DONE, _FAILED, _PENDING, Failure,
                                       Future)
from dislib_nn.runtime._plan import _Group, _Plan, _dump_arguments


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
        self.executor = executor_factory(self)

    # ------------------------------------------------------------ submit
    def submit(self, task_fn, args, kwargs):
        spec = task_fn.spec
        try:
            bound = spec.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"task {spec.name}(): {exc}") from None
        with self.lock:
            if self._closed:
                raise BackendError(
                    f"the {self.name} backend was shut down; task "
                    f"{spec.name}() cannot be submitted to it.")
            plan = _Plan(self, spec)
            arguments = {name: plan.argument(name, value)
                         for name, value in bound.arguments.items()}
            header = {"name": spec.name, "function": task_fn,
                      "returns": spec.returns, "outputs": plan.outputs,
                      "threads": self.executor.threads}
            args_payload = _dump_arguments(spec, arguments, plan.slots)
            node = plan.commit(_serialize.dumps(header), args_payload)
            self._running += 1
            self._schedule(node)
        return plan.returned

    def _schedule(self, node):
        failed = next((f for f in node.waits if f._state == _FAILED), None)
        if failed is not None:
            self._fail(node, failed._failure.for_dependent(node.name))
            return
        for fut in node.waits:
            if fut._state == _PENDING:
                node.pending += 1
                fut._waiters.append(node)
        if node.pending == 0:
            self._ready(node)

    def _ready(self, node):
        if any(g.busy for g in node.groups):
            next(g for g in node.groups if g.busy).queue.append(node)
            return
        for group in node.groups:
            group.busy = True
        self.executor.dispatch(node)

    # ---------------------------------------------------------- dispatch
    def message(self, node):
        """The payloads a node runs from; releases the node's references."""
        deps = []
        for dep in node.deps:
            if isinstance(dep, _Group):
                deps.append(dep.current if dep.current is not None
                            else dep.base._payload)
            else:
                deps.append(dep._payload)
        message = [node.header, node.args] + deps
        for dep in node.deps:
            if isinstance(dep, Future):
                self._release(dep)
        return message

    def _release(self, fut):
        fut._consumers -= 1
        if fut._deleted and fut._consumers == 0:
            fut._payload = None

    # ---------------------------------------------------------- complete
    def complete(self, node, result):
        """Record what a node's execution returned (payload list)."""
        with self.lock:
            status = _serialize.loads(result[0])
            if status[0] == "ok":
                for target, payload in zip(node.targets, result[1:]):
                    if isinstance(target, _Group):
                        target.current = payload
                    else:
                        self._resolve(target, payload)
                self._finish(node)
            else:
                _, kind, message, remote_tb, exc_data = status
                self._fail(node, Failure(node.name, kind, message,
                                         remote_tb, exc_data), ran=True)

    def fail(self, node, exc):
        """A node could not run or its worker died: fail it with ``exc``."""
        with self.lock:
            failure = Failure(
                node.name, type(exc).__name__, str(exc),
                "".join(traceback.format_exception_only(type(exc), exc)),
                pickle.dumps(exc))
            self._fail(node, failure, ran=True)

    def _resolve(self, fut, payload):
        fut._state = _DONE
        fut._payload = (None if fut._deleted and fut._consumers == 0
                        else payload)
        waiters, fut._waiters = fut._waiters, []
        for node in waiters:
            node.pending -= 1
            if node.pending == 0:
                self._ready(node)

    def _fail(self, node, failure, ran=False):
        for target in node.targets:
            if isinstance(target, _Group):
                target.failure = target.failure or failure
            elif target._state == _PENDING:
                self._reject(target, failure)
        if not ran:
            for dep in node.deps:
                if isinstance(dep, Future):
                    self._release(dep)
        self._finish(node, ran=ran)

    def _reject(self, fut, failure):
        fut._state = _FAILED
        fut._failure = failure
        waiters, fut._waiters = fut._waiters, []
        for node in waiters:
            if node.pending > 0:
                node.pending = -1   # never becomes ready
                self._fail(node, failure.for_dependent(node.name))

    def _finish(self, node, ran=True):
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
                self._resolve(group.result, group.current
                              if group.current is not None
                              else group.base._payload)

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
            fut._synced = True
            while fut._state == _PENDING:
                self.cond.wait()
            if fut._state == _FAILED:
                raise fut._failure.exception()
            payload = fut._payload
        return _serialize.loads(payload)

    def barrier(self):
        with self.lock:
            while self._running:
                self.cond.wait()

    def delete(self, obj):
        with self.lock:
            fut = self.latest(obj)
            self._versions.pop(id(obj), None)
            if fut is not None:
                fut._deleted = True
                if fut._consumers == 0:
                    fut._payload = None

    def shutdown(self):
        with self.lock:
            self._closed = True
        self.executor.shutdown()
