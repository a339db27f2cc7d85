"""The script of docs/writing_a_strategy.md, as a user runs it: FedBuff
defined in the script, fitted, resumed from a checkpoint, warm-started,
saved and loaded.

The app runs the page's own code (so the page and this run cannot drift
apart): its definitions at import, which is where runcompss's workers
find the tasks, and its main part in a temporary folder (it writes a
checkpoint folder and a file). ``python strategy_app.py sequential``
runs it on the sequential backend, whose order of tasks is the serial
emulator's; both print the page's lines.
"""

import os
import re
import sys
import tempfile
import textwrap

import dislib_nn

# From the checkout dislib_nn is installed from (under runcompss,
# ``__file__`` is not this file's path).
PAGE = os.path.join(os.path.dirname(os.path.dirname(dislib_nn.__file__)),
                    "docs", "writing_a_strategy.md")
MAIN = 'if __name__ == "__main__":'


def _page_code():
    with open(PAGE, encoding="utf-8") as f:
        return re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)


_DEFINITIONS, _MAIN = _page_code().split(MAIN)
exec(compile(_DEFINITIONS, PAGE, "exec"))

if __name__ == "__main__":
    if sys.argv[1:] == ["sequential"]:
        from dislib_nn import runtime
        runtime.set_backend("sequential")
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        try:
            exec(compile(textwrap.dedent(_MAIN), PAGE, "exec"))
        finally:
            os.chdir(here)
    sys.stdout.flush()
