"""The error classes dislib_nn raises.

Every error a user can trigger names the argument, what was expected and
the value received. Classes subclass the built-in exception a Python
user would reach for first (``ValueError``, ``TypeError``,
``RuntimeError``), so ``except ValueError`` keeps working.
``NotFittedError`` is scikit-learn's own class, looked up when first
used: importing this module does not import scikit-learn.
"""

__all__ = [
    "DislibNNError",
    "TaskDefinitionError",
    "TaskArgumentError",
    "TaskError",
    "WorkerDiedError",
    "TaskTimeoutError",
    "TaskCancelledError",
    "TaskFailureWarning",
    "BackendError",
    "NotFittedError",
    "InvalidParameterError",
    "CheckpointMismatchError",
    "CheckpointInUseError",
    "UnsafeFileError",
    "DivergenceError",
    "TrainingTaskError",
    "ShapeError",
    "DtypeError",
    "DataFileError",
    "MissingDependencyError",
]


def __getattr__(name):
    # NotFittedError is scikit-learn's own class, so that scikit-learn's
    # tools recognise it; it is looked up on first use (PEP 562) because
    # worker processes import this module and never need scikit-learn.
    if name == "NotFittedError":
        from sklearn.exceptions import NotFittedError
        globals()[name] = NotFittedError
        return NotFittedError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


class DislibNNError(Exception):
    """Base class of every error raised by dislib_nn itself."""


class TaskDefinitionError(DislibNNError, TypeError):
    """A ``@task`` or ``@constraint`` decorator was given bad arguments."""


class TaskArgumentError(DislibNNError, TypeError):
    """A task was called with an argument the runtime cannot send to a worker.

    Raised at call time, before the task is submitted: a lambda or a
    closure (COMPSs pickles without cloudpickle), an object that cannot be
    pickled, or a future hidden inside a container that is not a declared
    collection.
    """


class TaskError(DislibNNError, RuntimeError):
    """A task failed and its original exception could not be rebuilt.

    Most task failures re-raise the task's own exception type at
    ``wait_on``; this class stands in when that exception cannot be
    pickled back to the master.
    """

    def __init__(self, message, task_name=None, remote_type=None,
                 remote_traceback=None):
        super().__init__(message)
        self.task_name = task_name
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback


class WorkerDiedError(DislibNNError, RuntimeError):
    """The worker process running a task died (segfault, OOM kill, exit)."""

    def __init__(self, message, task_name=None, exitcode=None):
        super().__init__(message)
        self.task_name = task_name
        self.exitcode = exitcode


class TaskTimeoutError(DislibNNError, RuntimeError):
    """A task ran longer than its time-out (``@task(time_out=SECONDS)``,
    or an estimator's ``task_timeout``): a failed execution, which the
    task's ``on_failure`` policy handles. The message names the task and
    the time-out, in seconds."""

    def __init__(self, message, task_name=None, time_out=None):
        super().__init__(message)
        self.task_name = task_name
        self.time_out = time_out


class TaskCancelledError(DislibNNError, RuntimeError):
    """A task was cancelled before it could finish (say, by Ctrl-C)."""


class TaskFailureWarning(UserWarning):
    """A task failed and its ``on_failure`` policy let the program go on.

    Issued when a task is retried, when an ``IGNORE``'d task's outputs
    take their defaults, and when ``wait_on`` gives ``None`` for the
    output of an ignored or cancelled task.
    """


class BackendError(DislibNNError, RuntimeError):
    """The task runtime was configured or used in a way it cannot honour."""


class InvalidParameterError(DislibNNError, ValueError, TypeError):
    """A parameter has the wrong type or a value out of its range.

    The message names the function, the parameter, what was expected and
    the value received, in scikit-learn's shape: "The 'block_size'
    parameter of from_array must be an int in the range [1, 250] (the
    number of rows). Got 0 instead."
    """


class ShapeError(DislibNNError, ValueError):
    """Inputs whose shapes do not fit together, or that are empty.

    For example x and y with different numbers of rows, block sizes that
    do not add up to the number of rows, or files holding samples of
    different shapes.
    """


class DtypeError(DislibNNError, TypeError):
    """Data of a dtype a tensor cannot hold (objects, strings, records)."""


class DataFileError(DislibNNError, ValueError):
    """A data file is not in the expected format (say, not a ``.npy``)."""


class MissingDependencyError(DislibNNError, ImportError):
    """An optional dependency is needed and not installed.

    The message names the package and how to install it (``pip install
    matplotlib``, or the ``plot`` extra in a checkout).
    """


class CheckpointMismatchError(DislibNNError, ValueError):
    """A checkpoint to resume from was written by another estimator: other
    parameters, another module, or another estimator class. The message
    names what differs."""


class CheckpointInUseError(DislibNNError, RuntimeError):
    """Another fit (another process) holds the checkpoint folder: each fit
    needs its own. The message names the folder and the holder."""


class UnsafeFileError(DislibNNError, ValueError):
    """A file to load wants to run code (a class or function stored by
    value, a name that is not a model, optimizer, scheduler or callback
    class): refused unless ``trusted=True``. The message names what."""


class DivergenceError(DislibNNError, FloatingPointError):
    """A replica's loss or weights became NaN or infinite during an epoch
    (``on_failure="raise"``, or ``"retry"`` after a second run)."""

    def __init__(self, message, epoch=None, workers=()):
        super().__init__(message)
        self.epoch = epoch
        self.workers = list(workers)


class TrainingTaskError(DislibNNError, RuntimeError):
    """A worker's training of one epoch raised, and ``on_failure`` says to
    stop (``"raise"``, or ``"retry"`` once ``max_retries`` reruns raised
    too). The message names the epoch, the worker and the error, and
    holds the worker's traceback."""

    def __init__(self, message, epoch=None, worker=None):
        super().__init__(message)
        self.epoch = epoch
        self.worker = worker
