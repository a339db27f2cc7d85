"""Modules for the reliability tests (module level: workers import them)."""

import os
import time

import torch
from torch import nn


class SlowNet(nn.Module):
    """A linear classifier whose forward stalls while ``folder/slow`` exists.

    When it stalls it writes ``folder/started-<pid>`` first, so that a test
    knows a training task is running, and in which process.
    """

    def __init__(self, n_features_in=4, n_classes=2, folder=""):
        super().__init__()
        self.folder = folder
        self.out = nn.Linear(n_features_in, n_classes)

    def forward(self, x):
        flag = os.path.join(self.folder, "slow")
        if self.training and self.folder and os.path.exists(flag):
            marker = os.path.join(self.folder, f"started-{os.getpid()}")
            open(marker, "w").close()
            deadline = time.monotonic() + 300
            while os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.05)
        return self.out(x)


class RaisingInit(nn.Module):
    """A module whose constructor raises."""

    def __init__(self, n_features_in=4, n_classes=2):
        super().__init__()
        raise RuntimeError("RaisingInit cannot be built")


class VectorLoss(nn.Module):
    """A criterion that forgets to reduce: it returns one loss per row."""

    def forward(self, output, target):
        return nn.functional.cross_entropy(output, target, reduction="none")


class Recorder(nn.Module):
    """A linear classifier that counts its training forward calls in a file.

    Training runs only in tasks, so an empty log means no training task
    ran.
    """

    def __init__(self, n_features_in=4, n_classes=2, log=""):
        super().__init__()
        self.log = log
        self.out = nn.Linear(n_features_in, n_classes)

    def forward(self, x):
        if self.log and self.training:
            with open(self.log, "a") as f:
                f.write("forward\n")
        return self.out(torch.as_tensor(x))


class SlowRows(nn.Module):
    """A linear regressor whose training batches stall while their first
    feature is the one ``folder/slow_rows`` holds (a number): a test
    chooses which worker's blocks run late by what it writes there."""

    def __init__(self, n_features_in=4, n_outputs=1, folder=""):
        super().__init__()
        self.folder = folder
        self.out = nn.Linear(n_features_in, n_outputs)

    def forward(self, x):
        path = os.path.join(self.folder, "slow_rows")
        if self.training and self.folder and os.path.exists(path):
            with open(path) as f:
                slow = float(f.read())
            if float(x[0, 0]) == slow:
                time.sleep(0.03)
        return self.out(x)
