"""Runtime detection of the PyCOMPSs test double."""

import os


class _Context:
    def in_pycompss(self):
        return os.environ.get("PYCOMPSS_DOUBLE_IN_RUNTIME") == "1"

    def in_master(self):
        return self.in_pycompss()

    def in_worker(self):
        return False


CONTEXT = _Context()
