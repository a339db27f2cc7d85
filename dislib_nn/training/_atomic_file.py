"""Files written whole or not at all: saved models and checkpoints.

:func:`write` gives ``path`` its new content in one step, whatever
happens while it writes: the data go to a file without a name in the
same folder (Linux's ``O_TMPFILE``), which is flushed and fsync'ed, then
given its name by a link and a rename, and the folder fsync'ed. A
process killed while writing, even by SIGKILL, leaves the previous file
and nothing else: a file without a name vanishes with its process. Where
the file system has no such files (NFS, some parallel file systems, not
Linux), the data go to a hidden temporary name beside ``path``, removed
on every failure that lets Python run; one left by a process killed
outright is removed by the next write of the same ``path`` from the
same host, once that process is gone.

A file system that fills up, or a quota that is reached, raises
:class:`OSError` with its ``errno`` (``ENOSPC``, ``EDQUOT``, ``EFBIG``),
naming the path and what was being written, instead of torch's
``enforce fail ... unexpected pos``.

New files get the mode any file of the user's gets (``0o666`` less the
umask), the same for saved models and checkpoints.
"""

import errno
import glob
import os
import socket
import tempfile

__all__ = ["write", "user_mode"]

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
# What open(O_TMPFILE) raises where the file system has no such files.
_NO_TMPFILE = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT}


def write(path, writer, what):
    """Write ``path`` whole, by ``writer(file)``, or leave it as it was.

    Parameters
    ----------
    path : str or os.PathLike
    writer : callable
        Called with a binary file object (``write`` and ``flush``), e.g.
        ``lambda f: torch.save(payload, f)``.
    what : str
        What is written ("the model", "the checkpoint"), for errors.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = _open_unnamed(folder)
    if fd is None:
        _remove_stale(path)
        fd, temporary = _open_named(path)
    try:
        _write_all(fd, writer, path, what)
        if temporary is None:
            _name(fd, path)
        else:
            os.replace(temporary, path)
            temporary = None
    finally:
        os.close(fd)
        if temporary is not None:
            _unlink(temporary)
    _fsync_folder(folder)


def user_mode():
    """The mode a new file of this user's gets: ``0o666`` less the
    umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


class _RecordingFile:
    """A file object that keeps the first ``OSError`` its writes raised
    (torch's writer replaces it with an error of its own)."""

    def __init__(self, file):
        self.file = file
        self.error = None

    def write(self, data):
        try:
            return self.file.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self):
        self.file.flush()


def _write_all(fd, writer, path, what):
    with os.fdopen(fd, "wb", closefd=False) as raw:
        file = _RecordingFile(raw)
        try:
            writer(file)
            raw.flush()
            os.fsync(fd)
        except Exception as exc:
            error = file.error if file.error is not None else exc
            if isinstance(error, OSError) and error.errno in _FULL:
                raise OSError(error.errno, (
                    f"{os.strerror(error.errno)}: could not write {what} "
                    f"to {path}. Free space (or quota) on that file "
                    f"system, or write it elsewhere; the file there, if "
                    f"any, was left as it was."), path) from None
            if error is not exc:
                raise error from exc
            raise


def _open_unnamed(folder):
    """``(fd, None)`` of a new file without a name in ``folder``, or
    ``(None, None)`` where the file system cannot make one."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None or not os.path.isdir("/proc/self/fd"):
        return None, None
    try:
        return os.open(folder, flag | os.O_WRONLY, user_mode()), None
    except OSError as exc:
        if exc.errno in _NO_TMPFILE:
            return None, None
        raise


def _name(fd, path):
    """Give the unnamed file ``fd`` the name ``path``, replacing it."""
    try:
        _link(fd, path)
        return
    except FileExistsError:
        pass
    # A link cannot replace a file: link a temporary name, then rename
    # it over ``path`` (a few microseconds between the two).
    temporary = _temporary_name(path)
    _link(fd, temporary)
    try:
        os.replace(temporary, path)
    except BaseException:
        _unlink(temporary)
        raise


def _link(fd, path):
    """``linkat`` of ``/proc/self/fd/FD`` with ``AT_SYMLINK_FOLLOW``:
    Python calls plain ``link()``, which does not follow that link,
    unless a folder descriptor is given."""
    proc = os.open("/proc/self/fd", os.O_RDONLY)
    try:
        os.link(str(fd), path, src_dir_fd=proc, follow_symlinks=True)
    finally:
        os.close(proc)


def _open_named(path):
    prefix, suffix = _temporary_parts(path)
    fd, temporary = tempfile.mkstemp(prefix=prefix, suffix=suffix,
                                     dir=os.path.dirname(
                                         os.path.abspath(path)))
    # mkstemp makes it 0600.
    os.fchmod(fd, user_mode())
    return fd, temporary


def _temporary_parts(path):
    """A hidden name beside ``path`` that says which host and process
    wrote it: ``.NAME.HOST.PID.XXXX.tmp``."""
    folder, base = os.path.split(os.path.abspath(path))
    host = socket.gethostname().replace(".", "_")
    return os.path.join(folder, f".{base}.{host}.{os.getpid()}."), ".tmp"


def _temporary_name(path):
    prefix, suffix = _temporary_parts(path)
    return f"{prefix}{os.urandom(4).hex()}{suffix}"


def _remove_stale(path):
    """Remove temporaries of ``path`` that processes of this host, now
    gone, left."""
    folder, base = os.path.split(os.path.abspath(path))
    host = socket.gethostname().replace(".", "_")
    for name in glob.glob(os.path.join(glob.escape(folder),
                                       f".{glob.escape(base)}.{host}.*.tmp")):
        pid = os.path.basename(name)[len(base) + len(host) + 3:].split(
            ".")[0]
        if pid.isdigit() and not _running(int(pid)):
            _unlink(name)


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_folder(folder):
    """Make the new name durable (where folders can be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
