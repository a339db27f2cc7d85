"""The strict inline backend: every task runs in the calling process.

It runs each task as soon as it is ready, in submission order, but
through the same serialization as the parallel backend: arguments are
pickled and rebuilt, ``IN`` arguments are private copies, results come
back as futures that need ``wait_on``, and errors surface at ``wait_on``.
Use it to debug a task with ``pdb`` or prints. A task's time-out is
``SIGALRM``, which interrupts its code as PyCOMPSs's worker does (see
:func:`._time_out.alarm`: main thread only).
"""

from dislib_nn.runtime import _execute


class SequentialExecutor:
    name = "sequential"

    def __init__(self, engine, threads=None):
        self.engine = engine
        self.threads = threads
        self.n_workers = 1

    def dispatch(self, node):
        result = _execute.run(self.engine.message(node),
                              time_out=node.time_out)
        self.engine.complete(node, result)

    def abort(self):
        """Nothing runs outside the caller's own call stack."""

    def shutdown(self):
        pass
