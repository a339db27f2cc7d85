"""Fixtures shared by the whole suite.

``backend`` runs a test once on each local backend. Local pools are kept
by configuration, so switching back and forth costs nothing after the
first start of the pool.
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
