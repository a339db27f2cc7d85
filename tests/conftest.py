"""Fixtures shared by the whole suite.

``backend`` runs a test once on each local backend. Local pools are kept
by configuration, so switching back and forth costs nothing after the
first start of the pool.

The apps tests/compss checks under the emulated runcompss start with the
session, in the background (they take minutes of CPU, most of which the
rest of the suite leaves idle); tests/compss runs after the rest, and
the examples last.

Two marks are applied by rule, from what a test uses: ``compss`` (the
PyCOMPSs sources or the emulator: ``make test-compss`` runs these only)
and ``slow``: a test that starts new Python processes (it asks for the
``fresh_python`` fixture: a script, a subprocess, a dask cluster, the
testbed), runs on the dask backend, or is on the COMPSs path. ``make
test-fast`` runs the rest in two pytest processes (pytest-xdist), each
with its own worker pool.
"""

import os

import pytest

from dislib_nn import runtime
# What the COMPSs-path tests need is found by one rule; its fixtures
# (``needs_sources``, ``needs_emulator``) are registered here.
from tests._compss_sources import _emulator, _sources  # noqa: F401

def _have_dask():
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


# The backends the contract suite runs on: dask where dask.distributed is
# installed (the test extra installs it), on a LocalCluster of 2 workers.
BACKENDS = ("local", "sequential") + (("dask",) if _have_dask() else ())


def use_backend(name):
    runtime.set_backend(name, n_workers=2, threads_per_worker=1)


@pytest.fixture(params=BACKENDS, scope="module")
def backend(request):
    use_backend(request.param)
    yield request.param
    use_backend("local")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fresh_python():
    """For a test that starts new Python processes: the environment a
    script of the suite gets (the checkout on ``PYTHONPATH``, no backend
    chosen). Asking for it marks the test ``slow``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                  if p])
    env.pop("DISLIB_NN_BACKEND", None)
    return env


def is_slow(item):
    """Whether a collected test is ``slow`` (see the module docstring)."""
    if "fresh_python" in item.fixturenames:
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("backend") == "dask"


@pytest.fixture
def local():
    use_backend("local")
    yield "local"


@pytest.fixture
def sequential():
    use_backend("sequential")
    yield "sequential"
    use_backend("local")


# The emulated COMPSs runs: started with the session, checked last.
def _checks_emulated_runs(item):
    return item.nodeid.startswith("tests/compss/")


def _order(item):
    """The rest first, beside the emulated runs; then their checks; the
    examples last, once those runs have ended (each example trains for
    a minute of CPU, and beside the emulated runs took four)."""
    if _checks_emulated_runs(item):
        return 1
    return 2 if item.nodeid.startswith("tests/examples/test_examples") \
        else 0


def pytest_collection_modifyitems(config, items):
    from tests._compss_sources import is_compss_test
    for item in items:
        if is_compss_test(item):
            item.add_marker(pytest.mark.compss)
            item.add_marker(pytest.mark.slow)
        elif is_slow(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_order)                      # stable: in order within


def pytest_collection_finish(session):
    from tests import _compss_sources
    from tests.compss import _emulator
    if session.config.option.collectonly:
        return
    if _compss_sources.have_emulator() and any(
            _checks_emulated_runs(item) for item in session.items):
        _emulator.start_ahead()


def pytest_sessionfinish(session, exitstatus):
    from tests.compss import _emulator
    _emulator.stop_ahead()
    # Pools and clusters stop now, while pytest still has its streams
    # (at interpreter exit dask would log to closed ones).
    runtime.shutdown()

