"""The claims benchmarks check for themselves, checked on a small run.

A benchmark that finds its claim broken exits non-zero; these tests run
it small enough for the suite (what is measured, not how fast: no
timing is asserted).
"""

import os
import subprocess
import sys

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "benchmarks")


def test_merge_tree_depth_is_ceil_log2_replicas():
    # docs/benchmarks.md: "Merge depth is log2 P for every P".
    done = subprocess.run(
        [sys.executable, "bench_scaling.py", "--max-replicas", "4",
         "--epochs", "2", "--rows-per-replica", "32"],
        cwd=BENCHMARKS, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "merge depth equals ceil(log2 P) for every P: True" in done.stdout
