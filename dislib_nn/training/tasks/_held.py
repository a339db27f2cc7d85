"""A value many tasks of a fit read, held by the runtime.

A task's arguments travel with the task: the components recipe, which
carries a module *instance*'s weights when the user gave one, would
cross the master's link with every training task. Held as a task's
result instead, it travels to each worker once (dask and COMPSs keep
what a worker fetched; the local backend shares it) and no more.
"""

from dislib_nn.runtime import task

__all__ = ["held"]


@task(returns=1)
def _held(value):
    return value


def held(value):
    """A future of ``value`` for tasks to read."""
    return _held(value)
