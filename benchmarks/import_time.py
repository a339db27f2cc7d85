"""What importing dislib_nn costs, on the master and on a worker.

Run: ``python benchmarks/import_time.py [--repeats 7] [--root PATH]``

Each measure is an import timed inside a fresh ``python -c`` process
(interpreter start-up excluded), repeated; the cases take turns, so that
a change in the machine's load spreads over all of them. Prints, for
each, the median and range of the wall-clock time (``time.perf_counter``)
and the median of the CPU time the process spent (``time.process_time``,
all its threads: less sensitive than wall-clock time to other processes
on a shared machine), whether scikit-learn and matplotlib ended up in
``sys.modules``, and the two targets of the issue:

- master: ``from dislib_nn import SyncEpochAveragingClassifier`` costs
  at most 0.3 s more than ``import torch, sklearn.base``;
- worker: the modules a local worker or a COMPSs executor imports to
  run a training or merge task import neither scikit-learn nor
  matplotlib.

``--root`` measures the dislib_nn found in another folder (a copy of an
older commit, say: ``git archive COMMIT | tar -x -C /tmp/old``). This is
a benchmark, not a test: it never runs in CI.
"""

import argparse
import os
import statistics
import subprocess
import sys

from _machine import print_header  # noqa: E402 - benchmarks/ is on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))

# The modules that hold the tasks of a fit, and the worker loop: what a
# COMPSs executor or a local worker imports to run one.
TASK_MODULES = [
    "dislib_nn.runtime._worker",
    "dislib_nn.training.tasks._train",
    "dislib_nn.training.tasks._torch_loop",
    "dislib_nn.training.tasks._blocks",
    "dislib_nn.training.strategies._sync",
    "dislib_nn.training.strategies._async",
    "dislib_nn.training.tasks._snapshot",
    "dislib_nn.data._tasks",
]

# What dislib_nn is compared with: the same in every folder measured.
BASELINES = [
    ("torch", "import torch"),
    ("torch + sklearn.base", "import torch, sklearn.base"),
]
CASES = [
    ("import dislib_nn", "import dislib_nn"),
    ("master: an estimator",
     "from dislib_nn import SyncEpochAveragingClassifier"),
    ("master: every public name", "from dislib_nn import *"),
    ("worker: the task modules",
     "; ".join(f"import {m}" for m in TASK_MODULES)),
]

_PROBE = """\
import sys, time
sys.path.insert(0, {root!r})
start, cpu = time.perf_counter(), time.process_time()
{code}
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
print(elapsed, cpu, 'sklearn' in sys.modules, 'matplotlib' in sys.modules)
"""


def measure(code, root):
    """Wall-clock and CPU seconds one fresh process spends on ``code``,
    and whether it loaded scikit-learn and matplotlib."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(root=root, code=code)],
        capture_output=True, text=True, env=env, cwd="/", check=True)
    seconds, cpu, sklearn, matplotlib = done.stdout.split()
    return float(seconds), float(cpu), sklearn == "True", \
        matplotlib == "True"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--root", action="append",
                        help="folder that holds the dislib_nn to measure "
                             "(repeat it to compare folders in one run; "
                             "default: this repository)")
    args = parser.parse_args()
    roots = [os.path.abspath(r) for r in args.root or [os.path.dirname(HERE)]]
    print_header("import_time")
    print(f"median of {args.repeats} fresh processes per case")
    runs = [(None, name, code) for name, code in BASELINES]
    runs += [(root, name, code) for root in roots for name, code in CASES]
    results = {(root, name): [] for root, name, _ in runs}
    for _ in range(args.repeats):
        for root, name, code in runs:
            results[root, name].append(measure(code, root or roots[0]))
    print(f"{'case':28s} {'wall s':>7s} {'min-max s':>12s} {'CPU s':>6s}"
          f"  sklearn matplotlib")
    medians = {}
    for root in [None] + roots:
        if root is not None:
            print(f"dislib_nn from {root}:")
        for name, _ in BASELINES if root is None else CASES:
            got = results[root, name]
            wall = statistics.median(g[0] for g in got)
            cpu = statistics.median(g[1] for g in got)
            medians[root, name] = wall, cpu
            sklearn = " or ".join(sorted({str(g[2]) for g in got}))
            matplotlib = " or ".join(sorted({str(g[3]) for g in got}))
            print(f"{name:28s} {wall:7.3f} {min(g[0] for g in got):5.3f}-"
                  f"{max(g[0] for g in got):.3f} {cpu:6.3f}  {sklearn:7s} "
                  f"{matplotlib}")
    for root in roots:
        print(f"dislib_nn from {root}:")
        for i, label in enumerate(("wall", "CPU")):
            extra = (medians[root, "master: an estimator"][i]
                     - medians[None, "torch + sklearn.base"][i])
            worker = (medians[root, "worker: the task modules"][i]
                      - medians[None, "torch"][i])
            print(f"  {label}: master: an estimator - (torch + "
                  f"sklearn.base) = {extra:+.3f} s (target: at most "
                  f"+0.300 s); worker: the task modules - torch = "
                  f"{worker:+.3f} s")


if __name__ == "__main__":
    main()
