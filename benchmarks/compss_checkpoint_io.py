"""What COMPSs's own task checkpointing would write, against dislib_nn's.

Run: ``python benchmarks/compss_checkpoint_io.py [--workers 16]
[--epochs 3]`` (needs the COMPSs emulator and the PyCOMPSs sources laid
out, see ../shared/compss-emulator/README.md; exits 2 where they are
not).

``runcompss --checkpoint=...CheckpointPolicyFinishedTasks
--checkpoint_params=finished.tasks:1`` asks COMPSs to save the last
versions of the data its finished tasks wrote after every finished task
(``CheckpointManagerImpl.endTask`` in COMPSs 3.3): every replica's state
dict and optimizer state after each training task, every merged model.
This runs the example CNN on digits (``dislib_nn.demo.DigitsCNN``, SGD
with momentum, one merge per epoch) under the emulated runcompss, keeps
the run's data store, and adds up the size of every version the fit's
tasks wrote, per kind of task: what that policy copies to the
checkpoint folder, on the shared file system. Beside it, the size of the
one file dislib_nn's own ``checkpoint_dir`` rewrites after each merged
epoch. Figures per epoch, and in model sizes (the state dict's bytes),
so that they scale to another model.

A benchmark, not a test: it never runs in CI.
"""

import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from _machine import print_header  # noqa: E402 - benchmarks/ is on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EMULATOR = os.path.join(os.environ.get(
    "DISLIB_NN_SHARED", os.path.join(os.path.dirname(ROOT), "shared")),
    "compss-emulator", "run.py")

APP = """
import json, os, sys
import numpy as np, torch
from sklearn.datasets import load_digits
import dislib_nn as dnn
from dislib_nn.demo import DigitsCNN

if __name__ == "__main__":
    workers, epochs, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32).reshape(-1, 1, 8, 8)
    clf = dnn.SyncEpochAveragingClassifier(
        module=DigitsCNN, n_epochs=epochs, n_workers=workers, sync_every=1,
        lr_scaling="none", lr=0.05, optimizer__momentum=0.9, batch_size=16,
        random_state=0, checkpoint_dir=folder)
    clf.fit(X, y)
    state = sum(t.numel() * t.element_size()
                for t in clf.module_.state_dict().values())
    print(json.dumps({"state_bytes": state, "checkpoint_bytes":
                      os.path.getsize(os.path.join(folder, "checkpoint.pt")),
                      "train_score": clf.score(X, y)}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    if not os.path.exists(EMULATOR):
        print(f"the COMPSs emulator is not at {EMULATOR}: see "
              f"../shared/compss-emulator/README.md", file=sys.stderr)
        sys.exit(2)
    print_header("compss_checkpoint_io")
    with tempfile.TemporaryDirectory(prefix="compss_io_") as folder:
        app = os.path.join(folder, "io_app.py")
        with open(app, "w") as f:
            f.write(APP)
        env = dict(os.environ, TMPDIR=folder)
        env.pop("DISLIB_NN_BACKEND", None)
        done = subprocess.run(
            [sys.executable, EMULATOR, "--keep", app, str(args.workers),
             str(args.epochs), os.path.join(folder, "checkpoints")],
            cwd=folder, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"the emulated run failed:\n{done.stderr[-3000:]}")
        fit = json.loads(done.stdout.strip().splitlines()[-1])
        run_dir = re.findall(r"tasks\.jsonl in (\S+)/log$", done.stderr,
                             re.MULTILINE)[-1]
        written = written_bytes(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)
    report(args, fit, written)


def written_bytes(run_dir):
    """``{task method: (tasks, bytes of the versions they wrote)}``."""
    sizes = {}
    for path in glob.glob(os.path.join(run_dir, "worker", "store", "*.IT")):
        sizes[os.path.basename(path).split("_")[0]] = os.path.getsize(path)
    out = collections.defaultdict(lambda: [0, 0])
    with open(os.path.join(run_dir, "log", "tasks.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if record["event"] != "done":
                continue
            entry = out[record["method"]]
            entry[0] += 1
            for access in record.get("accesses", []):
                version = access.partition("->")[2]
                entry[1] += sizes.get(version, 0)
    return dict(out)


#: The task of dislib_nn's own checkpoints (it copies what the file
#: holds), left out of what COMPSs's policy alone would write.
OWN_CHECKPOINT_TASKS = ("_snapshot",)


def report(args, fit, written):
    state, epochs = fit["state_bytes"], args.epochs
    own = {m: written.pop(m) for m in OWN_CHECKPOINT_TASKS if m in written}
    total = sum(b for _, b in written.values())
    print(f"\nSynchronous fit, DigitsCNN (state dict {state / 1e3:.1f} kB), "
          f"{args.workers} replicas, {epochs} epochs, one merge per epoch "
          f"(training score {fit['train_score']:.3f})")
    print(f"\n{'task':<28}{'tasks':>7}{'MB written':>12}{'per epoch':>12}"
          f"{'models/epoch':>14}")
    for method, (n, b) in sorted(written.items(), key=lambda kv: -kv[1][1]):
        print(f"{method:<28}{n:>7}{b / 1e6:>12.2f}{b / epochs / 1e6:>12.3f}"
              f"{b / epochs / state:>14.1f}")
    print(f"{'all tasks of the fit':<28}{sum(n for n, _ in written.values()):>7}"
          f"{total / 1e6:>12.2f}{total / epochs / 1e6:>12.3f}"
          f"{total / epochs / state:>14.1f}")
    for method, (n, b) in own.items():
        print(f"{method + ' (dislib_nn checkpoint)':<28}{n:>7}"
              f"{b / 1e6:>12.2f}{b / epochs / 1e6:>12.3f}"
              f"{b / epochs / state:>14.1f}")
    print(f"\nCOMPSs finished.tasks:1 copies about {total / epochs / 1e6:.2f}"
          f" MB per epoch to its checkpoint folder "
          f"({total / epochs / state:.0f} model sizes), in "
          f"{sum(n for n, _ in written.values()) // epochs} saves; "
          f"dislib_nn's checkpoint_dir rewrites one file of "
          f"{fit['checkpoint_bytes'] / 1e6:.3f} MB per merged epoch "
          f"({fit['checkpoint_bytes'] / state:.1f} model sizes).")


if __name__ == "__main__":
    main()
