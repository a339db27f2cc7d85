"""Where the COMPSs-path tests find PyCOMPSs and the emulator: one rule.

Two folders, neither in this repository:

* the emulator, ``compss-emulator/`` in the shared folder beside the
  repository (``$DISLIB_NN_SHARED``, by default ``../shared``);
* the PyCOMPSs 3.3 sources it runs, laid out from a git copy of the
  public COMPSs repository by the emulator's ``reference.sh``, in
  ``$COMPSS_EMU_REFERENCE``, by default
  ``${XDG_CACHE_HOME:-~/.cache}/compss-emulator/reference`` (the rule
  the emulator's ``run.py`` follows).

Tests that need them call :func:`require` (or use :data:`needs_sources`
/ :data:`needs_emulator` as marks): they skip, saying how to lay the
sources out, or fail where ``DISLIB_NN_REQUIRE_COMPSS=1`` is set (``make
test-compss``), so that a skip is never mistaken for a pass.
"""

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("DISLIB_NN_SHARED",
                        os.path.join(os.path.dirname(ROOT), "shared"))
EMULATOR_DIR = os.path.join(SHARED, "compss-emulator")
EMULATOR = os.path.join(EMULATOR_DIR, "run.py")
REFERENCE = os.environ.get("COMPSS_EMU_REFERENCE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
    "compss-emulator", "reference")
# The binding (``import pycompss`` with this folder on the path) and the
# launch scripts (runcompss, enqueue_compss, launch_compss).
PYCOMPSS = REFERENCE
SCRIPTS = os.path.join(REFERENCE, "scripts")

REQUIRED = os.environ.get("DISLIB_NN_REQUIRE_COMPSS") == "1"

HOW = (f"lay them out with `{os.path.join(EMULATOR_DIR, 'reference.sh')} "
       f"GIT_DIR`, GIT_DIR a git copy of github bsc-wdc/compss (see "
       f"docs/compss_compatibility.md), or set COMPSS_EMU_REFERENCE")


def have_sources():
    """Whether the PyCOMPSs sources are laid out."""
    return os.path.isdir(os.path.join(REFERENCE, "pycompss")) and \
        os.path.isdir(SCRIPTS)


def have_emulator():
    """Whether the emulator and the sources it runs are both here."""
    return os.path.isfile(EMULATOR) and have_sources()


def missing(emulator=False):
    """Why the COMPSs-path tests cannot run here, or None when they can."""
    if emulator and not os.path.isfile(EMULATOR):
        return (f"the COMPSs emulator is not beside the repository "
                f"({EMULATOR}); set DISLIB_NN_SHARED to the folder that "
                f"holds compss-emulator/")
    if not have_sources():
        return f"the PyCOMPSs sources are not in {REFERENCE}: {HOW}"
    return None


def require(emulator=False):
    """Skip the calling test (fail it under ``make test-compss``) where
    the sources, or with ``emulator`` the emulator too, are absent."""
    reason = missing(emulator)
    if reason is None:
        return
    if REQUIRED:
        pytest.fail(f"make test-compss: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def _sources():
    require()


@pytest.fixture(scope="session")
def _emulator():
    require(emulator=True)


# Marks for a test or a module (``pytestmark = needs_emulator``); the
# tests that use them are also marked ``compss`` (tests/conftest.py),
# which ``make test-compss`` selects.
needs_sources = pytest.mark.usefixtures("_sources")
needs_emulator = pytest.mark.usefixtures("_emulator")


def is_compss_test(item):
    """Whether a collected test is on the COMPSs path (uses the marks)."""
    return bool({"_sources", "_emulator"} & set(item.fixturenames))
