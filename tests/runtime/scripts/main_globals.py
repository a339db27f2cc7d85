"""A script whose own classes and functions reach tasks.

Run as ``python main_globals.py BACKEND``; prints a JSON report.
"""

import json
import sys

import numpy as np
import torch
from torch import nn

from dislib_nn import runtime
from dislib_nn.exceptions import TaskArgumentError
from dislib_nn.runtime import by_value, task, wait_on


class Doubler:
    def __call__(self, x):
        return 2 * x


class TinyNet(nn.Module):
    def __init__(self, n_features_in, n_classes):
        super().__init__()
        self.fc = nn.Linear(n_features_in, n_classes)

    def forward(self, x):
        return self.fc(x)


@task(returns=1)
def apply(fn, x):
    return fn(x)


if __name__ == "__main__":
    runtime.set_backend(sys.argv[1], n_workers=2)
    import dislib_nn as dnn
    report = {}
    try:
        apply(Doubler(), 3)
        report["by_reference"] = "accepted"
    except TaskArgumentError as exc:
        report["by_reference"] = str(exc)
    report["by_value"] = wait_on(apply(by_value(Doubler()), 3))
    report["lambda_by_value"] = wait_on(apply(by_value(lambda v: v + 1), 3))
    X = np.random.default_rng(0).random((40, 4)).astype(np.float32)
    y = np.arange(40) % 2
    clf = dnn.SyncEpochAveragingClassifier(module=TinyNet, n_epochs=2,
                                           n_workers=2, random_state=0)
    report["fitted"] = clf.fit(X, y).n_epochs_
    report["score"] = clf.score(dnn.from_array(X, n_blocks=2),
                                dnn.from_array(y, n_blocks=2))
    report["weights"] = float(sum(v.double().sum() for v in
                                  clf.module_.state_dict().values()))
    print(json.dumps(report))
