"""Every script in examples/ runs, in its tiny mode, so that none rots.

Each runs as a user runs it (``python examples/NAME.py``) in a fresh
process, with ``--tiny`` and ``--out`` pointing at a temporary folder;
the notebooks run cell by cell in a Jupyter kernel (nbclient).
"""

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.py")))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "examples", "notebooks",
                                          "*.ipynb")))
# The figure each script saves, when matplotlib is installed.
PLOTS = {"classification_cnn.py": "classification_cnn.png",
         "regression_mlp.py": "regression_mlp.png",
         "federated_non_iid.py": "federated_non_iid.png"}


def _env():
    env = dict(os.environ, DISLIB_NN_EXAMPLE_TINY="1")
    env.pop("DISLIB_NN_BACKEND", None)
    return env


def test_the_examples_are_found():
    names = {os.path.basename(p) for p in EXAMPLES}
    assert {"classification_cnn.py", "regression_mlp.py",
            "federated_non_iid.py", "large_dataset_npy.py"} <= names
    assert [os.path.basename(p) for p in NOTEBOOKS] == ["quickstart.ipynb"]


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_example_runs(path, tmp_path):
    done = subprocess.run(
        [sys.executable, path, "--tiny", "--out", str(tmp_path)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plot = PLOTS.get(os.path.basename(path))
    if plot is not None:
        pytest.importorskip("matplotlib")
        assert (tmp_path / plot).stat().st_size > 0, done.stdout


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    for name, value in _env().items():
        monkeypatch.setenv(name, value)
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=600,
                                     kernel_name="python3",
                                     resources={"metadata": {
                                         "path": str(tmp_path)}})
    client.execute()
    printed = "".join(output.get("text", "")
                      for cell in notebook.cells if cell.cell_type == "code"
                      for output in cell.get("outputs", []))
    assert "test accuracy" in printed
    assert "epoch   2/2" in printed
