"""Futures and failures: what a task call hands back before it has run."""

import pickle

from dislib_nn.exceptions import TaskError

_PENDING, _DONE, _FAILED = "pending", "done", "failed"


class Future:
    """The result of a task that may not have run yet.

    Pass it to other tasks (it becomes a dependency) or get its value with
    ``wait_on``. It cannot be pickled or used as a value.
    """

    _dislib_nn_future = True
    __slots__ = ("_engine", "_task", "_state", "_payload", "_failure",
                 "_waiters", "_consumers", "_deleted", "_synced",
                 "__weakref__")

    def __init__(self, engine, task_name):
        self._engine = engine
        self._task = task_name
        self._state = _PENDING
        self._payload = None
        self._failure = None
        self._waiters = []
        self._consumers = 0
        self._deleted = False
        self._synced = False    # resolved by wait_on: ended, as in COMPSs

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
