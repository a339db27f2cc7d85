"""The one import point for task code: PyCOMPSs's API over three backends.

Task code is written exactly as for PyCOMPSs::

    from dislib_nn.runtime import task, wait_on, COLLECTION_IN, Type, Depth

    @task(returns=1, blocks={Type: COLLECTION_IN, Depth: 1})
    def total(blocks):
        return sum(blocks)

Backends
--------
``compss``
    Chosen automatically when the script runs inside the COMPSs runtime
    (``runcompss`` / ``enqueue_compss``): the names below are then the real
    ``pycompss`` decorators and functions (``task`` makes PyCOMPSs's own
    declaration, checking ``time_out`` first).
``local`` (default elsewhere)
    A pool of worker processes on this machine, one per CPU core.
``sequential``
    Runs each task inline in the calling process, with the same strict
    rules. For debugging.
``dask``
    A dask.distributed cluster (the ``dask`` extra): the current
    ``distributed.Client`` (chosen automatically inside ``with
    Client(...)`` when no backend was asked for), a scheduler's address
    or scheduler file, or a ``LocalCluster`` started at the first task.

``DISLIB_NN_BACKEND`` (``local``, ``sequential``, ``compss``, ``dask``),
``DISLIB_NN_WORKERS``, ``DISLIB_NN_THREADS`` (torch threads per task,
default 1), ``DISLIB_NN_DASK_ADDRESS`` and
``DISLIB_NN_DASK_SCHEDULER_FILE`` choose the same things as
:func:`set_backend`.
"""

import atexit
import threading

from dislib_nn.exceptions import BackendError
from dislib_nn.runtime import _dask_cluster, _environment

__all__ = [
    "task", "constraint", "wait_on", "barrier", "delete_object",
    "IN", "INOUT", "COMMUTATIVE", "COLLECTION_IN", "COLLECTION_OUT",
    "Type", "Depth", "set_backend", "backend_name", "n_workers",
    "shared_empty", "by_value", "started", "runs_at_submission",
    "blocks_share_memory", "uses_pycompss",
    "task_threads", "task_cuda_devices", "gpus_per_task", "tasks_see_gpus",
    "CPU_TASK", "GPU_TASK", "shutdown", "time_out", "is_time_out",
    "placed", "count_tasks",
]

_BACKENDS = _environment.BACKENDS
_START_METHODS = _environment.START_METHODS
_BACKEND = _environment.backend_choice()

if _BACKEND == "compss":
    from dislib_nn.runtime._compss import (  # noqa: F401
        COLLECTION_IN, COLLECTION_OUT, COMMUTATIVE, IN, INOUT, Depth, Type,
        barrier, constraint, delete_object, n_compss_workers, shared_empty,
        task, wait_on)
else:
    from dislib_nn.runtime._params import (  # noqa: F401
        COLLECTION_IN, COLLECTION_OUT, COMMUTATIVE, IN, INOUT, Depth, Type)
    from dislib_nn.runtime._serialize import shared_empty  # noqa: F401
    from dislib_nn.runtime._task import constraint  # noqa: F401

# Failure management: PyCOMPSs's @on_failure (the real one under COMPSs).
__all__ += ["on_failure"]
if _BACKEND == "compss":
    from dislib_nn.runtime._compss import (  # noqa: F401,E402
        on_failure, use_time_outs)
    use_time_outs()
else:
    from dislib_nn.runtime._task import on_failure  # noqa: F401,E402

from dislib_nn.runtime import _compss_task  # noqa: E402
from dislib_nn.runtime import _engine  # noqa: E402
from dislib_nn.runtime._by_value import by_value  # noqa: E402,F401
from dislib_nn.runtime._future import Future as _Future  # noqa: E402
from dislib_nn.runtime._placement import placed  # noqa: E402,F401
from dislib_nn.runtime import _task_counts  # noqa: E402
from dislib_nn.runtime._time_out import (  # noqa: E402,F401
    is_time_out, time_out)

