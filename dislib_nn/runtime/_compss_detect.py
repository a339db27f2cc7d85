"""Whether this process runs inside the COMPSs runtime.

Kept apart from ``_compss`` so that detecting COMPSs never imports the
pycompss API where the runtime is absent.
"""

import importlib.util


def in_compss():
    """True under ``runcompss`` / ``enqueue_compss`` (PyCOMPSs 3.x)."""
    if importlib.util.find_spec("pycompss") is None:
        return False
    try:
        from pycompss.util.context import CONTEXT
    except ImportError:
        return False
    return bool(CONTEXT.in_pycompss())
