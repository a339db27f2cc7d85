# Two commands from a fresh checkout:
#   make demo   set up, then run the demo (python -m dislib_nn.demo)
#   make test   set up with the test extras, then run the test suite
#   make test-fast   the tests that need no new Python process: no script
#               or subprocess, no dask cluster, no emulated COMPSs run
#               (the `slow` mark, applied by rule in tests/conftest.py),
#               split between FAST_JOBS pytest processes (pytest-xdist)
#   make test-compss   only the tests on the COMPSs path (the emulated
#               runcompss, PyCOMPSs's binding, the COMPSs launch scripts);
#               fails where the PyCOMPSs sources or the emulator are absent
#               instead of skipping (see docs/compss_compatibility.md)
#
# Set-up uses the active virtual environment when there is one
# ($VIRTUAL_ENV), else creates .venv here. torch is installed only when
# none is importable, as the version pinned below, in the build the
# package index serves (from PyPI on Linux: the CUDA build; for the CPU
# one, TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu");
# install your own build first and it is kept. Override on the command
# line: make test TORCH=torch==2.13.0 TORCH_PIP_ARGS="--index-url URL"
# PYTEST_ARGS="-x -q tests/data".

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=
# Two: on 2 cores one process left a core idle while its tests waited on
# their worker pool or a time-out (255 s in one, 172-183 s in two).
FAST_JOBS ?= 2

ifdef VIRTUAL_ENV
PY := python
ENV_TARGET :=
else
PY := $(VENV)/bin/python
ENV_TARGET := $(VENV)/bin/python
endif

.PHONY: demo test test-fast test-compss install install-test

demo: install
	$(PY) -m dislib_nn.demo

test: install-test
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: install-test
	$(PY) -m pytest -m "not slow" -n $(FAST_JOBS) $(PYTEST_ARGS)

test-compss: install-test
	DISLIB_NN_REQUIRE_COMPSS=1 $(PY) -m pytest -m compss $(PYTEST_ARGS)

install: $(ENV_TARGET)
	@$(PY) -c "import torch" 2>/dev/null \
	  || $(PY) -m pip install $(TORCH_PIP_ARGS) "$(TORCH)"
	$(PY) -m pip install -e .

# dislib's ds-array for the interop tests, without its dependencies: it
# needs numpy, scipy and scikit-learn to run, and imports pycompss, which
# the tests take from the PyCOMPSs sources (tests/_compss_sources.py).
install-test: install
	$(PY) -m pip install -e ".[test]"
	$(PY) -m pip install --no-deps dislib==1.0.0

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
