"""The dask backend: tasks run on a dask.distributed cluster.

The master keeps the same task graph as the local backends (the
:class:`~dislib_nn.runtime._engine.Engine`: versions, commutative groups,
collections, failure policies, the strict argument rules); this executor
only runs the nodes that became ready. Each node is one dask task.

Data stays where it was made: a task's outputs stay, pickled, in the
memory of the worker that ran it, as dask futures; a later task that
reads them names those futures as its arguments, so dask's scheduler
places it on the worker holding most of its inputs and moves the rest
between workers directly; a task called inside ``runtime.placed(...)``
prefers the worker it names (:mod:`._placement`). The master
fetches a value only for ``wait_on``. Outputs stay pickled on the
workers, so every task rebuilds a private copy of its inputs, as under
COMPSs, even when it runs where they were made.

A task's status (it finished, or raised) reaches the master with the
dask future's own state: a task that raised carries its error as data in
the exception the dask task raises, and the engine applies its
``on_failure`` policy as on every backend. A worker that dies fails its
task with :class:`~dislib_nn.exceptions.WorkerDiedError` once dask gives
up on it (dask itself first reruns the task on other workers:
``distributed.scheduler.allowed-failures``). A task with a time-out runs
in a helper process of its dask worker, killed at the deadline
(:mod:`._dask_timed`).
"""

import itertools
import operator
import threading
import time
from typing import NamedTuple

from dislib_nn.exceptions import BackendError, WorkerDiedError
from dislib_nn.runtime import _dask_timed, _execute, _placement, _serialize
from dislib_nn.runtime._by_value import by_value

# Payloads the master sends at least this large go to a worker with
# scatter, straight, instead of inside the task's message (which dask
# relays through its scheduler).
SCATTER_MIN_BYTES = 1 << 20
# How long the workers' addresses that runtime.placed() maps node
# indices to are used before the scheduler is asked again.
ADDRESSES_TTL_S = 10.0

_OK = _serialize.dumps(("ok",))


class TaskKey(NamedTuple):
    """What the dask key of one of this backend's tasks says: the task
    function's name and its number, in the order the tasks became ready
    and went to dask."""
    name: str
    number: int


def task_key(key):
    """The :class:`TaskKey` of a dask ``key`` this backend gave a task
    (``"<name>-<number>"``), or None for any other key: a task's output
    parts (``"<task key>-part<i>"``) or dask's own."""
    name, _, number = str(key).rpartition("-")
    return TaskKey(name, int(number)) if name and number.isdigit() \
        else None


class Remote:
    """An output held by a dask worker: the dask future of its bytes."""

    __slots__ = ("future",)

    def __init__(self, future):
        self.future = future


