"""A value many tasks of a fit read, held by the runtime.

A task's arguments travel with the task. Held as a task's result
instead, a value the fit's tasks share (the components recipe, a
sharded fit's first state) crosses the master's link once. COMPSs
keeps what a worker fetched and the local backend shares it, so there
it travels to each worker once. Dask's Active Memory Manager, on by
default, drops a worker's copy once no task there waits for it, so
each round fetches it again from the worker that holds it. That is why
the recipe tasks take is :meth:`Components.for_tasks
<dislib_nn.training._components.Components.for_tasks>`, without a
module instance's weights: measured on the testbed, a recipe carrying
a 16.8 MB instance made the rounds of a sharded fit at 50 Mbit/s take
19 s, and 7.5-8.8 s with the AMM off (docs/benchmarks.md).
"""

from dislib_nn.runtime import task

__all__ = ["held"]


@task(returns=1)
def _held(value):
    return value


def held(value):
    """A future of ``value`` for tasks to read."""
    return _held(value)
