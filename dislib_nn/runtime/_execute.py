"""Running one task from its serialized form: the worker's side of a task.

The sequential backend calls :func:`run` in the master's own process and
the local backend's workers call it in theirs, so both apply exactly the
same rules: arguments arrive unpickled from payloads, outputs leave
pickled, and an exception travels back as data.
"""

import importlib
import inspect
import pickle
import threading
import traceback

import torch

from dislib_nn.runtime import _serialize, _time_out

# ``running`` is True while a task body runs in this thread: a task
# called from inside a task runs inline, as under COMPSs. Per thread,
# since a dask worker may run several tasks at once in one process.
_task_state = threading.local()
# True in a worker process of the local backend once it serves tasks:
# task calls made there outside a task body (say, by a module the worker
# imports to find a task) also run inline instead of starting a pool of
# their own. While the worker starts, an unguarded script that calls
# tasks is refused instead (see _worker.refuse_tasks_at_import).
in_worker = False


class Unset:
    """Placeholder of a ``COLLECTION_OUT`` element the task must assign."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self):
        return (Unset, ())

    def __repr__(self):
        return "<unassigned COLLECTION_OUT element>"


UNSET = Unset()


def resolve_task(module, qualname):
    """Find a task function by name, as a COMPSs worker does."""
    # import_module, not sys.modules: a module that another thread of
    # the worker is importing is in sys.modules half made (its tasks not
    # defined yet), and import_module waits for that import to end.
    mod = importlib.import_module(module)
    obj = mod
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise LookupError(
            f"task {qualname}() was not found in module {module!r} on the "
            f"worker. Define tasks at module level; a task defined in a "
            f"script must be defined before the code that calls it runs "
            f"(and the script must be a file the workers can import).") \
            from None
    return obj


def inside_task():
    """Whether a task body is running in this thread."""
    return getattr(_task_state, "running", False)


def run(payloads, share=True, time_out=None):
    """Run one task from ``[header, arguments, *dependencies]`` payloads.

    The header holds the task function (pickled by name), the declared
    outputs and the number of torch threads. Returns ``[status,
    *outputs]`` as payloads, where status is ``("ok",)`` or ``("error",
    type name, message, traceback, pickled exception or None)``.
    ``share=False`` keeps outputs' bytes inside their pickles, for
    results that may leave this machine (the dask backend).
    ``time_out`` (seconds; the sequential backend) interrupts the task's
    code with ``SIGALRM`` as PyCOMPSs's worker does
    (:func:`._time_out.alarm`).
    """
    name = "<unknown task>"
    try:
        header = _serialize.loads(payloads[0])
        name = header["name"]
        fn, arguments = _load(header, payloads)
        bound = inspect.BoundArguments(inspect.signature(fn), arguments)
        threads = header.get("threads") or torch.get_num_threads()
        previous = torch.get_num_threads()
        if threads != previous:
            torch.set_num_threads(threads)
        _task_state.running = True
        ignored = None
        try:
            with _time_out.alarm(time_out, name):
                result = fn(*bound.args, **bound.kwargs)
        except Exception as exc:  # noqa: BLE001 - IGNORE'd, or re-raised
            if header.get("on_failure") != "IGNORE":
                raise
            # As PyCOMPSs's worker does: the task succeeds with the
            # @on_failure defaults as its outputs.
            result, ignored = _ignored(header, arguments, exc)
        finally:
            _task_state.running = False
            # The sequential backend runs tasks in the master: leave its
            # own thread count as it was.
            if threads != previous:
                torch.set_num_threads(previous)
        outputs = [_dump_output(name, value, share)
                   for value in _outputs(header, result, arguments)]
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: B902 - the task's error is data
        return error_status(name, exc)
    status = ("ok",) if ignored is None else ("ok", ignored)
    return [_serialize.dumps(status)] + outputs


def stopped(payloads, exc, share=True):
    """The result of a task stopped from outside by ``exc`` (its
    time-out: its worker process was killed), as if its code had raised
    ``exc``: the error status, or under ``IGNORE`` its ``@on_failure``
    defaults as outputs (its ``INOUT`` arguments as they were given)."""
    name = "<unknown task>"
    try:
        header = _serialize.loads(payloads[0])
        name = header["name"]
        if header.get("on_failure") != "IGNORE":
            return error_status(name, exc)
        _, arguments = _load(header, payloads)
        result, ignored = _ignored(header, arguments, exc)
        outputs = [_dump_output(name, value, share)
                   for value in _outputs(header, result, arguments)]
    except BaseException as error:  # noqa: B902 - the error is data
        return error_status(name, error)
    return [_serialize.dumps(("ok", ignored))] + outputs


def _load(header, payloads):
    """The task's function, and its arguments by name."""
    _, args_payload, *dep_payloads = payloads
    fn = getattr(header["function"], "__wrapped__", header["function"])
    try:
        deps = [_serialize.loads(p) for p in dep_payloads]
        return fn, _serialize.loads(args_payload, deps)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"the arguments of task {header['name']}() hold an object of "
            f"module {exc.name!r}, which this worker cannot import: start "
            f"the workers with the folder that holds it on their "
            f"PYTHONPATH, or install it where they run (classes defined "
            f"in the script itself travel by value and need neither)",
            name=exc.name) from exc


def _ignored(header, arguments, exc):
    """The result of an IGNORE'd task, and a line saying what it hid."""
    defaults = header.get("defaults") or {}
    for param, value in defaults.items():
        if param != "returns":
            arguments[param] = value
    described = f"{type(exc).__name__}: {exc}"
    return defaults.get("returns"), described


def _outputs(header, result, arguments):
    returns = header["returns"]
    if returns == 1:
        values = [result]
    elif returns > 1:
        if not isinstance(result, (tuple, list)) or len(result) != returns:
            got = (f"{len(result)} values" if isinstance(result, (tuple, list))
                   else f"a {type(result).__name__}")
            raise ValueError(
                f"task {header['name']}() is declared with returns="
                f"{returns} but returned {got}.")
        values = list(result)
    else:
        values = []
    for kind, param, path in header["outputs"]:
        if kind == "param":
            values.append(arguments[param])
        else:
            element = arguments[param]
            for i in path:
                element = element[i]
            if element is UNSET:
                raise ValueError(
                    f"task {header['name']}() did not assign element "
                    f"{list(path)} of its COLLECTION_OUT parameter "
                    f"'{param}'.")
            values.append(element)
    return values


def _dump_output(name, value, share=True):
    try:
        return _serialize.dumps(value, check_main=False, share=share)
    except _serialize.HiddenFuture:
        raise TypeError(
            f"task {name}() returned a future; a task returns values.") \
            from None


def error_status(name, exc):
    text = "".join(traceback.format_exception(type(exc), exc,
                                              exc.__traceback__))
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    try:
        exc_data = pickle.dumps(exc)
        # The exception must also come back intact on the other side.
        pickle.loads(exc_data)
    except BaseException:  # noqa: B902 - any failure means "not portable"
        exc_data = None
    return [_serialize.dumps(("error", kind, str(exc), text, exc_data))]
