"""``merge="sharded"``: each worker merges one shard of the model.

The shards are merged with the tree's arithmetic in the tree's order, so
a sharded fit must give the tree's model bit for bit, on every backend,
and the hand-written PyTorch loop's to float32 rounding.
"""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification

from dislib_nn import (SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor, runtime)
from dislib_nn.exceptions import TaskFailureWarning
from tests.training import _models, _reference as ref


def _classification(n=150):
    X, y = make_classification(n_samples=n, n_features=6, n_informative=4,
                               n_redundant=0, n_classes=3, random_state=2)
    return X.astype(np.float32), y


def _fit(merge, X, y, cls=SyncEpochAveragingClassifier, **kwargs):
    params = dict(module=_models.Classifier, module__n_features_in=6,
                  n_workers=3, n_epochs=3, batch_size=8, lr=0.05,
                  optimizer__momentum=0.9, random_state=0, merge=merge)
    params.update(kwargs)
    return cls(**params).fit(X, y)


def _assert_identical(a, b):
    sa, sb = a.module_.state_dict(), b.module_.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert sa[key].dtype == sb[key].dtype, key
        assert torch.equal(sa[key], sb[key]), key


@pytest.mark.parametrize("extra", [
    {},
    # Two merges an epoch, and the outer step on the joined shards.
    {"sync_every": 0.5, "outer_lr": 0.8, "outer_momentum": 0.5},
    {"sync_every": 2, "optimizer_state": "reset",
     "validation_fraction": 0.2},
    # The outer step without momentum: no buffer to shard.
    {"outer_lr": 1.5},
], ids=["defaults", "half-outer", "every2-reset-valid", "outer-lr"])
def test_a_sharded_merge_is_the_tree_s_bit_for_bit(backend, extra):
    X, y = _classification()
    tree = _fit("tree", X, y, **extra)
    sharded = _fit("sharded", X, y, **extra)
    _assert_identical(sharded, tree)
    assert [h["valid_score"] for h in sharded.history_] == \
        [h["valid_score"] for h in tree.history_]
    assert [h["n_merges"] for h in sharded.history_] == \
        [h["n_merges"] for h in tree.history_]
    # BatchNorm's integer counter rides whole in shard 0.
    assert sharded.module_.norm.num_batches_tracked.item() > 0


def test_sharded_replicas_average_like_the_hand_written_loop(local):
    X, y = _classification(n=103)
    torch.manual_seed(0)
    init = _models.Classifier(n_features_in=6, n_classes=3)
    est = SyncEpochAveragingClassifier(
        module=init, n_workers=3, shuffle="none", n_epochs=2,
        batch_size=10, lr=0.1, optimizer=torch.optim.Adam, merge="sharded")
    est.fit(X, y)
    parts = ref.split_like_blocks(torch.from_numpy(X), torch.from_numpy(y),
                                  3)
    expected = ref.epoch_averaging(
        init, parts, torch.nn.CrossEntropyLoss(), epochs=2, batch_size=10,
        lr=0.1, optimizer=torch.optim.Adam)
    ref.assert_same_model(est.module_, expected, atol=2e-5, rtol=1e-4)


def test_a_diverged_replica_is_left_out_of_every_shard(sequential,
                                                        tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(48, 4)).astype(np.float32)
    y = X.sum(axis=1).astype(np.float32)
    fits = {}
    for merge in ("tree", "sharded"):
        # Call 7 (2 forwards per worker and epoch: epoch 2's first
        # batch of worker 0) returns NaN; on_failure="skip" leaves it
        # out.
        (tmp_path / merge).mkdir()
        with pytest.warns(TaskFailureWarning, match="left 1 of 9"):
            fits[merge] = SyncEpochAveragingRegressor(
                module=_models.NaNOnCalls,
                module__counter=str(tmp_path / merge / "calls"),
                module__first=7, module__last=7, n_workers=3, batch_size=8,
                n_epochs=3, random_state=0, on_failure="skip",
                merge=merge).fit(X, y)
    assert [h["diverged"] for h in fits["sharded"].history_] == \
        [h["diverged"] for h in fits["tree"].history_] == [[], [0], []]
    _assert_identical(fits["sharded"], fits["tree"])
    assert all(bool(torch.isfinite(v).all()) for v in
               fits["sharded"].module_.state_dict().values())


