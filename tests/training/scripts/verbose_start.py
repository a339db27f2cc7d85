"""Two verbose fits in a fresh process: the pool's start is announced once."""

import numpy as np
import torch

import dislib_nn as dnn

if __name__ == "__main__":
    X = np.random.default_rng(0).random((40, 4)).astype(np.float32)
    y = np.arange(40) % 2
    for _ in range(2):
        dnn.SyncEpochAveragingClassifier(
            module=torch.nn.Linear, module__in_features=4,
            module__out_features=2, n_epochs=1, n_workers=2,
            verbose=1).fit(X, y)