class TaskRaised(Exception):
    """Raised by a dask task whose own code raised: carries the status
    payload the engine reads (type, message, traceback, the exception)."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status

    def __str__(self):
        kind, message = _serialize.loads(
            _serialize.Payload(self.status))[1:3]
        return f"{kind}: {message}"


def run_remote(header, args, deps, n_outputs, keep_status, time_out=None):
    """The dask task: run one dislib_nn task from its payloads' bytes.

    Returns the outputs' bytes (one: the bytes; several: a tuple; none:
    None), with the status first when ``keep_status``. A task with a
    ``time_out`` runs in a helper process killed at its deadline
    (:mod:`._dask_timed`).
    """
    # (Not _execute.in_worker: a client may run its workers as threads
    # of the master's own process.)
    payloads = [_serialize.Payload(header), _serialize.Payload(args)]
    payloads += [_serialize.Payload(d) for d in deps]
    if time_out is None:
        result = _execute.run(payloads, share=False)
    else:
        result = _dask_timed.run(payloads, time_out)
    status = result[0].data
    if _serialize.loads(result[0])[0] != "ok":
        raise TaskRaised(status)
    outputs = [p.data for p in result[1:]]
    if keep_status:
        return (status, *outputs)
    if n_outputs == 1:
        return outputs[0]
    return tuple(outputs) if outputs else None


class DaskExecutor:
    """Runs ready nodes as dask tasks on the cluster of ``connection``."""

    name = "dask"
    shares_memory = False

    def __init__(self, engine, connection, threads):
        self.engine = engine
        self.connection = connection
        self.threads = threads
        # node -> dask future of its execution, while it runs.
        self._running = {}
        # node -> the dask tasks that split its outputs (see _parts).
        self._outputs = {}
        self._lock = threading.Lock()
        self._keys = itertools.count()
        # The workers' addresses, sorted, and when they were read.
        self._addresses, self._addresses_at = [], None

    # ------------------------------------------------------- the cluster
    @property
    def started(self):
        return self.connection.connected

    @property
    def n_workers(self):
        return self.connection.n_workers()

    @property
    def usable(self):
        return not self.connection.closed

    def task_reference(self, task_fn):
        """How the task's function travels: by name, or by value when it
        is defined in the script (dask workers never import it)."""
        if task_fn.__module__ == "__main__":
            return by_value(task_fn.__wrapped__)
        return task_fn

    # ---------------------------------------------------------- dispatch
    def dispatch(self, node):
        """Submit a ready node (the engine lock is held)."""
        try:
            client = self.connection.client()
            header, args, *deps = self.engine.message(node)
            n_outputs = len(node.targets)
            keep_status = node.task is not None and \
                node.task.spec.on_failure == "IGNORE"
            home = self._home(node)
            future = client.submit(
                run_remote, self._send(client, header, home),
                self._send(client, args, home),
                [self._send(client, d, home) for d in deps], n_outputs,
                keep_status, node.time_out,
                key=f"{node.name}-{next(self._keys)}",   # see task_key
                resources=self._resources(node), pure=False,
                priority=self._priority(node), workers=home,
                allow_other_workers=home is not None)
            parts = self._parts(client, node, future, n_outputs, keep_status,
                                home)
        except Exception as exc:  # noqa: BLE001 - the cluster's own errors
            self.engine.fail(node, exc, retryable=False)
            return
        with self._lock:
            self._running[node] = future
            self._outputs[node] = parts
        future.add_done_callback(
            lambda fut: self._done(node, fut, n_outputs, keep_status))

    @staticmethod
    def _priority(node):
        """dask's priority for ``@task(priority=True)``: higher first."""
        return 1 if node.priority else 0

    def _parts(self, client, node, future, n_outputs, keep_status, home):
        """The dask tasks that take each output out of the task's tuple,
        submitted with it: the scheduler runs them as soon as the tuple
        exists, with no round trip through the master, and readers of
        one output fetch that output alone. A placed task's parts prefer
        its ``home``, where the tuple is made: otherwise a worker with an
        empty queue may fetch the whole tuple to take one output."""
        if n_outputs < 2 and not keep_status:
            return None     # the task's own future is its one output
        # Keys named after the task's, so that a transfer log or the
        # dashboard tells whose output moved.
        return [client.submit(operator.getitem, future, i, pure=False,
                              key=f"{future.key}-part{i}",
                              priority=self._priority(node), workers=home,
                              allow_other_workers=home is not None)
                for i in range(n_outputs + keep_status)]

    def _home(self, node):
        """The worker ``runtime.placed()`` named for ``node``, as dask's
        ``workers=``: the workers by address are the nodes
        (:func:`._placement.node_index`); None for a node placed
        nowhere."""
        if node.home is None:
            return None
        now = time.monotonic()
        if self._addresses_at is None or \
                now - self._addresses_at > ADDRESSES_TTL_S:
            self._addresses = self.connection.worker_addresses()
            self._addresses_at = now
        if not self._addresses:
            return None
        return [self._addresses[_placement.node_index(
            node.home, len(self._addresses))]]

    def _send(self, client, payload, home=None):
        """A payload as the task's argument: its future, its bytes, or
        large bytes scattered (to the task's ``home`` when it has one, so
        that an array cut into blocks lands where its blocks are made)."""
        if isinstance(payload, Remote):
            return payload.future
        data = payload.data
        if len(data) >= SCATTER_MIN_BYTES:
            return client.scatter(data, hash=False, workers=home)
        return data

    def _resources(self, node):
        """``{"GPU": 1}`` for a task whose constraint asks for GPUs: it
        runs only on workers started with ``--resources GPU=1``, one
        task per GPU."""
        constraints = getattr(node.task, "constraints", None) or {}
        for processor in constraints.get("processors", ()):
            if str(processor.get("processorType", "")).upper() == "GPU":
                return {"GPU": 1}
        return None

    def _done(self, node, future, n_outputs, keep_status):
        """A node's dask task ended (a dask callback thread)."""
        with self._lock:
            if self._running.get(node) is not future:
                return      # cancelled, or replaced by a retry
            del self._running[node]
            parts = self._outputs.pop(node, None)
        try:
            result = self._result(node, future, parts, n_outputs,
                                  keep_status)
        except Exception as exc:  # noqa: BLE001 - never lose a node
            self.engine.fail(node, exc, retryable=False)
            return
        if isinstance(result, Exception):
            self.engine.fail(node, result)
        else:
            self.engine.complete(node, result)

    def _result(self, node, future, parts, n_outputs, keep_status):
        """The engine's ``[status, *outputs]``, or an exception."""
        if future.status == "finished":
            if keep_status:
                status = _serialize.Payload(parts[0].result())
                return [status] + [Remote(p) for p in parts[1:]]
            if n_outputs == 1:
                return [_OK, Remote(future)]
            return [_OK] + [Remote(p) for p in parts or ()]
        if future.status == "cancelled":
            return BackendError(f"the dask task of {node.name}() was "
                                f"cancelled by the cluster.")
        exc = future.exception()
        if isinstance(exc, TaskRaised):
            return [_serialize.Payload(exc.status)]
        if type(exc).__name__ == "KilledWorker":
            return WorkerDiedError(
                f"the dask workers running task {node.name}() died "
                f"({exc}). They may have run out of memory or crashed in "
                f"native code.", task_name=node.name, exitcode=None)
        return exc

    def fetch(self, payload):
        """The bytes of an output, fetched from the worker holding it."""
        if isinstance(payload, Remote):
            return _serialize.Payload(payload.future.result())
        return payload

    # ------------------------------------------------------------ abort
    def abort(self):
        """Drop every running node's dask task (the engine lock is held).

        A task that already started runs to its end on its worker (dask
        cannot stop a running thread); its result is dropped.
        """
        with self._lock:
            futures = list(self._running.values())
            futures += [p for parts in self._outputs.values() if parts
                        for p in parts]
            self._running.clear()
            self._outputs.clear()
        if futures and self.connection.connected:
            try:
                self.connection.client().cancel(futures)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass

    def shutdown(self):
        self.abort()
        self.connection.close()
