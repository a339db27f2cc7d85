"""Every ```python block of README.md and docs/*.md runs.

Each block is a complete script, run in an empty folder, and must end
without an error (or exit with status 0). A block about the runtime
itself (it names ``runtime``, ``set_backend``, dask, a ``DISLIB_NN_``
variable, processes or the environment) or one that reads Zarr
(:data:`OWN_PROCESS`) runs as ``python block.py`` in a fresh process,
with the repository root on ``PYTHONPATH``; those processes are started
ahead of their tests, a few at a time (tests/_ahead.py), since most of a
block's time is start-up on one core. Every other block runs in this
process as ``__main__`` (``runpy``), on the ``sequential`` backend, whose
rules are the local backend's: what it defines travels by value, as from
a script. Pages are found when the suite is collected, so a new page
under docs/ is tested without being listed here.
"""

import glob
import os
import re
import runpy
import sys

import pytest
import torch

from tests._ahead import RunAhead, selected_params
from tests.conftest import use_backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(
    glob.glob(os.path.join(ROOT, "docs", "*.md")))
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$",
                   re.DOTALL | re.MULTILINE)


def _blocks():
    found = []
    for page in PAGES:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        name = os.path.relpath(page, ROOT)
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            found.append(pytest.param(match.group(1), id=f"{name}:{line}"))
    return found


BLOCKS = _blocks()
#: What makes a block run in a fresh process: the runtime, or Zarr, which
#: keeps one event loop in a thread for the whole process; twice in CI
#: the docs/data.md block, run here after some 1,200 other tests, waited
#: on that loop for good (never seen outside CI; in a fresh process it has
#: nothing to inherit).
OWN_PROCESS = re.compile(r"\bruntime\b|set_backend|DISLIB_NN_|dask|Client\(|"
                         r"multiprocessing|subprocess|os\.environ|sys\.argv|"
                         r"\bzarr\b")
FRESH = [b for b in BLOCKS if OWN_PROCESS.search(b.values[0])]
IN_PROCESS = [b for b in BLOCKS if not OWN_PROCESS.search(b.values[0])]


def test_the_pages_have_python_blocks():
    ids = [param.id for param in BLOCKS]
    assert any(i.startswith("README.md:") for i in ids)
    assert any(i.startswith("docs/index.md:") for i in ids)


# What users read besides the pages: the examples' pages, scripts and
# notebooks (their messages tell users what to install, too).
READ = PAGES + sorted(
    glob.glob(os.path.join(ROOT, "examples", "**", "*.md"), recursive=True)
    + glob.glob(os.path.join(ROOT, "examples", "*.py"))
    + glob.glob(os.path.join(ROOT, "examples", "notebooks", "*.ipynb"))
    + glob.glob(os.path.join(ROOT, "benchmarks", "*.md")))
PIP_INSTALL = re.compile(r"pip3?\s+install\b([^\n`]*)")
# A requirement for the distribution itself, as an index serves it:
# dislib-nn, dislib_nn[plot], "dislib-nn>=0.1" (a path or ".[plot]" is a
# checkout, not an index).
FROM_INDEX = re.compile(r"^dislib[-_.]nn(\[[^\]]*\])?([<>=!~;@ ].*)?$",
                        re.IGNORECASE)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_no_page_says_pip_install_dislib_nn_from_an_index():
    """dislib_nn is not published on PyPI: from a checkout, pip install
    -e ".[plot]" works; pip install dislib-nn[plot] does not."""
    found = []
    for path in READ:
        for match in PIP_INSTALL.finditer(_read(path)):
            words = [w.strip("'\"\\,;:()") for w in match.group(1).split()]
            if any(FROM_INDEX.match(w) for w in words):
                found.append(f"{os.path.relpath(path, ROOT)}: "
                             f"{match.group(0).strip()}")
    assert found == []


def test_no_page_claims_accuracy_kept_as_workers_grow():
    """Measured, accuracy at equal epochs falls past about 8 replicas
    (docs/index.md): no page repeats the paper's "accuracy kept"."""
    claim = re.compile(r"accuracy\s+(is\s+|was\s+)?(kept|maintained|"
                       r"preserved|retained)|without\s+(any\s+)?(loss\s+of|"
                       r"losing)\s+accuracy", re.IGNORECASE)
    found = [f"{os.path.relpath(path, ROOT)}: {match.group(0)}"
             for path in READ for match in claim.finditer(_read(path))]
    assert found == []


def test_readme_says_how_long_make_test_takes():
    text = _read(os.path.join(ROOT, "README.md"))
    assert re.search(r"`make test` takes about \d+ minutes on \d+ cores",
                     text), "README.md: say how long make test takes"


def _run_block(runs, key, code, folder):
    script = folder / "block.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                  if p])
    env.pop("DISLIB_NN_BACKEND", None)
    env.setdefault("MPLBACKEND", "Agg")
    runs.start(key, [sys.executable, str(script)], cwd=folder, env=env)


@pytest.fixture(scope="module")
def block_runs(request, tmp_path_factory):
    """Every selected block of a fresh process, started in its own folder
    ahead of its test."""
    runs = RunAhead()
    for key, code in selected_params(
            request, test_python_block_runs_in_a_fresh_process, "code"):
        _run_block(runs, key, code, tmp_path_factory.mktemp("block"))
    yield runs
    runs.close()


@pytest.mark.parametrize("code", IN_PROCESS)
def test_python_block_runs(code, tmp_path, monkeypatch):
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setattr(sys, "argv", [str(script)])
    threads = torch.get_num_threads()
    use_backend("sequential")
    try:
        with torch.random.fork_rng(devices=[]):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (None, 0), f"exit status {exc.code}"
    finally:
        use_backend("local")
        torch.set_num_threads(threads)
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")


def test_the_blocks_about_the_runtime_run_in_fresh_processes():
    ids = {b.id for b in FRESH}
    assert {"docs/runtime.md:7"} <= ids
    assert len(FRESH) < len(BLOCKS) / 2


@pytest.mark.parametrize("code", FRESH)
def test_python_block_runs_in_a_fresh_process(code, fresh_python,
                                              block_runs, request, tmp_path):
    key = request.node.callspec.id
    if not block_runs.started(key):      # not known when the runs started
        _run_block(block_runs, key, code, tmp_path)
    done = block_runs.result(key)
    assert done.returncode == 0, (
        f"exit status {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-5000:]}")
