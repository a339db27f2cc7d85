"""One fit per checkpoint folder.

A fit that writes checkpoints holds an exclusive lock on
``<folder>/.dislib_nn.lock`` from before it reads a checkpoint to resume
until it returns or raises; the operating system releases it when the
process dies, so a killed job never leaves the folder locked. A second
fit on the same folder, in another process, fails at once, before any
task runs, naming the folder and the process that holds it: two fits
would write one ``checkpoint.pt``, and a starting fit would delete the
running one's temporary files.

Taking the lock also checks that the folder can be written, before any
training: an unwritable ``checkpoint_dir`` is refused there. On a file
system without locks (some network mounts) the fit warns and goes on.
"""

import contextlib
import errno
import fcntl
import os
import socket

from dislib_nn._user_warning import warn_user
from dislib_nn.exceptions import CheckpointInUseError, InvalidParameterError

__all__ = ["LOCK_NAME", "hold"]

LOCK_NAME = ".dislib_nn.lock"

_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS}


@contextlib.contextmanager
def hold(directory):
    """Hold ``directory``'s lock for the ``with`` block (nothing when
    ``directory`` is None)."""
    if directory is None:
        yield
        return
    directory = os.fspath(directory)
    fd = _open(directory)
    try:
        if _lock(fd, directory):
            os.ftruncate(fd, 0)
            os.write(fd, f"process {os.getpid()} on "
                         f"{socket.gethostname()}".encode())
        yield
    finally:
        os.close(fd)        # releases the lock


def _open(directory):
    try:
        os.makedirs(directory, exist_ok=True)
        return os.open(os.path.join(directory, LOCK_NAME),
                       os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise InvalidParameterError(
            f"The checkpoint folder {directory!r} cannot be written: "
            f"{exc.strerror or exc}. Give checkpoint_dir (or the "
            f"Checkpoint callback) a folder this process can create files "
            f"in.") from exc


def _lock(fd, directory):
    """Take the lock; False when the file system has none."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
        raise CheckpointInUseError(
            f"The checkpoint folder {directory!r} is in use by another "
            f"fit ({holder or 'a process that wrote no name'}): two fits "
            f"on one folder would overwrite each other's checkpoints. "
            f"Give each fit its own checkpoint_dir, or wait for that one "
            f"to end.") from None
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
        warn_user(
            f"The file system of the checkpoint folder {directory!r} has "
            f"no file locks ({exc.strerror}): a second fit on the same "
            f"folder would not be detected. Give each fit its own "
            f"checkpoint_dir.", UserWarning)
        return False
    return True
