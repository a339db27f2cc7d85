"""A torch Dataset of (x, y) pairs given to fit, partial_fit, predict and
score, against plain PyTorch trained the same way on its rows."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from dislib_nn import (SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor, from_dataset)
from tests.training import _models, _reference as ref

ATOL = 2e-5


class Rows(torch.utils.data.Dataset):
    """Rows of two arrays, an item a (tensor, number) pair."""

    def __init__(self, X, y):
        self.X, self.y = X, y

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        return torch.from_numpy(self.X[i]), self.y[i].item()


class NotPairs(Rows):
    def __getitem__(self, i):
        return torch.from_numpy(self.X[i])


class Locked(Rows):
    def __init__(self, X, y):
        super().__init__(X, y)
        self.lock = threading.Lock()


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter([(torch.zeros(3), 0)])


def _digits(n=120):
    X, y = load_digits(return_X_y=True)
    return (X[:n] / 16).astype(np.float32), y[:n]


def _init(cls, **kwargs):
    torch.manual_seed(0)
    return cls(**kwargs)


def _classifier(init, epochs=2):
    return SyncEpochAveragingClassifier(
        module=init, n_workers=2, shuffle="none", n_epochs=epochs,
        batch_size=16, lr=0.1)


def _expected(init, X, y, criterion, epochs=2):
    parts = ref.split_like_blocks(torch.from_numpy(X), torch.from_numpy(y),
                                  2)
    return ref.epoch_averaging(init, parts, criterion, epochs=epochs,
                               batch_size=16, lr=0.1)


@pytest.mark.parametrize("wrap", ["rows", "tensors"])
def test_fit_on_a_dataset_trains_like_plain_pytorch(backend, wrap):
    X, y = _digits()
    dataset = Rows(X, y) if wrap == "rows" else \
        torch.utils.data.TensorDataset(torch.from_numpy(X),
                                       torch.from_numpy(y))
    init = _init(_models.Classifier, n_features_in=64, n_classes=10,
                 batch_norm=False)
    est = _classifier(init).fit(dataset)
    expected = _expected(init, X, y, torch.nn.CrossEntropyLoss())
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    logits = expected(torch.from_numpy(X)).detach()
    np.testing.assert_array_equal(est.predict(dataset),
                                  logits.argmax(dim=1).numpy())
    np.testing.assert_allclose(
        est.predict_proba(dataset),
        torch.softmax(logits.double(), dim=1).numpy(), atol=1e-5)
    assert est.score(dataset) == pytest.approx(
        float((logits.argmax(dim=1).numpy() == y).mean()))
    # One more epoch on the Dataset: the reference's third epoch.
    est.partial_fit(dataset)
    ref.assert_same_model(est.module_, _expected(
        init, X, y, torch.nn.CrossEntropyLoss(), epochs=3), atol=ATOL,
        rtol=1e-4)


def test_a_regressor_takes_integer_ids_from_a_dataset(backend):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 40, size=(64, 5))
    y = (X[:, 0] / 40.0).astype(np.float32)
    init = _init(_models.TokenBag, n_outputs=1)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=2, batch_size=16,
        lr=0.1).fit(Rows(X, y))
    expected = _expected(init, X, y[:, None], torch.nn.MSELoss())
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)


def test_from_dataset_blocks_every_item_once():
    X, y = _digits(n=10)
    x_ds, y_ds = from_dataset(Rows(X, y), block_size=4)
    assert x_ds.block_sizes == (4, 4, 2) == y_ds.block_sizes
    np.testing.assert_array_equal(x_ds.collect().numpy(), X)
    np.testing.assert_array_equal(y_ds.collect().numpy(), y)
    assert y_ds.dtype == torch.int64


@pytest.mark.parametrize("call, match", [
    (lambda est, X, y: est.fit(NotPairs(X, y)),
     r"the items of 'dataset' \(NotPairs\) must be \(x, y\) pairs; "
     r"dataset\[0\] is a Tensor"),
    (lambda est, X, y: est.fit(Stream()),
     r"'dataset' is an IterableDataset \(Stream\)"),
    (lambda est, X, y: est.fit(Rows(X, y), y),
     r"given a torch Dataset as X \(Rows\).*Pass y=None"),
    (lambda est, X, y: est.fit(Locked(X, y)),
     r"'dataset' \(Locked\) must pickle.*lock"),
    (lambda est, X, y: est.fit(X),
     r"requires y to be passed, but the target y is None"),
])
def test_bad_datasets_are_named_before_any_task(local, call, match):
    X, y = _digits(n=20)
    est = _classifier(_models.Classifier)
    with pytest.raises((TypeError, ValueError), match=match):
        call(est, X, y)
    assert not hasattr(est, "module_")


_SCRIPT = """
import json, os, sys
import numpy as np
import torch
from dislib_nn import SyncEpochAveragingRegressor, runtime


class Shards(torch.utils.data.Dataset):
    # Defined in the script: it travels to the workers by value, and
    # each reads its rows from the files.
    def __init__(self, folder):
        self.x = os.path.join(folder, "x.npy")
        self.y = os.path.join(folder, "y.npy")

    def __len__(self):
        return len(np.load(self.y, mmap_mode="r"))

    def __getitem__(self, i):
        return (np.array(np.load(self.x, mmap_mode="r")[i]),
                float(np.load(self.y, mmap_mode="r")[i]))


if __name__ == "__main__":
    runtime.set_backend("local", n_workers=2)
    folder = sys.argv[1]
    X, y = np.load(os.path.join(folder, "x.npy")), np.load(
        os.path.join(folder, "y.npy"))
    kw = dict(module=torch.nn.Linear, module__in_features=4,
              module__out_features=1, n_workers=2, shuffle="none",
              n_epochs=2, batch_size=8, lr=0.05, random_state=0)
    a = SyncEpochAveragingRegressor(**kw).fit(Shards(folder))
    b = SyncEpochAveragingRegressor(**kw).fit(X, y)
    print(json.dumps({
        "same": all(torch.equal(v, b.module_.state_dict()[k])
                    for k, v in a.module_.state_dict().items()),
        "score": a.score(Shards(folder)), "array_score": b.score(X, y)}))
"""


def test_a_dataset_defined_in_a_script_is_read_on_the_workers(
        fresh_python, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", X.sum(axis=1).astype(np.float32))
    script = tmp_path / "shards.py"
    script.write_text(_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)],
                          env=fresh_python, capture_output=True, text=True,
                          timeout=300, cwd=os.fspath(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["same"]
    assert report["score"] == pytest.approx(report["array_score"])
