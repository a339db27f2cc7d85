"""The ``@task`` and ``@constraint`` decorators of the local backends.

A decorated function becomes a :class:`TaskFunction`: calling it submits a
task to the current backend and returns futures at once. Inside a running
task (and inside a worker process) it is a plain function call, as under
COMPSs.
"""

import functools

from dislib_nn.exceptions import TaskDefinitionError
from dislib_nn.runtime import _execute
from dislib_nn.runtime._params import TaskSpec, check_failure_defaults


class TaskFunction:
    """A function declared with ``@task``; calling it submits a task."""

    def __init__(self, fn, options, current_engine):
        functools.update_wrapper(self, fn)
        self.spec = TaskSpec(fn, options)
        self.options = dict(options)
        self.constraints = dict(getattr(fn, "_dislib_nn_constraints", {}))
        self._current_engine = current_engine

    def __call__(self, *args, **kwargs):
        if _execute.inside_task() or _execute.in_worker:
            return self.__wrapped__(*args, **kwargs)
        from dislib_nn.runtime import _worker
        if _worker.starting():
            _worker.refuse_tasks_at_import(self.__qualname__)
        return self._current_engine().submit(self, args, kwargs)

    def __reduce__(self):
        # Tasks travel by name, as COMPSs sends them: the worker imports
        # the module that defines the task.
        return (_execute.resolve_task, (self.__module__, self.__qualname__))

    def __repr__(self):
        return f"<task {self.__qualname__}>"


def make_task(current_engine, options):
    def decorate(fn):
        if isinstance(fn, TaskFunction):
            raise TypeError(f"@task applied twice to {fn.__qualname__}().")
        return TaskFunction(fn, options, current_engine)
    return decorate


def constraint(**constraints):
    """Record resource constraints (``computing_units``, ``processors``...).

    The local backends give every task ``threads_per_worker`` torch
    threads and ignore the rest; under COMPSs the real ``@constraint``
    schedules the task. Put it above ``@task``, as PyCOMPSs requires.
    """
    def decorate(fn):
        if isinstance(fn, TaskFunction):
            fn.constraints.update(constraints)
        else:
            merged = dict(getattr(fn, "_dislib_nn_constraints", {}))
            merged.update(constraints)
            fn._dislib_nn_constraints = merged
        return fn
    return decorate


def on_failure(*, management, **defaults):
    """What happens when a task fails, and what its outputs become.

    PyCOMPSs's ``@on_failure``: put it above ``@task``.
    ``management`` overrides the task's ``on_failure`` (``"RETRY"``,
    ``"FAIL"``, ``"IGNORE"`` or ``"CANCEL_SUCCESSORS"``); the other
    keywords are the values an ``IGNORE``'d task's outputs take:
    ``returns`` for its result (a list of values when ``returns`` > 1),
    and a parameter's name for the new value of an ``INOUT`` or
    ``COLLECTION_OUT`` parameter. Without a default, a result is
    ``None`` and a parameter keeps the value the task left it in.
    """
    def decorate(fn):
        if not isinstance(fn, TaskFunction):
            raise TaskDefinitionError(
                f"@on_failure must be placed above @task (it configures "
                f"a task); it decorates "
                f"{getattr(fn, '__qualname__', fn)!r}, which is not one.")
        check_failure_defaults(fn.spec, management, defaults)
        fn.spec.on_failure = management
        fn.spec.defaults = dict(defaults)
        return fn
    return decorate
