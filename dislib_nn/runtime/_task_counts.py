"""Counting the tasks a block of code submits: :func:`count_tasks`.

What a fit costs the runtime is first of all its tasks: how many a
round submits, which merge tasks a strategy chose, whether a setting
removed one. :func:`count_tasks` counts them by name while a block
runs, on every backend whose task graph is the library's own
(``local``, ``sequential``, ``dask``). Under COMPSs the runtime keeps
the graph: ``runcompss --graph`` draws it and ``--tracing`` times it.
"""

import collections
import contextlib
import threading

__all__ = ["count_tasks", "note_submitted"]

_lock = threading.Lock()
# The counters of the blocks open now, in every thread.
_open = []


@contextlib.contextmanager
def count_tasks():
    """Count the tasks submitted while the block runs, from any thread.

    Yields a :class:`collections.Counter`, task name (the function's
    qualified name) -> tasks submitted, filled as they are submitted;
    tasks called inside a running task are plain calls and not counted.
    Blocks nest, each counting what was submitted while it was open.
    """
    counts = collections.Counter()
    with _lock:
        _open.append(counts)
    try:
        yield counts
    finally:
        with _lock:
            # By identity: two counters with equal counts are still two.
            _open[:] = [c for c in _open if c is not counts]


def note_submitted(name):
    """Count one task ``name`` in every open block (the engine calls it
    for each task it accepts)."""
    if not _open:
        return
    with _lock:
        for counts in _open:
            counts[name] += 1
