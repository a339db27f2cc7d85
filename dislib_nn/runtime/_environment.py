"""What the environment chooses for the runtime: the ``DISLIB_NN_*``
variables, read once when :mod:`dislib_nn.runtime` is imported.

``DISLIB_NN_BACKEND`` names the backend (under ``runcompss`` it is
``compss`` by default), ``DISLIB_NN_WORKERS`` and ``DISLIB_NN_THREADS``
the worker processes and torch threads per task,
``DISLIB_NN_START_METHOD`` how the local pool starts them, and
``DISLIB_NN_DASK_ADDRESS`` / ``DISLIB_NN_DASK_SCHEDULER_FILE`` the dask
scheduler. A value that cannot be right raises ``BackendError`` naming
the variable and the value.
"""

import os

from dislib_nn.exceptions import BackendError
from dislib_nn.runtime import _compss_detect

__all__ = ["BACKENDS", "START_METHODS", "backend_choice", "env_int",
           "initial_settings"]

BACKENDS = ("local", "sequential", "compss", "dask")
START_METHODS = ("forkserver", "fork", "spawn")


def backend_choice():
    """The backend ``DISLIB_NN_BACKEND`` names, else ``compss`` inside
    the COMPSs runtime and ``local`` elsewhere."""
    name = os.environ.get("DISLIB_NN_BACKEND", "").strip().lower()
    if name and name not in BACKENDS:
        raise BackendError(
            f"DISLIB_NN_BACKEND must be one of {', '.join(BACKENDS)}. "
            f"Got {name!r} instead.")
    if name == "compss" and not _compss_detect.in_compss():
        raise BackendError(
            "DISLIB_NN_BACKEND=compss, but this script is not running "
            "inside the COMPSs runtime: launch it with runcompss or "
            "enqueue_compss.")
    if not name:
        name = "compss" if _compss_detect.in_compss() else "local"
    return name


def env_int(var):
    """The int >= 1 in environment variable ``var``, None when unset."""
    raw = os.environ.get(var)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise BackendError(f"{var} must be an int >= 1. Got {raw!r} "
                           f"instead.")
    return value


def initial_settings():
    """The runtime's settings before any ``set_backend`` call."""
    return {"n_workers": env_int("DISLIB_NN_WORKERS"),
            "threads": env_int("DISLIB_NN_THREADS") or 1,
            "start_method": os.environ.get("DISLIB_NN_START_METHOD",
                                           "forkserver"),
            "address": os.environ.get("DISLIB_NN_DASK_ADDRESS") or None,
            "scheduler_file": os.environ.get(
                "DISLIB_NN_DASK_SCHEDULER_FILE") or None,
            "client": None,
            # A backend named by DISLIB_NN_BACKEND or set_backend():
            # the current dask client then does not choose dask.
            "explicit": bool(os.environ.get("DISLIB_NN_BACKEND",
                                            "").strip())}
