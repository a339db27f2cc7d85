"""Accuracy on data that ships with scikit-learn, against plain PyTorch.

The reference is the same module (same initial weights) trained in this
process by an ordinary minibatch loop with the same optimizer, epochs
and batch size, rows reshuffled every epoch.
"""

import copy

import numpy as np
import pytest
import torch
from sklearn.datasets import load_diabetes, load_digits
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import train_test_split

from dislib_nn import (AsyncEpochAveragingClassifier,
                       AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from tests.conftest import use_backend
from tests.training import _models


@pytest.fixture(scope="module", autouse=True)
def _local():
    use_backend("local")


def _reference(module, X, y, criterion, optimizer, epochs, batch_size,
               seed, **opt_kwargs):
    model = copy.deepcopy(module)
    opt = optimizer(model.parameters(), **opt_kwargs)
    x, t = torch.from_numpy(X), torch.from_numpy(y)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad()
            criterion(model(x[idx]), t[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        return model


def _digits_and_cnn():
    """Digits as 1 x 8 x 8 images, split 3:1, and the CNN's first
    weights (seed 0)."""
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.25, stratify=y, random_state=0)
    torch.manual_seed(0)
    return X_train, X_test, y_train, y_test, _models.DigitsCNN(n_classes=10)


@pytest.mark.parametrize("cls", [SyncEpochAveragingClassifier,
                                 AsyncEpochAveragingClassifier])
def test_digits_cnn_with_batchnorm_two_workers(cls):
    X_train, X_test, y_train, y_test, init = _digits_and_cnn()
    clf = cls(
        module=init, n_workers=2, n_epochs=8, batch_size=32, lr=0.003,
        optimizer=torch.optim.Adam, random_state=0)
    clf.fit(X_train, y_train)
    ours = clf.score(X_test, y_test)

    reference = _reference(init, X_train, y_train.astype(np.int64),
                           torch.nn.CrossEntropyLoss(), torch.optim.Adam,
                           epochs=8, batch_size=32, seed=0, lr=0.003)
    with torch.no_grad():
        pred = reference(torch.from_numpy(X_test)).argmax(1).numpy()
        untrained = init.eval()(torch.from_numpy(X_test)).argmax(1).numpy()
    theirs = accuracy_score(y_test, pred)
    before = accuracy_score(y_test, untrained)
    print(f"{cls.__name__} digits accuracy: ours {ours:.4f}, "
          f"single-process {theirs:.4f}, untrained {before:.4f}")
    # The reference learned (most of the way from the untrained CNN's
    # accuracy to all of it), and ours is within 2 points of it.
    assert theirs - before >= 0.8 * (1 - before)
    assert abs(ours - theirs) <= 0.02
    assert clf.module_.features[1].num_batches_tracked.item() > 0


# Epochs per replica count: 8 replicas of 168 rows each make 6 steps an
# epoch, and need more epochs to come near single-process training.
@pytest.mark.parametrize("n_workers, epochs", [(2, 4), (4, 4), (8, 8)])
def test_batchnorm_statistics_merge_into_valid_models(n_workers, epochs):
    # Asynchronous merges used to fold stale deltas into the running
    # variances: negative after a few epochs, and accuracy at chance.
    X_train, X_test, y_train, y_test, init = _digits_and_cnn()
    scores = {}
    for cls in (SyncEpochAveragingClassifier, AsyncEpochAveragingClassifier):
        # One merge per epoch at lr for both strategies: the comparison
        # is of their merges, not of the schedule sync_every="auto"
        # picks for the synchronous one at 4 and 8 replicas, nor of the
        # statistics recompute_batchnorm="auto" recomputes there.
        clf = cls(module=init, n_workers=n_workers, n_epochs=epochs,
                  batch_size=32, lr=0.003, optimizer=torch.optim.Adam,
                  random_state=0, sync_every=1, lr_scaling="none",
                  recompute_batchnorm=False)
        clf.fit(X_train, y_train)
        for name, value in clf.module_.state_dict().items():
            if name.endswith("running_var"):
                assert bool((value > 0).all()), (cls.__name__, name)
            if name.endswith("num_batches_tracked"):
                assert not value.is_floating_point()
                assert value.item() > 0
        scores[cls.__name__] = clf.score(X_test, y_test)
    reference = _reference(init, X_train, y_train.astype(np.int64),
                           torch.nn.CrossEntropyLoss(), torch.optim.Adam,
                           epochs=epochs, batch_size=32, seed=0, lr=0.003)
    with torch.no_grad():
        pred = reference(torch.from_numpy(X_test)).argmax(1).numpy()
    single = accuracy_score(y_test, pred)
    print(f"{n_workers} workers, {epochs} epochs: {scores}, "
          f"single-process {single:.4f}")
    sync, async_ = scores.values()
    assert abs(sync - async_) <= 0.04
    assert min(sync, async_) >= single - 0.06


@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
def test_diabetes_mlp_r2_close_to_single_process(cls):
    X, y = load_diabetes(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.25, random_state=0)
    mean, std = X_train.mean(0), X_train.std(0)
    X_train = ((X_train - mean) / std).astype(np.float32)
    X_test = ((X_test - mean) / std).astype(np.float32)
    y_mean, y_std = y_train.mean(), y_train.std()
    t_train = ((y_train - y_mean) / y_std).astype(np.float32)

    torch.manual_seed(0)
    init = _models.MLP(n_features_in=10, n_outputs=1, hidden=32)
    reg = cls(
        module=init, n_workers=2, n_epochs=30, batch_size=32, lr=0.01,
        random_state=0)
    reg.fit(X_train, t_train)
    ours = r2_score(y_test, reg.predict(X_test) * y_std + y_mean)

    reference = _reference(init, X_train, t_train[:, None],
                           torch.nn.MSELoss(), torch.optim.SGD, epochs=30,
                           batch_size=32, seed=0, lr=0.01)
    with torch.no_grad():
        pred = reference(torch.from_numpy(X_test))[:, 0].numpy()
    theirs = r2_score(y_test, pred * y_std + y_mean)
    print(f"{cls.__name__} diabetes R2: ours {ours:.4f}, "
          f"single-process {theirs:.4f}")
    assert abs(ours - theirs) <= 0.05
