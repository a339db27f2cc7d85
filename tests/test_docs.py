"""Every ```python block of README.md and docs/*.md runs.

Each block is a complete script: it runs on its own, as ``python
block.py`` in a fresh process and an empty folder (with the repository
root on ``PYTHONPATH``), and must exit with status 0. Pages are found
when the suite is collected, so a new page under docs/ is tested
without being listed here.
"""

import glob
import os
import re
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("code", BLOCKS)
def test_python_block_runs(code, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                  if p])
    env.pop("DISLIB_NN_BACKEND", None)
    env.setdefault("MPLBACKEND", "Agg")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, (
        f"exit status {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-5000:]}")
