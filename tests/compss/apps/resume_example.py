"""Kill the SLURM example mid-fit under the emulated runcompss, run it
again, and report what both runs printed (tests/compss checks it).

``examples/slurm/enqueue_4x4_gpus.sh`` runs ``classification_cnn.py``
with ``--checkpoint-dir`` and asks SLURM to requeue the job when a node
fails; the requeued job runs the same command. Here the first run is
ended as a lost node would end it: the emulator's runcompss gets
SIGTERM and kills the app's master with SIGKILL, and every executor,
once the first strategy's checkpoint is on disk. The same command then
runs to the end, and so does the script with plain ``python`` (the local
backend), uninterrupted, for the expected accuracies. Prints one JSON
line.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from tests.compss._emulator import clean_env, compss_command  # noqa: E402

EXAMPLES = os.path.join(ROOT, "examples")
SCRIPT = os.path.join(EXAMPLES, "classification_cnn.py")


def _args(folder):
    return ["--tiny", "--epochs", "3", "--workers", "2", "--checkpoint-dir",
            os.path.join(folder, "checkpoints"),
            "--out", os.path.join(folder, "out")]


def main():
    # Ended early (the suite stopped, RunAhead sends SIGTERM): leave
    # through the finally below, which ends what the runs started (the
    # emulator's executors live in sessions of their own).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    with tempfile.TemporaryDirectory(prefix="resume_example_") as folder:
        # The emulator's run folders (the killed run keeps its own) too.
        try:
            print(json.dumps(runs(folder, dict(clean_env(), TMPDIR=folder))))
        finally:
            _end_leftovers(folder)


def _end_leftovers(folder):
    """Kill what a killed run left running: every process naming
    ``folder`` (where the runs' folders are) on its command line, until
    none is left (an executor may be starting meanwhile)."""
    for _ in range(20):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    line = f.read().decode(errors="replace")
            except OSError:
                continue
            if folder in line:
                found.append(int(entry))
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.2)


def runs(folder, env):
    command = compss_command(SCRIPT, *_args(folder), pythonpath=EXAMPLES)
    first = os.path.join(folder, "checkpoints", "sync-global-shuffle",
                         "checkpoint.pt")
    killed = subprocess.Popen(command, cwd=EXAMPLES, env=env,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 900
    while not os.path.exists(first) and killed.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = killed.poll() is None
    if alive:
        killed.send_signal(signal.SIGTERM)
    killed_out = killed.communicate(timeout=300)[0]
    _end_leftovers(folder)
    resumed = subprocess.run(command, cwd=EXAMPLES, env=env,
                             capture_output=True, text=True, timeout=1500)
    plain = subprocess.run([sys.executable, SCRIPT,
                            *_args(os.path.join(folder, "plain"))],
                           cwd=EXAMPLES, env=env, capture_output=True,
                           text=True, timeout=900)
    return {
        "killed_mid_fit": alive, "killed_tail": killed_out[-2000:],
        "resumed": {"code": resumed.returncode, "stdout": resumed.stdout,
                    "stderr_tail": resumed.stderr[-3000:]},
        "plain": {"code": plain.returncode, "stdout": plain.stdout,
                  "stderr_tail": plain.stderr[-3000:]}}


if __name__ == "__main__":
    main()
