"""Fit, then write the estimator with pickle, joblib and save() into a
folder, with the test rows and the predictions the fitted model made.

``load`` instead reads them back in this (fresh) process and prints the
predictions of each copy as JSON.
"""

import json
import os
import pickle
import sys

import joblib
import numpy as np

from dislib_nn import SyncEpochAveragingClassifier, runtime
from tests.training._models import Classifier


def fit(folder):
    rng = np.random.RandomState(0)
    X = rng.randn(80, 4).astype("float32")
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    est = SyncEpochAveragingClassifier(
        module=Classifier, module__hidden=12, n_epochs=2, n_workers=2,
        random_state=0).fit(X, y)
    with open(os.path.join(folder, "est.pkl"), "wb") as f:
        pickle.dump(est, f)
    joblib.dump(est, os.path.join(folder, "est.joblib"))
    est.save(os.path.join(folder, "est.pt"))
    np.save(os.path.join(folder, "X_train.npy"), X)
    X_test = rng.randn(10, 4).astype("float32")
    np.save(os.path.join(folder, "X_test.npy"), X_test)
    print(json.dumps(est.predict_proba(X_test).tolist()))


def load(folder):
    X_test = np.load(os.path.join(folder, "X_test.npy"))
    with open(os.path.join(folder, "est.pkl"), "rb") as f:
        copies = {"pickle": pickle.load(f)}
    copies["joblib"] = joblib.load(os.path.join(folder, "est.joblib"))
    copies["save"] = SyncEpochAveragingClassifier().load(
        os.path.join(folder, "est.pt"))
    print(json.dumps({name: est.predict_proba(X_test).tolist()
                      for name, est in copies.items()}))


if __name__ == "__main__":
    runtime.set_backend(sys.argv[3] if len(sys.argv) > 3 else "local",
                        n_workers=2)
    {"fit": fit, "load": load}[sys.argv[1]](sys.argv[2])
