"""@task of the PyCOMPSs test double: records its arguments, runs inline."""

import functools

RECORDED = []


class task:  # noqa: N801 - PyCOMPSs spells it this way
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def __call__(self, fn):
        RECORDED.append((fn.__qualname__, self.kwargs))

        @functools.wraps(fn)
        def run_inline(*args, **kwargs):
            return fn(*args, **kwargs)

        run_inline.compss_task_kwargs = self.kwargs
        return run_inline


Task = task
