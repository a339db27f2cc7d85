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
