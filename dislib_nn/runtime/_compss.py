"""The compss backend: the real PyCOMPSs API, passed through unchanged.

This is the only module of dislib_nn that imports ``pycompss``. It is
imported only when the script runs inside the COMPSs runtime, so every
decorator, direction and API call below is PyCOMPSs's own: COMPSs
schedules, transfers, checkpoints and retries the tasks.
"""

from pycompss.api.api import (compss_barrier, compss_delete_object,
                              compss_wait_on)
from pycompss.api.constraint import constraint  # noqa: F401
from pycompss.api.on_failure import on_failure  # noqa: F401
from pycompss.api.parameter import (  # noqa: F401
    COLLECTION_IN, COLLECTION_OUT, COMMUTATIVE, IN, INOUT, Depth, Type)
from pycompss.api.task import task  # noqa: F401

__all__ = ["task", "constraint", "on_failure", "wait_on", "barrier",
           "delete_object",
           "n_compss_workers", "IN", "INOUT", "COMMUTATIVE",
           "COLLECTION_IN", "COLLECTION_OUT", "Type", "Depth"]


def wait_on(*objs):
    """``compss_wait_on``: one argument gives one value, several a list."""
    return compss_wait_on(*objs)


def barrier():
    compss_barrier()


def delete_object(obj):
    return compss_delete_object(obj)


def n_compss_workers():
    """Computing resources COMPSs reports (at least 1)."""
    try:
        from pycompss.api.api import compss_get_number_of_resources
    except ImportError:
        return 1
    return max(1, int(compss_get_number_of_resources()))
