"""The local backend's fork server dies with the master, at once.

The fork server imports torch before it serves (its preload list: 2-3 s
on 2 cores) and only then watches the master, and when it sees the
master gone, its exit tears down an interpreter with torch loaded
(0.6-1.5 s); a master killed meanwhile left it, the workers it had
forked and multiprocessing's resource tracker alive for up to 3 s.
:mod:`dislib_nn._forkserver_guard`, first in the preload list, calls
:func:`guard`:

* a small child process of the server waits for the master to exit and
  then kills the server with SIGKILL (a thread could not: loading
  torch's extension holds the interpreter's lock for most of a second);
* every process the server forks (the workers, that watcher) asks the
  kernel for SIGKILL when the server dies (``PR_SET_PDEATHSIG``), from
  its first instruction, while a worker still imports the user's
  script.

The guard lives outside :mod:`dislib_nn.runtime`, whose import loads
torch, and only the fork server runs it: in the master it would watch
the master's own parent. This module has no effect on import;
:mod:`dislib_nn.runtime._worker` uses :func:`die_with_parent` too.
"""

import ctypes
import os
import select
import signal
import sys

__all__ = ["die_with_parent", "guard"]

_PR_SET_PDEATHSIG = 1


def die_with_parent():
    """Linux: SIGKILL when the parent exits. The parent is the thread
    that forked this process: call it in a child of a single-threaded
    process."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:
        os._exit(1)         # the parent died before prctl took effect


def guard():
    """In the fork server, before its preload: killed when the master
    exits; every child dies with the server."""
    master, server = os.getppid(), os.getpid()
    if master == 1:
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        _watch(master, server)
    os.register_at_fork(after_in_child=die_with_parent)


def _watch(master, server):
    """The watcher child: kill ``server`` when ``master`` exits; exit
    with the server."""
    try:
        die_with_parent()
        try:
            handle = os.pidfd_open(master)
        except (AttributeError, OSError):
            handle = None       # before Linux 5.3: poll the master's pid
        while True:
            if handle is not None:
                select.select([handle], [], [])
                break
            if os.getppid() != server or not _alive(master):
                break
            select.select([], [], [], 0.05)
        os.kill(server, signal.SIGKILL)
    finally:
        os._exit(0)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
