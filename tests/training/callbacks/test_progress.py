"""The progress line shown on a terminal while the master waits."""

import io
import time

import pytest

from dislib_nn.training.callbacks._progress import Ticker
from tests.training._paths import SCRIPTS


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_a_rewritten_line_then_nothing_left():
    out = Terminal()
    with Ticker(out, "epoch   3/10", expected_s=2.0, interval_s=0.01):
        time.sleep(0.2)
    text = out.getvalue()
    assert "\r\033[Kepoch   3/10  running  " in text
    assert "by the last epoch's 2.0s" in text
    # The line is erased at the end: the epoch's record replaces it.
    assert text.endswith("\r\033[K")


def test_a_log_file_gets_nothing():
    out = io.StringIO()         # not a terminal
    with Ticker(out, "epoch   1/2", interval_s=0.01):
        time.sleep(0.05)
    assert out.getvalue() == ""


@pytest.mark.parametrize("elapsed, expected, shown", [
    (1.0, 4.0, "[=====               ] ~25%"),
    (9.0, 4.0, "~99%"),              # longer than the last epoch: not done
    (1.5, None, "running  1.5s"),
])
def test_the_line_estimates_from_the_last_epoch(elapsed, expected, shown):
    assert shown in Ticker(Terminal(), "epoch 2/5", expected).line(elapsed)


def test_verbose_announces_the_pool_start_once(fresh_python):
    import os
    import subprocess
    import sys
    script = os.path.join(SCRIPTS, "verbose_start.py")
    env = dict(os.environ, DISLIB_NN_BACKEND="local", DISLIB_NN_WORKERS="2")
    done = subprocess.run([sys.executable, script], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("starting the local backend: 2 worker processes "
                        "(once per session, a few seconds)...")
    assert sum("starting the" in line for line in lines) == 1
    assert sum(line.startswith("SyncEpochAveragingClassifier: 2 workers, "
                               "backend local") for line in lines) == 2
