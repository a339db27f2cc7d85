"""A fit that tests/training/callbacks/test_checkpoint.py runs in a subprocess.

    python -m tests.training._checkpoint_run OUT CKPT_DIR RESUME ESTIMATOR

Trains a small regressor with a fixed seed and writes its final
``state_dict``, ``history_`` epochs and ``n_epochs_`` to OUT.
CKPT_DIR may be ``-`` (no checkpoint); RESUME is 0 or 1.
``SlowMLP`` appends one byte to ``$DISLIB_NN_TEST_MARKER`` per training
forward and sleeps, so that the test can kill the process mid-epoch.
"""

import os
import sys
import time

import numpy as np
import torch
from torch import nn

N_ROWS, N_WORKERS, BATCH_SIZE, N_EPOCHS = 64, 2, 8, 5
#: training forwards per epoch, all workers together
CALLS_PER_EPOCH = N_ROWS // BATCH_SIZE


class SlowMLP(nn.Module):
    def __init__(self, n_features_in=3, n_outputs=1):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_features_in, 8), nn.Tanh(),
                                  nn.Linear(8, n_outputs))

    def forward(self, x):
        marker = os.environ.get("DISLIB_NN_TEST_MARKER")
        if self.training and marker:
            with open(marker, "ab") as f:
                f.write(b".")
            time.sleep(float(os.environ.get("DISLIB_NN_TEST_SLEEP", "0")))
        return self.body(x)


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_ROWS, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], dtype=np.float32)
         + 0.1 * rng.normal(size=N_ROWS).astype(np.float32))
    return x, y


def estimator(name, checkpoint_dir):
    import dislib_nn
    # By its importable name: worker processes unpickle the class.
    from tests.training._checkpoint_run import SlowMLP as module
    cls = getattr(dislib_nn, name)
    kwargs = dict(module=module, lr=0.05, n_epochs=N_EPOCHS,
                  batch_size=BATCH_SIZE, n_workers=N_WORKERS,
                  optimizer_state="keep", optimizer__momentum=0.9,
                  outer_momentum=0.5, random_state=7,
                  checkpoint_dir=checkpoint_dir)
    if name.startswith("Async"):
        kwargs["max_lag"] = 0
    return cls(**kwargs)


def main(out, checkpoint_dir, resume, name):
    x, y = data()
    est = estimator(name, None if checkpoint_dir == "-" else checkpoint_dir)
    est.fit(x, y, resume=bool(int(resume)))
    torch.save({"state": est.module_.state_dict(),
                "epochs": [r["epoch"] for r in est.history_],
                "n_epochs_": est.n_epochs_}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
