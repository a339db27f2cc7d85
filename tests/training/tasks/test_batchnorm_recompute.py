"""BatchNorm statistics recomputed on the final model (recompute_batchnorm).

The library's recomputed buffers are compared with a computation by hand
in plain PyTorch: the same fit with ``recompute_batchnorm=False`` (same
``random_state``, so the same merged weights), its model run over each
worker's rows (``shuffle="none"``: the blocks as an array is split) in
train mode with reset statistics and ``momentum=None``, averaged by batch
counts. Every other entry must be the ``False`` fit's exactly, wherever
two fits give the same weights (everywhere but the asynchronous
estimators on the local backend, whose merges run in the order workers
finish: there the by-hand recompute runs on the fit's own weights, which
the recompute leaves as they are).
"""

import copy
import re

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification

from dislib_nn import (AsyncEpochAveragingClassifier,
                       AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from dislib_nn.exceptions import InvalidParameterError
from tests.training import _models, _reference as ref
from tests.training._faults import Recorder

BATCH = 8
# 130 rows: with 2 workers 65 each, with 4 workers 33, 33, 32, 32, so
# some workers end with a batch of one row, which BatchNorm leaves out.
X, Y = make_classification(n_samples=130, n_features=4, n_informative=3,
                           n_redundant=0, n_classes=3, random_state=0)
X = X.astype(np.float32)
Y_REG = (X[:, 0] - 0.5 * X[:, 1]).astype(np.float32)
BN_KEYS = ("norm.running_mean", "norm.running_var",
           "norm.num_batches_tracked")

ESTIMATORS = {
    "sync-classifier": (SyncEpochAveragingClassifier, Y, {}),
    "async-classifier": (AsyncEpochAveragingClassifier, Y, {}),
    "sync-regressor": (SyncEpochAveragingRegressor, Y_REG,
                       {"module__n_classes": 1}),
    "async-regressor": (AsyncEpochAveragingRegressor, Y_REG,
                        {"module__n_classes": 1}),
}


def _fit(name, n_workers, recompute, **params):
    cls, y, extra = ESTIMATORS[name]
    base = dict(module=_models.Classifier, n_workers=n_workers, n_epochs=2,
                batch_size=BATCH, shuffle="none", lr=0.05, random_state=0,
                recompute_batchnorm=recompute)
    return cls(**dict(base, **extra, **params)).fit(X, y)


def _by_hand(model, parts, batch_size):
    """The BatchNorm buffers of ``model`` recomputed over ``parts``."""
    found = []
    for x, _ in parts:
        replica = copy.deepcopy(model).train()
        for layer in replica.modules():
            if isinstance(layer, torch.nn.BatchNorm1d):
                layer.reset_running_stats()
                layer.momentum = None
        x = torch.from_numpy(x)
        n = len(x) - (1 if len(x) % batch_size == 1 else 0)
        with torch.no_grad():
            for start in range(0, n, batch_size):
                replica(x[start:min(start + batch_size, n)])
        batches = -(-n // batch_size)
        assert int(replica.norm.num_batches_tracked) == batches
        found.append((replica.norm, batches))
    total = sum(b for _, b in found)
    return {
        "norm.running_mean": sum(m.running_mean.double() * b
                                 for m, b in found) / total,
        "norm.running_var": sum(m.running_var.double() * b
                                for m, b in found) / total,
        "norm.num_batches_tracked": torch.tensor(total)}


def _assert_recomputed(est, plain, n_workers, same_weights=True):
    """``est``'s BatchNorm buffers are the by-hand recompute of its model
    over the workers' rows; with ``same_weights`` every other entry is
    ``plain``'s (the fit without the recompute) exactly."""
    expected = _by_hand(est.module_, ref.split_like_blocks(X, Y, n_workers),
                        BATCH)
    got, before = est.module_.state_dict(), plain.module_.state_dict()
    assert list(got) == list(before)
    for key in BN_KEYS:
        torch.testing.assert_close(got[key], expected[key].to(got[key].dtype),
                                   atol=1e-6, rtol=0, msg=key)
    if same_weights:
        for key in got:
            if key not in BN_KEYS:
                assert torch.equal(got[key], before[key]), key
        # The recompute changed the buffers: the test is not vacuous.
        assert not torch.allclose(got["norm.running_var"],
                                  before["norm.running_var"])


def _deterministic(backend, name):
    """Whether two fits give the same weights: the asynchronous merges
    run in the order workers finish, fixed only on the sequential
    backend."""
    return backend == "sequential" or name.startswith("sync")


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@pytest.mark.parametrize("n_workers", [2, 4])
def test_recomputed_statistics_match_plain_pytorch(backend, name,
                                                   n_workers):
    plain = _fit(name, n_workers, False)
    est = _fit(name, n_workers, True)
    _assert_recomputed(est, plain, n_workers,
                       same_weights=_deterministic(backend, name))
    assert [h["batchnorm_recomputed"] for h in est.history_] == [False, True]
    assert not any(h["batchnorm_recomputed"] for h in plain.history_)
    assert not est.module_.training


def test_recompute_follows_early_stopping_choice(backend):
    # Without validation data early stopping watches the training loss and
    # keeps the best model: the recompute starts from that one.
    params = dict(n_epochs=8, early_stopping=True, patience=1, lr=1.0)
    plain = _fit("sync-classifier", 4, False, **params)
    est = _fit("sync-classifier", 4, True, **params)
    losses = [h["train_loss"] for h in est.history_]
    # It stopped, and kept a model from before the last epoch.
    assert len(losses) < 8 and int(np.argmin(losses)) < len(losses) - 1
    _assert_recomputed(est, plain, 4)
    assert est.history_[-1]["batchnorm_recomputed"]


def test_every_fit_ends_with_a_recompute(backend):
    plain = _fit("sync-classifier", 4, False, warm_start=True)
    est = _fit("sync-classifier", 4, True, warm_start=True)
    for model in (plain, est):
        model.fit(X, Y)
        model.partial_fit(X, Y)
    flags = [h["batchnorm_recomputed"] for h in est.history_]
    assert flags == [False, True, False, True, True]
    # In train mode BatchNorm normalises by batch statistics, never by the
    # buffers: the weights stay the plain fit's, and the last recompute
    # is the by-hand one on them.
    _assert_recomputed(est, plain, 4)


def test_a_resumed_fit_ends_with_a_recompute(backend, tmp_path):
    # The checkpoint after the last epoch holds the model before the
    # recompute: resuming from it, both fits run the same third epoch.
    fits = []
    for recompute in (False, True):
        folder = tmp_path / str(recompute)
        est = _fit("sync-classifier", 4, recompute, checkpoint_dir=folder)
        est.set_params(n_epochs=3)
        fits.append(est.fit(X, Y, resume=True))
    plain, est = fits
    assert [h["batchnorm_recomputed"] for h in est.history_] == \
        [False, False, True]
    _assert_recomputed(est, plain, 4)


@pytest.mark.parametrize("n_workers, expected", [(2, False), (4, True)])
def test_auto_is_on_from_four_workers(backend, n_workers, expected):
    plain = _fit("sync-classifier", n_workers, False)
    est = _fit("sync-classifier", n_workers, "auto")
    assert est.history_[-1]["batchnorm_recomputed"] is expected
    if expected:
        _assert_recomputed(est, plain, n_workers)
    else:
        for key, value in plain.module_.state_dict().items():
            assert torch.equal(est.module_.state_dict()[key], value), key


@pytest.mark.parametrize("recompute", [True, "auto"])
def test_nothing_to_recompute_without_batch_norm(backend, recompute):
    plain = _fit("sync-classifier", 4, False, module__batch_norm=False)
    est = _fit("sync-classifier", 4, recompute, module__batch_norm=False)
    assert not any(h["batchnorm_recomputed"] for h in est.history_)
    for key, value in plain.module_.state_dict().items():
        assert torch.equal(est.module_.state_dict()[key], value), key


def test_verbose_says_when_it_runs(backend, capsys):
    _fit("sync-classifier", 4, True, verbose=1)
    out = capsys.readouterr().out
    assert "recomputing the BatchNorm statistics of the final model over " \
           "epoch 2's rows: 4 tasks and one merge" in out
    _fit("sync-classifier", 2, "auto", verbose=1)
    assert "BatchNorm" not in capsys.readouterr().out


@pytest.mark.parametrize("value", ["yes", 1, None, "Auto"])
def test_bad_value_is_refused_before_any_task(backend, tmp_path, value):
    log = tmp_path / "forwards.log"
    est = SyncEpochAveragingClassifier(
        module=Recorder, module__log=str(log), n_workers=2, n_epochs=1,
        batch_size=4, random_state=0, recompute_batchnorm=value)
    message = (f"The 'recompute_batchnorm' parameter of "
               f"SyncEpochAveragingClassifier must be an instance of "
               f"'bool' or a str among {{'auto'}}. Got {value!r} instead.")
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        est.fit(X[:20], Y[:20] % 2)
    assert not log.exists()
    assert not hasattr(est, "module_")
