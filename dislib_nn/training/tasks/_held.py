"""A value many tasks of a fit read, held by the runtime.

A task's arguments travel with the task: the components recipe, which
carries a module *instance*'s weights when the user gave one, would
cross the master's link with every training task. Held as a task's
result instead, it crosses the master's link once. COMPSs keeps what a
worker fetched and the local backend shares it, so there it travels to
each worker once. Dask's Active Memory Manager, on by default, drops a
worker's copy once no task there waits for it, so each round fetches
it again from the worker that holds it: measured on the testbed, with
a 16.8 MB module instance, the rounds of a sharded fit at 50 Mbit/s
took 19 s with it and 7.5-8.8 s without it (docs/benchmarks.md).
"""

from dislib_nn.runtime import task

__all__ = ["held"]


@task(returns=1)
def _held(value):
    return value


def held(value):
    """A future of ``value`` for tasks to read."""
    return _held(value)
