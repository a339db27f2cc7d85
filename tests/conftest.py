"""Fixtures shared by the whole suite.

``backend`` runs a test once on each local backend. Local pools are kept
by configuration, so switching back and forth costs nothing after the
first start of the pool.

The apps tests/compss checks under the emulated runcompss start with the
session, in the background (they take minutes of CPU, most of which the
rest of the suite leaves idle), and tests/compss runs last.
"""

import os

import pytest

from dislib_nn import runtime

BACKENDS = ("local", "sequential")
# PyCOMPSs's real Python binding, beside the repository (shared/): dislib
# imports it, and the COMPSs emulation tests run through it.
PYCOMPSS_REFERENCE = os.path.join(
    os.environ.get("DISLIB_NN_SHARED", os.path.join(os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "shared")), "pycompss-reference")


def use_backend(name):
    runtime.set_backend(name, n_workers=2, threads_per_worker=1)


@pytest.fixture(params=BACKENDS, scope="module")
def backend(request):
    use_backend(request.param)
    yield request.param
    use_backend("local")


@pytest.fixture
def local():
    use_backend("local")
    yield "local"


# The emulated COMPSs runs: started with the session, checked last.
def _checks_emulated_runs(item):
    return item.nodeid.startswith("tests/compss/")


def pytest_collection_modifyitems(config, items):
    items.sort(key=_checks_emulated_runs)       # stable: the rest in order


def pytest_collection_finish(session):
    from tests.compss import _emulator
    if session.config.option.collectonly:
        return
    if os.path.isfile(_emulator.EMULATOR) and any(
            _checks_emulated_runs(item) for item in session.items):
        _emulator.start_ahead()


def pytest_sessionfinish(session, exitstatus):
    from tests.compss import _emulator
    _emulator.stop_ahead()

