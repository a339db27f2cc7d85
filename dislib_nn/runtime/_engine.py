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

from dislib_nn.exceptions import (BackendError, TaskArgumentError,
                                  TaskError)
from dislib_nn.runtime import _serialize
from dislib_nn.runtime._execute import UNSET
from dislib_nn.runtime._params import (COLLECTION_IN, COLLECTION_OUT,
                                       COMMUTATIVE, IN, INOUT)

_PENDING, _DONE, _FAILED = "pending", "done", "failed"


class Future:
    """The result of a task that may not have run yet.

    Pass it to other tasks (it becomes a dependency) or get its value with
    ``wait_on``. It cannot be pickled or used as a value.
    """

    _dislib_nn_future = True
    __slots__ = ("_engine", "_task", "_state", "_payload", "_failure",
                 "_waiters", "_consumers", "_deleted", "__weakref__")

    def __init__(self, engine, task_name):
        self._engine = engine
        self._task = task_name
        self._state = _PENDING
        self._payload = None
        self._failure = None
        self._waiters = []
        self._consumers = 0
        self._deleted = False

    def __repr__(self):
        return f"<Future of task {self._task}(): {self._state}>"

    def __reduce__(self):
        raise TypeError(
            f"a Future of task {self._task}() cannot be pickled: pass it "
            f"to a task, or call wait_on() to get its value.")


class _Slot:
    """Stands in for a commutative argument in the pickled arguments."""

    _dislib_nn_future = True


class Failure:
    """Why a task failed, as data that can be re-raised any number of times."""

    def __init__(self, task, kind, message, remote_tb, exc_data,
                 blocked=None):
        self.task = task
        self.kind = kind
        self.message = message
        self.remote_tb = remote_tb
        self.exc_data = exc_data
        self.blocked = blocked

    def for_dependent(self, task):
        return Failure(self.task, self.kind, self.message, self.remote_tb,
                       self.exc_data, blocked=task)

    def exception(self):
        exc = None
        if self.exc_data is not None:
            try:
                exc = pickle.loads(self.exc_data)
            except Exception:  # noqa: BLE001 - fall back to TaskError
                exc = None
        if exc is None:
            exc = TaskError(
                f"task {self.task}() failed with {self.kind}: "
                f"{self.message}", task_name=self.task,
                remote_type=self.kind, remote_traceback=self.remote_tb)
        exc.__cause__ = RemoteTraceback(self.remote_tb)
        note = f"raised by task {self.task}()"
        if self.blocked:
            note += (f"; task {self.blocked}() did not run because it "
                     f"depends on that result")
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        return exc


class RemoteTraceback(Exception):
    """Carries the traceback of an exception raised inside a task."""

    def __str__(self):
        return "\n\nTraceback in the task:\n" + self.args[0]


class _Version:
    """The latest version of an object passed INOUT or COMMUTATIVE."""

    __slots__ = ("obj", "latest")

    def __init__(self, obj, latest):
        self.obj = obj          # kept alive so that its id stays unique
        self.latest = latest    # a Future or an open _Group


class _Group:
    """Consecutive COMMUTATIVE tasks on one object."""

    def __init__(self, engine, name, base):
        self.result = Future(engine, name)
        self.base = base            # Future of the version before, or None
        self.current = None         # payload of the latest value
        self.failure = None
        self.busy = False
        self.members = 0
        self.finished = 0
        self.closed = False
        self.queue = []


class _Node:
    __slots__ = ("name", "header", "args", "deps", "waits", "targets",
                 "groups", "pending")

    def __init__(self, name):
        self.name = name
        self.header = None
        self.args = None
        self.deps = []       # slot index -> Future or _Group
        self.waits = []      # every Future this node waits for
        self.targets = []    # output index -> Future or _Group
        self.groups = []
        self.pending = 0


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


