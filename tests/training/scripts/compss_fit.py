"""Fits under the pycompss test double 'inside COMPSs' (tasks run inline)
and reports the declarations dislib_nn handed to pycompss."""

import json

import numpy as np
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, n_features_in, n_classes):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(n_features_in, 8),
                                nn.BatchNorm1d(8), nn.ReLU(),
                                nn.Linear(8, n_classes))

    def forward(self, x):
        return self.fc(x)


if __name__ == "__main__":
    import pycompss.api.constraint as pc
    import pycompss.api.task as pt
    from sklearn.datasets import make_classification

    import dislib_nn as dnn
    from dislib_nn import runtime

    X, y = make_classification(n_samples=80, n_features=4, n_informative=3,
                               n_redundant=0, n_classes=3, random_state=0)
    clf = dnn.SyncEpochAveragingClassifier(
        module=Net, n_workers=3, n_epochs=2, batch_size=8, lr=0.1,
        optimizer_state="average", validation_fraction=0.2, random_state=0)
    clf.fit(X.astype(np.float32), y)
    x = dnn.from_array(X.astype(np.float32), n_blocks=3)
    tasks = {name: kwargs for name, kwargs in pt.RECORDED}
    constraints = dict(pc.RECORDED)
    print(json.dumps({
        "backend": runtime.backend_name(),
        "score": clf.score(X, y),
        "ds_score": clf.score(x, y),
        "ds_predict": list(clf.predict(x).shape),
        "epochs": clf.n_epochs_,
        "returns": {name: kw.get("returns") for name, kw in tasks.items()
                    if name.startswith(("_train", "_merge", "_outer",
                                        "_score", "_predict"))},
        "cpu": constraints.get("_train_epoch"),
        "gpu": constraints.get("_train_epoch_gpu"),
        "finite": bool(np.isfinite(
            clf.module_.fc[1].running_var.numpy()).all()),
        "tracked": int(clf.module_.fc[1].num_batches_tracked),
    }))
