"""Where the dask backend runs: the dask.distributed client it submits to.

Found the way dask's own libraries find it: a client given by the user
(the current one, inside ``with Client(...)``), else a scheduler's
address or scheduler file, else dask's configured ``scheduler-address``
(``DASK_SCHEDULER_ADDRESS``), else a ``LocalCluster`` of worker
processes on this machine, started at the first task and stopped at
interpreter exit. Nothing is imported or started before the first task.
"""

import contextlib
import logging
import os
import threading

from dislib_nn.exceptions import BackendError

#: The dask configuration under which a worker keeps glibc's own malloc
#: thresholds: a nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` in its
#: worker's environment by default, which also fixes glibc's mmap
#: threshold at 128 KiB, so that every activation of a training step is
#: mapped and unmapped anew. Measured here: a small CNN's training steps
#: took 1.7 s in a worker so started against 0.85 s without the setting
#: (docs/hpc.md, "Workers' malloc").
TRIM_VARIABLE = "MALLOC_TRIM_THRESHOLD_"
NO_MALLOC_TRIM = {
    f"distributed.nanny.pre-spawn-environ.{TRIM_VARIABLE}": None}

#: The dask configuration under which the scheduler leaves a placed task
#: where it was placed. Work stealing moves a task from a busy worker to
#: an idle one when its inputs look cheap to move, at a bandwidth the
#: scheduler learns only from transfers over 1 MB (100 MB/s until then):
#: on the testbed at 8 Mbit/s it moved validation tasks away from their
#: 6.3 MB test blocks, which then took 6.6-6.9 s to cross, in one fit of
#: five and one of six (docs/hpc.md, "Work stealing"). dislib_nn puts
#: each task where its blocks or its replica are, by placing it or
#: through its inputs, so stealing has nothing to balance; a placement
#: does not stop it.
NO_WORK_STEALING = {"distributed.scheduler.work-stealing": False}


@contextlib.contextmanager
def _without(name):
    """``name`` out of this process's environment while the block runs:
    a nanny started earlier in this process left its value there (it
    sets its variables in its own environment before spawning), and
    the workers started in the block would inherit it."""
    value = os.environ.pop(name, None)
    try:
        yield
    finally:
        if value is not None:
            os.environ[name] = value

_INSTALL = ("the dask backend needs dask.distributed, which is not "
            "installed: pip install distributed==2026.8.0 (the release "
            "dislib_nn is tested with; pip install -e '.[dask]' in a "
            "checkout installs it)")


def current_client():
    """The dask client the calling code runs under, or None.

    Never imports dask: a program that has not imported it has no
    client.
    """
    import sys
    if "distributed" not in sys.modules:
        return None
    from distributed import Client
    try:
        return Client.current(allow_global=True)
    except ValueError:
        return None


def check_arguments(backend, address, scheduler_file, client):
    """``set_backend``'s dask arguments: only for dask, one at most, and
    an address or file named by a non-empty str."""
    given = [(arg, value) for arg, value in (
        ("address", address), ("scheduler_file", scheduler_file),
        ("client", client)) if value is not None]
    if given and backend != "dask":
        arg, value = given[0]
        raise BackendError(f"{arg} is a setting of the dask backend, not "
                           f"of {backend}. Got {arg}={value!r} with "
                           f"backend {backend!r}.")
    if len(given) > 1:
        raise BackendError(
            f"give the dask backend one of address, scheduler_file or "
            f"client. Got {' and '.join(arg for arg, _ in given)}.")
    for arg, value in given[:1]:
        if arg != "client" and (not isinstance(value, str) or not value):
            raise BackendError(f"{arg} must be a non-empty str. Got "
                               f"{value!r} instead.")


def key_of(client=None, address=None, scheduler_file=None, n_workers=None):
    """What tells connections apart: :meth:`Connection.key` of a
    connection made with these arguments, without making it."""
    return ("dask", None if client is None else id(client), address,
            scheduler_file, n_workers)


def require_distributed():
    """Import dask.distributed, or say how to install it."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise BackendError(_INSTALL) from None


class Connection:
    """A dask client, made at first use.

    ``client`` is used as given (and never closed); otherwise one is
    made for ``address`` or ``scheduler_file``, or for a new
    ``LocalCluster`` of ``n_workers`` single-threaded processes, and
    closed by :meth:`close`.
    """

    def __init__(self, client=None, address=None, scheduler_file=None,
                 n_workers=None):
        self._client = client
        self._owned = client is None
        self.address = address
        self.scheduler_file = scheduler_file
        self.local_workers = n_workers
        self._cluster = None
        self._lock = threading.Lock()
        self.closed = False

    def key(self):
        """What tells two connections apart (engines are kept by it)."""
        return key_of(None if self._owned else self._client, self.address,
                      self.scheduler_file, self.local_workers)

    @property
    def connected(self):
        return self._client is not None

    def client(self):
        if self._client is None:
            with self._lock:
                if self.closed:
                    raise BackendError("the dask backend's client was "
                                       "closed; call set_backend('dask') "
                                       "again.")
                if self._client is None:
                    self._client = self._connect()
        return self._client

    def _connect(self):
        require_distributed()
        import dask
        from distributed import Client
        address = self.address or (None if self.scheduler_file else
                                   dask.config.get("scheduler-address",
                                                   None))
        # dask's own setting bounds the wait for the scheduler.
        timeout = dask.config.get("distributed.comm.timeouts.connect")
        try:
            if address or self.scheduler_file:
                return Client(address, scheduler_file=self.scheduler_file,
                              set_as_default=False, direct_to_workers=True,
                              timeout=timeout)
        except (OSError, TimeoutError) as exc:
            where = (f"scheduler_file={self.scheduler_file!r}"
                     if self.scheduler_file else f"address={address!r}")
            raise BackendError(
                f"the dask backend could not reach the scheduler at "
                f"{where} within {timeout} (dask's "
                f"distributed.comm.timeouts.connect): {exc}. Check that "
                f"the scheduler runs and that this machine can reach "
                f"it.") from exc
        from distributed import LocalCluster
        from dislib_nn.runtime._local import default_workers
        # A task whose worker dies fails at once (WorkerDiedError), and
        # its on_failure policy decides, as on the local backend; dask
        # would otherwise rerun it on other workers first. The workers
        # keep glibc's own malloc thresholds (NO_MALLOC_TRIM), and the
        # scheduler keeps tasks where they are placed (NO_WORK_STEALING).
        with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                              **NO_MALLOC_TRIM, **NO_WORK_STEALING}), \
                _without(TRIM_VARIABLE):
            self._cluster = LocalCluster(
                n_workers=self.local_workers or default_workers(),
                threads_per_worker=1, processes=True,
                dashboard_address=None, silence_logs=logging.ERROR)
        return Client(self._cluster, set_as_default=False)

    def n_workers(self):
        """Tasks the cluster runs at once: its workers' threads."""
        info = self.client().nthreads()
        return max(1, sum(info.values()))

    def worker_addresses(self):
        """The workers' addresses, sorted: ``runtime.placed``'s nodes."""
        return sorted(self.client().nthreads())

    def has_gpus(self):
        """Whether some worker advertises a ``GPU`` resource."""
        info = self.client().scheduler_info(n_workers=-1)
        return any(w.get("resources", {}).get("GPU", 0) > 0
                   for w in info.get("workers", {}).values())

    def close(self):
        with self._lock:
            self.closed = True
            client, self._client = self._client, None
            cluster, self._cluster = self._cluster, None
        if self._owned and client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