_lock = threading.Lock()
_active_engine = None
# Local pools by configuration: switching back to a configuration reuses
# its pool (and its futures) instead of starting a new one.
_pools = {}
# What set_backend() and the DISLIB_NN_* variables chose.
_settings = _environment.initial_settings()


def _backend():
    """The backend tasks go to now: the one chosen, or ``dask`` inside a
    dask client's context when none was chosen (as dask's own
    collections do)."""
    if _BACKEND == "local" and not _settings["explicit"] \
            and _dask_cluster.current_client() is not None:
        return "dask"
    return _BACKEND


def _current_engine():
    """The engine of a backend other than compss, created on first use."""
    global _active_engine
    engine = _active_engine
    if engine is not None and engine.name == _backend() and (
            engine.name != "dask"
            or engine.executor.connection.key() == _dask_cluster.key_of(
                **_dask_arguments())):
        return engine
    with _lock:
        _active_engine = _make_engine()
    return _active_engine


def _dask_arguments():
    """What the dask backend connects to, from the settings (the current
    client when no scheduler is named)."""
    client = _settings["client"]
    if client is None and not (_settings["address"]
                               or _settings["scheduler_file"]):
        client = _dask_cluster.current_client()
    return {"client": client, "address": _settings["address"],
            "scheduler_file": _settings["scheduler_file"],
            "n_workers": _settings["n_workers"]}


def _make_engine():
    Engine = _engine.Engine
    if _backend() == "dask":
        _dask_cluster.require_distributed()
        from dislib_nn.runtime._dask import DaskExecutor
        connection = _dask_cluster.Connection(**_dask_arguments())
        threads = _settings["threads"]
        # Kept by connection: switching back reuses it (and its futures).
        return _pooled(connection.key() + (threads,), "dask",
                       lambda e: DaskExecutor(e, connection, threads))
    if _BACKEND == "sequential":
        from dislib_nn.runtime._sequential import SequentialExecutor
        return Engine(lambda e: SequentialExecutor(e, _settings["threads"]),
                      "sequential")
    from dislib_nn.runtime._local import LocalExecutor
    key = _local_key()
    return _pooled(key, "local", lambda e: LocalExecutor(e, *key))


def _pooled(key, name, executor_factory):
    """The engine kept under ``key``, made with ``executor_factory`` when
    there is none (or the one there stopped for good), stopped at exit."""
    if key in _pools and not _pools[key].usable:
        _pools.pop(key).shutdown()      # stopped for good: start afresh
    if key not in _pools:
        _pools[key] = _engine.Engine(executor_factory, name)
        atexit.register(_pools[key].shutdown)
    return _pools[key]


if _BACKEND != "compss":
    def task(**options):
        """Declare a task, with PyCOMPSs's keywords and meaning.

        ``returns`` (required) is the number of results; other keywords
        give parameter directions: ``x=INOUT``, ``acc=COMMUTATIVE``,
        ``blocks={Type: COLLECTION_IN, Depth: 2}``.
        """
        from dislib_nn.runtime._task import make_task
        return make_task(_current_engine, options)

    def wait_on(*objs):
        """Wait for futures and return their values.

        Futures inside lists and dicts are resolved too, recursively
        (tuples are left alone, as PyCOMPSs does). Several arguments give a
        list of results.
        """
        values = [_wait(obj) for obj in objs]
        return values[0] if len(values) == 1 else values

    def barrier():
        """Wait until every task submitted so far has finished."""
        if _active_engine is not None:
            _active_engine.barrier()

    def delete_object(obj):
        """Tell the runtime the program will not use ``obj`` again."""
        if _active_engine is not None:
            _active_engine.delete(obj)
        return True


