"""The loop a local-backend worker process runs.

A worker never outlives its master: an idle worker reads end-of-file on
its socket when the master is gone; a busy one has a watchdog thread
that sees it; and on Linux, a worker started by the fork server also
asks the kernel for SIGKILL when the fork server (which exits with the
master) dies.
"""

import os
import select
import signal
import socket
import sys
import threading
import time

from dislib_nn._forkserver import die_with_parent
from dislib_nn.runtime import _channel, _execute, _serialize

_WATCH_INTERVAL_S = 0.5
# Exit status of a starting worker whose import of the user's script
# submitted tasks (a script without the ``__main__`` guard).
SCRIPT_RUNS_AT_IMPORT = 86


def main(sock, threads, master_pid=None, inherited=(), share=True):
    """Serve tasks from the master on ``sock`` until told to stop.

    ``inherited`` are descriptors a forked worker got from the master
    and must not keep (other workers' sockets: holding them would hide
    the master's death from those workers). ``share=False`` keeps the
    outputs' bytes inside their pickles (for a dask worker's helper, see
    ``_dask_timed``).
    """
    # Ctrl-C reaches the whole process group: the master decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for fd in inherited:
        try:
            os.close(fd)
        except OSError:
            pass
    if master_pid is not None and os.getppid() != master_pid:
        die_with_parent()
    _channel.send(sock, [READY])
    busy = threading.Event()
    threading.Thread(target=_watch_master, args=(sock, busy),
                     name="dislib_nn-watchdog", daemon=True).start()
    _execute.in_worker = True
    import torch
    torch.set_num_threads(threads)
    os.environ["DISLIB_NN_IN_WORKER"] = "1"
    while True:
        message = _channel.recv(sock)
        if message is None:
            break
        if message[0].data == STOP.data:
            break
        busy.set()
        result = _execute.run(message, share=share)
        busy.clear()
        _channel.send(sock, result)
        for payload in message + result:
            payload.close()
    sock.close()


def _watch_master(sock, busy):
    """While a task runs, exit as soon as the master's end closes.

    The master sends nothing to a busy worker, so a readable socket then
    means end-of-file: the master died (say, killed with SIGKILL).
    """
    while True:
        busy.wait()
        try:
            readable, _, _ = select.select([sock], [], [], _WATCH_INTERVAL_S)
            if not readable or not busy.is_set():
                continue
            data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            continue
        except (OSError, ValueError):
            data = b""
        if data == b"":
            os._exit(1)
        # A message while busy: not expected; do not spin on it.
        time.sleep(_WATCH_INTERVAL_S)


def starting():
    """Whether this process is a child still importing the main script.

    multiprocessing's fork server and spawn start a worker by importing
    the script that started the program (as ``__mp_main__``), as COMPSs
    workers do; code outside ``if __name__ == "__main__":`` runs then.
    """
    import multiprocessing
    return bool(getattr(multiprocessing.current_process(), "_inheriting",
                        False))


def refuse_tasks_at_import(task_name):
    """A task call while a worker imports the script: explain, and exit."""
    script = getattr(sys.modules.get("__mp_main__"), "__file__", None)
    sys.stderr.write(
        f"dislib_nn: a new process (a worker of the local backend, or of "
        f"joblib or multiprocessing) imports the script "
        f"{script or 'that started the program'} to find the tasks it "
        f"defines, and that import calls task {task_name}(). Put the code "
        f"that runs tasks or fits estimators under "
        f"'if __name__ == \"__main__\":'.\n")
    sys.stderr.flush()
    os._exit(SCRIPT_RUNS_AT_IMPORT)


STOP = _serialize.Payload(b"stop")
READY = _serialize.Payload(b"ready")