@pytest.mark.parametrize("extra, joins", [
    ({}, 1),
    # Early stopping may keep any merged epoch's model: every epoch's
    # (the last epoch's is the fitted model).
    ({"early_stopping": True, "patience": 5}, 3),
], ids=["validation", "early-stopping"])
def test_validation_reads_the_shards_and_joins_no_model(local, extra,
                                                        joins):
    # Scoring each epoch reads the merged shards where they lie; the
    # whole model is joined for the fitted model, and for a callback
    # that may keep an epoch's.
    X, y = _classification()
    with runtime.count_tasks() as calls:
        fitted = _fit("sharded", X, y, validation_fraction=0.2, **extra)
    assert calls["_join"] == joins
    assert all(h["valid_score"] is not None for h in fitted.history_)
    tree = _fit("tree", X, y, validation_fraction=0.2, **extra)
    assert [h["valid_score"] for h in fitted.history_] == \
        [h["valid_score"] for h in tree.history_]
    _assert_identical(fitted, tree)


@pytest.mark.parametrize("extra", [
    {},
    # The sharded momentum buffer, joined into the checkpoint and the
    # carried state, and cut again by the next fit's first round.
    {"outer_lr": 0.8, "outer_momentum": 0.5},
], ids=["plain", "outer-momentum"])
def test_resume_and_warm_start_continue_a_sharded_fit_exactly(local,
                                                              tmp_path,
                                                              extra):
    X, y = _classification()
    whole = _fit("sharded", X, y, n_epochs=4, **extra)
    _fit("sharded", X, y, n_epochs=2, checkpoint_dir=tmp_path, **extra)
    resumed = SyncEpochAveragingClassifier(
        module=_models.Classifier, module__n_features_in=6, n_workers=3,
        n_epochs=4, batch_size=8, lr=0.05, optimizer__momentum=0.9,
        random_state=0, merge="sharded", checkpoint_dir=tmp_path, **extra)
    resumed.fit(X, y, resume=True)
    assert [h["epoch"] for h in resumed.history_] == [1, 2, 3, 4]
    _assert_identical(resumed, whole)
    warm = _fit("sharded", X, y, n_epochs=2, warm_start=True, **extra)
    warm.fit(X, y)              # epochs 3 and 4, from the carried state
    _assert_identical(warm, whole)
    if extra:
        tree = _fit("tree", X, y, n_epochs=4, **extra)
        _assert_identical(whole, tree)
        for key, value in tree.strategy_state_["velocity"].items():
            assert torch.equal(whole.strategy_state_["velocity"][key], value)


def test_the_sharded_momentum_buffer_is_released_once_joined(local,
                                                            monkeypatch):
    # Every round's buffer shards are released, the last ones once the
    # fit has joined them for what it carries out.
    from dislib_nn.training.strategies import _lifetimes, _sync
    released, made = set(), []
    delete = _lifetimes.delete_object
    monkeypatch.setattr(_lifetimes, "delete_object",
                        lambda obj: (released.add(id(obj)), delete(obj)))
    stepped = _sync._sharded.submit_sharded_merge_stepped

    def recorded(*args, **kwargs):
        model, velocity = stepped(*args, **kwargs)
        made.extend(velocity)
        return model, velocity
    monkeypatch.setattr(_sync._sharded, "submit_sharded_merge_stepped",
                        recorded)
    X, y = _classification()
    fitted = _fit("sharded", X, y, outer_lr=0.8, outer_momentum=0.5)
    assert len(made) == 3 * 3
    assert all(id(v) in released for v in made)
    assert set(fitted.strategy_state_) == {"velocity"}


def test_the_momentum_step_is_taken_on_the_shards(local):
    # No join and no separate step a round: each shard's merge takes
    # FedAvgM's step on its slice; the fitted model is joined once.
    X, y = _classification()
    with runtime.count_tasks() as calls:
        _fit("sharded", X, y, outer_lr=0.8, outer_momentum=0.5,
             sync_every=0.5)
    rounds = 3 * 2
    assert calls["_merge_shard_stepped"] == 3 * rounds
    assert calls["_merge_shard"] == calls["_momentum_step"] == 0
    assert calls["_join"] == 1 + 1    # the model, and the carried buffer