def _wait(obj):
    if isinstance(obj, _Future):
        return obj._engine.wait(obj)
    if _active_engine is not None and _active_engine.tracks(obj):
        return _active_engine.wait(obj)
    if isinstance(obj, list):
        return [_wait(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _wait(v) for k, v in obj.items()}
    return obj


def set_backend(name, n_workers=None, threads_per_worker=None,
                start_method=None, *, address=None, scheduler_file=None,
                client=None):
    """Choose the backend that runs tasks from now on.

    Parameters
    ----------
    name : {"local", "sequential", "compss", "dask"}
    n_workers : int, default=None
        Worker processes of the local backend (default: one per core),
        and of the ``LocalCluster`` the dask backend starts when it is
        given no cluster.
    threads_per_worker : int, default=None
        Torch intra-op threads in each task (default 1).
    start_method : {"forkserver", "fork", "spawn"}, default=None
        How local workers start (default ``forkserver``).
    address : str, default=None
        dask: the scheduler's address (``"tcp://host:8786"``).
    scheduler_file : str, default=None
        dask: the file a scheduler wrote with ``--scheduler-file``.
    client : distributed.Client, default=None
        dask: this client. Without ``address``, ``scheduler_file`` or
        ``client``, the dask backend uses the current client (inside
        ``with Client(...)``), else dask's configured
        ``scheduler-address``, else a ``LocalCluster`` it starts at the
        first task.

    Futures belong to the backend that made them and cannot be passed to
    tasks of another one. A local pool stays alive after a switch and is
    used again when its configuration comes back (a pool that stopped
    after an internal error is replaced by a new one); all pools stop at
    interpreter exit. ``compss`` can only be chosen when the script
    already runs inside COMPSs, where it is chosen automatically.
    ``dask`` never falls back to another backend: without
    dask.distributed installed, or with a scheduler out of reach, tasks
    raise :class:`~dislib_nn.exceptions.BackendError`.
    """
    global _active_engine, _BACKEND
    if name not in _BACKENDS:
        raise BackendError(f"backend must be one of {', '.join(_BACKENDS)}."
                           f" Got {name!r} instead.")
    for arg, value in (("n_workers", n_workers),
                       ("threads_per_worker", threads_per_worker)):
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, int)
                                  or value < 1):
            raise BackendError(f"{arg} must be an int >= 1. Got {value!r} "
                               f"instead.")
    if start_method is not None and start_method not in _START_METHODS:
        raise BackendError(
            f"start_method must be one of {', '.join(_START_METHODS)}. "
            f"Got {start_method!r} instead.")
    _dask_cluster.check_arguments(name, address, scheduler_file, client)
    if (name == "compss") != (_BACKEND == "compss"):
        raise BackendError(
            f"cannot switch from the {_BACKEND} backend to {name}: the "
            f"compss backend is chosen when dislib_nn is imported inside "
            f"the COMPSs runtime, and only there.")
    if name == "dask":
        _dask_cluster.require_distributed()
    with _lock:
        _active_engine = None
        _BACKEND = name
        _settings["explicit"] = True
        if n_workers is not None:
            _settings["n_workers"] = n_workers
        if threads_per_worker is not None:
            _settings["threads"] = threads_per_worker
        if start_method is not None:
            _settings["start_method"] = start_method
        if name == "dask":
            _settings["address"] = address
            _settings["scheduler_file"] = scheduler_file
            _settings["client"] = client


def shutdown():
    """Stop every worker pool and dask cluster this process started.

    Futures of theirs that were not waited on are lost. The backend
    stays chosen: the next task starts a new pool (or connects again).
    A dask client given by the user is left open. Pools and clusters
    also stop at interpreter exit; call this to free them sooner.
    """
    global _active_engine
    with _lock:
        engines = list(_pools.values())
        _pools.clear()
        _active_engine = None
    for engine in engines:
        engine.shutdown()


def backend_name():
    """The name of the backend that runs tasks now."""
    return _backend()


def n_workers():
    """How many tasks the backend can run at the same time.

    ``DISLIB_NN_WORKERS`` (or ``set_backend(..., n_workers=)`` locally)
    overrides it on every backend. Under COMPSs it is the worker nodes
    times the training tasks each holds (see ``docs/hpc.md``).
    """
    backend = _backend()
    if backend == "sequential":
        return 1
    if _settings["n_workers"]:
        return _settings["n_workers"]
    if backend == "compss":
        return n_compss_workers()
    if backend == "dask":
        return _current_engine().executor.n_workers
    from dislib_nn.runtime._local import default_workers
    return default_workers()