class _Plan:
    """The effects of one task call, applied only once nothing can fail."""

    def __init__(self, engine, spec):
        self.engine = engine
        self.spec = spec
        self.slots = {}
        self.node = _Node(spec.name)
        self.outputs = []
        self.effects = []
        self.returned = None

    def _dep(self, fut):
        if id(fut) not in self.slots:
            if fut._deleted:
                raise TaskArgumentError(
                    f"task {self.spec.name}() got {fut!r}, which was "
                    f"deleted with delete_object().")
            self.slots[id(fut)] = len(self.node.deps)
            self.node.deps.append(fut)
            self.node.waits.append(fut)
        return fut

    def _read(self, value):
        fut = self.engine.latest(value)
        return value if fut is None else self._dep(fut)

    def argument(self, name, value):
        direction, depth = self.spec.direction(name)
        if direction is IN:
            return self._read(value)
        if direction is COLLECTION_IN:
            return self._collection(name, value, depth, self._read)
        if direction is INOUT:
            current = self._read(value)
            fut = Future(self.engine, self.spec.name)
            self.outputs.append(("param", name, ()))
            self.node.targets.append(fut)
            self.effects.append(("version", value, fut))
            return current
        if direction is COMMUTATIVE:
            return self._commutative(name, value)
        if direction is COLLECTION_OUT:
            return self._collection_out(name, value, depth)
        raise TaskArgumentError(
            f"task {self.spec.name}(): direction {direction!r} of "
            f"'{name}' is not supported by the {self.engine.name} backend.")

    def _collection(self, name, value, depth, leaf):
        if not isinstance(value, (list, tuple)):
            raise TaskArgumentError(
                f"task {self.spec.name}(): '{name}' is declared a "
                f"collection and must be a list. Got "
                f"{type(value).__name__} instead.")
        items = [self._collection(name, v, depth - 1, leaf)
                 if depth > 1 and isinstance(v, (list, tuple)) else leaf(v)
                 for v in value]
        return type(value)(items)

    def _commutative(self, name, value):
        record = self.engine._versions.get(id(value))
        open_group = (record is not None and record.obj is value
                      and isinstance(record.latest, _Group))
        if open_group:
            group, new = record.latest, False
        else:
            base = self.engine.latest(value)
            group, new = _Group(self.engine, self.spec.name, base), True
            if base is None:
                group.current = _dump_one(self.spec, name, value)
        if group.base is not None:
            # Every member waits for the version the group starts from.
            self.node.waits.append(group.base)
        slot = _Slot()
        self.slots[id(slot)] = len(self.node.deps)
        self.node.deps.append(group)
        self.node.groups.append(group)
        self.node.targets.append(group)
        self.outputs.append(("param", name, ()))
        self.effects.append(("group", value, group, new, slot))
        return slot

    def _collection_out(self, name, value, depth):
        if not isinstance(value, list):
            raise TaskArgumentError(
                f"task {self.spec.name}(): COLLECTION_OUT '{name}' must be "
                f"a list, pre-filled to its final length. Got "
                f"{type(value).__name__} instead.")

        def placeholders(items, level, path):
            out = []
            for i, item in enumerate(items):
                if level > 1 and isinstance(item, list):
                    out.append(placeholders(item, level - 1, path + (i,)))
                else:
                    out.append(UNSET)
                    fut = Future(self.engine, self.spec.name)
                    self.outputs.append(("element", name, path + (i,)))
                    self.node.targets.append(fut)
                    self.effects.append(("element", items, i, fut))
            return out

        result = placeholders(value, depth, ())
        # The recursive closure and its cell form a reference cycle that
        # would keep this plan, and so the futures and payloads (shared
        # memory) of its outputs, alive until the cyclic GC ran.
        del placeholders
        return result

    def commit(self, header, args_payload):
        node = self.node
        node.header, node.args = header, args_payload
        returns = self.spec.returns
        results = [Future(self.engine, self.spec.name)
                   for _ in range(returns)]
        node.targets[:0] = results
        self.returned = (None if returns == 0 else results[0]
                         if returns == 1 else results)
        for dep in node.deps:
            if isinstance(dep, Future):
                dep._consumers += 1
        versions = self.engine._versions
        for effect in self.effects:
            if effect[0] == "version":
                versions[id(effect[1])] = _Version(effect[1], effect[2])
            elif effect[0] == "group":
                _, value, group, new, _slot = effect
                group.members += 1
                if new:
                    versions[id(value)] = _Version(value, group)
            else:
                _, items, i, fut = effect
                items[i] = fut
        return node


def _dump_arguments(spec, arguments, slots):
    try:
        return _serialize.dumps(arguments, slots)
    except BaseException:  # noqa: B902 - find and name the culprit
        for name, value in arguments.items():
            _dump_one(spec, name, value, slots)
        raise


def _dump_one(spec, name, value, slots=None):
    try:
        return _serialize.dumps(value, slots)
    except _serialize.HiddenFuture as exc:
        raise TaskArgumentError(
            f"argument '{name}' of task {spec.name}() holds "
            f"{exc.future!r} inside a container that is not a declared "
            f"collection. COMPSs would pass a placeholder, not the value: "
            f"declare it, e.g. @task({name}={{Type: COLLECTION_IN, Depth: "
            f"1}}), or call wait_on() first.") from None
    except Exception as exc:  # noqa: BLE001 - pickling can raise anything
        hint = _pickling_hint(value)
        raise TaskArgumentError(
            f"argument '{name}' of task {spec.name}() cannot be sent to a "
            f"worker: {exc}. {hint}") from exc


def _pickling_hint(value):
    qualname = getattr(value, "__qualname__", "")
    if "<lambda>" in qualname:
        return ("It is a lambda: COMPSs pickles task arguments with plain "
                "pickle, which cannot carry lambdas. Pass a function "
                "defined at module level (functools.partial of one works).")
    if "<locals>" in qualname:
        return ("It is defined inside a function (a closure): COMPSs "
                "pickles task arguments with plain pickle, which carries "
                "only module-level functions and classes. Move it to "
                "module level.")
    return ("Task arguments are pickled, as under COMPSs: every object "
            "in them must be picklable.")
