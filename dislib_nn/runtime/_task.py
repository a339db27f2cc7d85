"""The ``@task`` and ``@constraint`` decorators of the local backends.

A decorated function becomes a :class:`TaskFunction`: calling it submits a
task to the current backend and returns futures at once. Inside a running
task (and inside a worker process) it is a plain function call, as under
COMPSs.
"""

import functools

from dislib_nn.runtime import _execute
from dislib_nn.runtime._params import TaskSpec


class TaskFunction:
    """A function declared with ``@task``; calling it submits a task."""

    def __init__(self, fn, options, current_engine):
        functools.update_wrapper(self, fn)
        self.spec = TaskSpec(fn, options)
        self.options = dict(options)
        self.constraints = dict(getattr(fn, "_dislib_nn_constraints", {}))
        self._current_engine = current_engine

    def __call__(self, *args, **kwargs):
        if _execute._inside_task or _execute.in_worker:
            return self.__wrapped__(*args, **kwargs)
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
