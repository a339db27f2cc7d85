"""Import a script of the project (a benchmark, an emulated app) as a
module: they are files, not packages."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")


def load_file(path, name=None):
    """The module the Python file at ``path`` defines, imported under
    ``name`` (by default the file's own name)."""
    name = name or os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
