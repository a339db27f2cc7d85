"""@constraint of the PyCOMPSs test double: records its arguments."""

RECORDED = []


class constraint:  # noqa: N801 - PyCOMPSs spells it this way
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def __call__(self, fn):
        RECORDED.append((fn.__qualname__, self.kwargs))
        fn.compss_constraints = self.kwargs
        return fn
