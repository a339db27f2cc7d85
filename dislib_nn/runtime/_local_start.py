"""How a worker process of the local backend starts, and what its exit
says: whether it can import the script that started the program (as
COMPSs workers import theirs), and the messages for a worker that could
not start or died.
"""

import contextlib
import multiprocessing
import os
import signal
import sys

from dislib_nn.runtime import _worker

__all__ = ["main_importable", "start_method_modules", "describe_main",
           "unimportable_main_hidden", "startup_failure", "describe_exit"]


def main_importable():
    """Whether a new process can import the script that started the program.

    False for a script read from standard input (``__file__`` is
    ``'<stdin>'``), for ``python -c`` and for an interactive session.
    """
    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None:
        return True         # python -m module: imported by name
    path = getattr(main, "__file__", None)
    return path is not None and os.path.isfile(path)


def start_method_modules():
    """The module defining this process's default start method, when it
    is not one of multiprocessing's own.

    A new worker sets that method while it starts, so the fork server
    must know it: in a joblib worker it is loky's, registered by
    joblib, which the fork server would not import otherwise.
    """
    method = multiprocessing.get_start_method(allow_none=True)
    if method is None or method in multiprocessing.get_all_start_methods():
        return []
    return [type(multiprocessing.get_context(method)).__module__]


def describe_main():
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is not None:
        return repr(path)
    if sys.argv and sys.argv[0] == "-c":
        return "the code given with python -c"
    return "an interactive session"


@contextlib.contextmanager
def unimportable_main_hidden(importable):
    """While a worker starts, hide a main script path it cannot run.

    multiprocessing tells a new process to run ``__main__.__file__``
    when there is one; for ``'<stdin>'`` that fails and the worker dies.
    Without ``__file__`` the worker starts without the script. The
    attribute is back as soon as the process has started.
    """
    main = sys.modules.get("__main__")
    if importable or main is None or "__file__" not in vars(main):
        yield
        return
    path = vars(main).pop("__file__")
    try:
        yield
    finally:
        main.__file__ = path


def startup_failure(code):
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or "that started the program"
    if code == _worker.SCRIPT_RUNS_AT_IMPORT:
        return (f"the local backend's workers could not start: they import "
                f"the script {script} to find its tasks (as COMPSs workers "
                f"do), and that import runs tasks itself. Put the code that "
                f"runs tasks or fits estimators under "
                f"'if __name__ == \"__main__\":', then run it again.")
    return (f"a worker process of the local backend failed while starting "
            f"({describe_exit(code)}), before running any task; its "
            f"error is printed above. Workers import the script {script} "
            f"to find its tasks, as COMPSs workers do: check that it "
            f"imports without error in a new process, or use "
            f"set_backend('local', start_method='fork') or "
            f"set_backend('sequential').")


def describe_exit(code):
    if code is None:
        return "it did not exit"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
