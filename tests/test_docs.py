"""Every ```python block of README.md and docs/*.md runs.

Each block is a complete script: it runs on its own, as ``python
block.py`` in a fresh process and an empty folder (with the repository
root on ``PYTHONPATH``), and must exit with status 0. Pages are found
when the suite is collected, so a new page under docs/ is tested
without being listed here. The blocks' processes are started ahead of
their tests, a few at a time (tests/_ahead.py): most of a block's time
is start-up on one core.
"""

import glob
import os
import re
import sys

import pytest

from tests._ahead import RunAhead, selected_params

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
    """Every selected block, started in its own folder ahead of its test."""
    runs = RunAhead()
    for key, code in selected_params(request, test_python_block_runs,
                                     "code"):
        _run_block(runs, key, code, tmp_path_factory.mktemp("block"))
    yield runs
    runs.close()


@pytest.mark.parametrize("code", BLOCKS)
def test_python_block_runs(code, block_runs, request, tmp_path):
    key = request.node.callspec.id
    if not block_runs.started(key):      # not known when the runs started
        _run_block(block_runs, key, code, tmp_path)
    done = block_runs.result(key)
    assert done.returncode == 0, (
        f"exit status {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-5000:]}")