def _local_key():
    """The configuration a local pool is kept under."""
    from dislib_nn.runtime._local import default_workers
    workers = _settings["n_workers"] or default_workers()
    return (workers, _settings["threads"], _settings["start_method"])


def started():
    """Whether the backend runs a task without starting anything first.

    False only for a local backend whose worker pool has not started yet
    (it starts at the first task, in a few seconds).
    """
    backend = _backend()
    if backend == "dask":
        return _current_engine().executor.started
    if backend != "local":
        return True
    engine = _active_engine or _pools.get(_local_key())
    return engine is not None and engine.executor.started


def runs_at_submission():
    """Whether a task has run by the time its call returns (sequential):
    reading results later gains nothing there."""
    return _BACKEND == "sequential"


def blocks_share_memory():
    """Whether every task runs on this machine, so that any task can read
    any block without a transfer (the local and sequential backends)."""
    return _backend() in ("local", "sequential")


def count_tasks():
    """Count the tasks submitted while a ``with`` block runs, by name.

    ``with runtime.count_tasks() as counts: est.fit(X, y)`` leaves in
    ``counts`` (a :class:`collections.Counter`) how many tasks of each
    function the fit submitted. Under COMPSs the runtime keeps the task
    graph (``runcompss --graph``), so this raises
    :class:`~dislib_nn.exceptions.BackendError`.
    """
    if _BACKEND == "compss":
        raise BackendError(
            "runtime.count_tasks() counts the tasks of the local, "
            "sequential and dask backends; under runcompss the task graph "
            "is COMPSs's own: run with --graph (or --tracing) to see it.")
    return _task_counts.count_tasks()


def uses_pycompss():
    """Whether the names of this module are PyCOMPSs's own (inside
    ``runcompss`` / ``enqueue_compss``): then dislib's own tasks, say,
    can take our futures."""
    return _BACKEND == "compss"


def task_threads():
    """CPU threads the runtime gave the running task, or None.

    Under COMPSs, the computing units of the task's constraint; the local
    backends set torch's thread count themselves and return None.
    """
    return _compss_task.task_threads() if _BACKEND == "compss" else None


def task_cuda_devices():
    """CUDA indices the running task may use, or None for "any visible".

    Under COMPSs, the GPUs its constraint was given, mapped to this
    process's CUDA indices (``[]``: none, run on the CPU, even on a node
    with GPUs). The local backends do not assign GPUs: None.
    """
    return _compss_task.cuda_devices() if _BACKEND == "compss" else None


# The resources a training task asks for, in the form COMPSs resolves
# from the master's environment (ComputingUnits CPUs and
# ComputingUnitsGPUs GPUs per task; see docs/hpc.md). The local backends
# record them and ignore them.
CPU_TASK = {"computing_units": "${ComputingUnits}"}
GPU_TASK = {"processors": [
    {"processorType": "CPU", "computingUnits": "${ComputingUnits}"},
    {"processorType": "GPU", "computingUnits": "${ComputingUnitsGPUs}"},
]}


def gpus_per_task():
    """GPUs a training task asks the runtime for: under COMPSs
    ``ComputingUnitsGPUs``; on dask 1 where workers advertise a ``GPU``
    resource (``dask worker --resources GPU=1``); 0 elsewhere."""
    backend = _backend()
    if backend == "compss":
        return _compss_task.gpus_per_task()
    if backend == "dask":
        return int(_current_engine().executor.connection.has_gpus())
    return 0


def tasks_see_gpus():
    """Whether a training task will see a CUDA GPU, as the master can
    tell before any runs: under COMPSs and dask, when tasks ask for GPUs;
    on the local backends, when this machine has one."""
    if _backend() in ("compss", "dask"):
        return gpus_per_task() > 0
    import torch
    return torch.cuda.is_available()
