"""Lower-precision merge payloads (``merge_precision="bf16"``).

Compared with plain PyTorch computed by hand: replicas trained by the
reference loop, their updates from the global model rounded to bfloat16
by hand, weighted by their rows, averaged in float32 and added to the
global model (then, with an outer optimizer, its step on the
pseudo-gradient). The same replicas averaged without the rounding show
that the rounding is real and no larger than bfloat16's.
"""

import copy
import re

import numpy as np
import pytest
import torch

from sklearn.base import clone

from dislib_nn import (AsyncEpochAveragingClassifier,
                       AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training.merge import _payload
from tests.conftest import use_backend
from tests.training import _models, _reference as ref

ATOL = 1e-6         # on the weights, against the computation by hand
#: bfloat16's unit roundoff: round-to-nearest moves a value by at most
#: this fraction of it (8 significant bits).
BF16_U = 2.0 ** -8
DILOCO = {"outer_optimizer": torch.optim.SGD, "outer_optimizer__lr": 0.7,
          "outer_optimizer__momentum": 0.9,
          "outer_optimizer__nesterov": True}

_data = ref.regression_rows
_init = ref.small_mlp


def _parts(X, y, n_workers=2):
    return ref.split_like_blocks(torch.from_numpy(X),
                                 torch.from_numpy(y)[:, None], n_workers)


def _params(**extra):
    # 89 rows: 45 and 44, six batches of 8 each.
    params = dict(module=_init(), n_workers=2, shuffle="none", n_epochs=2,
                  batch_size=8, lr=0.05, optimizer__momentum=0.9)
    params.update(extra)
    return params


def _by_hand(init, parts, n_epochs, batch_size, lr, momentum=0.9,
             shares=1, sync_every=1, rounded=True, outer=None,
             average_optims=False):
    """Replicas trained by the reference loop, merged by hand after each
    round (a share of the epoch, or ``sync_every`` epochs): their
    updates from the global model (rounded to bfloat16 when
    ``rounded``) weighted by their rows, averaged in float32 and added
    to the global model; with ``outer`` (an ``SGD`` keyword dict), an
    outer SGD step on ``previous - averaged``; with ``average_optims``
    the optimizer states averaged by rows too (in float32: they are no
    update).

    Returns the global model and, for the last merge, the largest
    weighted mean of the updates' magnitudes and the model the same
    replicas give averaged without rounding.
    """
    model = copy.deepcopy(init)
    replicas = [copy.deepcopy(init) for _ in parts]
    opts = [torch.optim.SGD(r.parameters(), lr=lr, momentum=momentum)
            for r in replicas]
    names = [n for n, _ in model.named_parameters()]
    if outer is not None:
        outer_params = [p.detach().clone().requires_grad_(True)
                        for p in model.parameters()]
        outer_opt = torch.optim.SGD(outer_params, **outer)
    criterion = torch.nn.MSELoss()
    last = None
    for epoch in range(n_epochs):
        for k in range(shares):
            counts = []
            for r, opt, (x, y) in zip(replicas, opts, parts):
                n_batches = -(-len(x) // batch_size)
                rows = slice(k * n_batches // shares * batch_size,
                             (k + 1) * n_batches // shares * batch_size)
                ref.train(r, opt, criterion, x[rows], y[rows], batch_size,
                          lr)
                counts.append(len(x[rows]))
            if shares == 1 and (epoch + 1) % sync_every \
                    and epoch != n_epochs - 1:
                continue
            previous = model.state_dict()
            updates = [{key: value - previous[key]
                        for key, value in r.state_dict().items()}
                       for r in replicas]
            exact = ref.average(updates, counts)
            magnitude = ref.average([{k: d.abs() for k, d in u.items()}
                                     for u in updates], counts)
            if rounded:
                updates = [{key: d.to(torch.bfloat16).to(torch.float32)
                            for key, d in u.items()} for u in updates]
            mean = ref.average(updates, counts)
            merged = {key: previous[key] + mean[key] for key in previous}
            last = (magnitude,
                    {key: previous[key] + exact[key] for key in previous})
            if outer is not None:
                ref.outer_step(outer_opt, outer_params, names, merged)
            model.load_state_dict(merged)
            if average_optims:
                optim = ref._average_optimizers(opts, counts)
            for r, opt in zip(replicas, opts):
                r.load_state_dict(merged)
                if average_optims:
                    opt.load_state_dict(copy.deepcopy(optim))
    return model, last


@pytest.mark.parametrize("sync_every", [1, 1 / 3])
def test_bf16_updates_averaged_in_fp32_equal_the_computation_by_hand(
        backend, sync_every):
    X, y = _data(89)
    shares = 1 if sync_every == 1 else 3
    est = SyncEpochAveragingRegressor(
        **_params(sync_every=sync_every, merge_precision="bf16")).fit(X, y)
    assert [h["n_merges"] for h in est.history_] == [shares] * 2
    assert [h["worker_samples"] for h in est.history_] == [[45, 44]] * 2
    init, parts = _init(), _parts(X, y)
    expected, (magnitude, unrounded) = _by_hand(
        init, parts, n_epochs=2, batch_size=8, lr=0.05, shares=shares)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=0)
    # The rounding is real: the fp32 average is not the model...
    fp32, _ = _by_hand(init, parts, n_epochs=2, batch_size=8, lr=0.05,
                       shares=shares, rounded=False)
    got = est.module_.state_dict()
    assert max(float((got[k] - v).abs().max())
               for k, v in fp32.state_dict().items()) > 1e-7
    # ... but within bfloat16's rounding of it: the last merge's
    # replicas averaged without rounding are at most u times their
    # updates' mean magnitude away, entry by entry.
    for key, value in unrounded.items():
        assert bool(((got[key] - value).abs()
                     <= BF16_U * magnitude[key] + 1e-7).all()), key


def test_averaged_optimizer_states_stay_fp32():
    X, y = _data(89)
    est = SyncEpochAveragingRegressor(**_params(
        sync_every=1 / 3, optimizer_state="average",
        merge_precision="bf16")).fit(X, y)
    expected, _ = _by_hand(_init(), _parts(X, y), n_epochs=2,
                           batch_size=8, lr=0.05, shares=3,
                           average_optims=True)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=0)
    for buffer in est.optimizer_states_[0]["state"].values():
        assert buffer["momentum_buffer"].dtype == torch.float32


@pytest.mark.parametrize("sync_every", [1, 1 / 3])
def test_asynchronous_at_max_lag_0_is_the_synchronous_bf16_model(
        sync_every):
    X, y = _data(89)
    params = _params(sync_every=sync_every, merge_precision="bf16")
    sync = SyncEpochAveragingRegressor(**params).fit(X, y)
    lag0 = AsyncEpochAveragingRegressor(max_lag=0, **params).fit(X, y)
    assert all(m["staleness"] == 0.0 for h in lag0.history_
               for m in h["merges"])
    ref.assert_same_model(lag0.module_, sync.module_, atol=1e-5, rtol=0)


def test_an_outer_optimizer_steps_on_the_bf16_average():
    X, y = _data(89)
    est = SyncEpochAveragingRegressor(
        **_params(n_epochs=3, merge_precision="bf16", **DILOCO)).fit(X, y)
    expected, _ = _by_hand(
        _init(), _parts(X, y), n_epochs=3, batch_size=8, lr=0.05,
        outer={"lr": 0.7, "momentum": 0.9, "nesterov": True})
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("cls, extra", [
    (SyncEpochAveragingRegressor, {}),
    (AsyncEpochAveragingRegressor, {"max_lag": 0})])
def test_epochs_within_a_round_train_on_from_the_fp32_replica(cls, extra):
    # sync_every=2: the first epoch of each round returns its full fp32
    # state, which the replica continues from; the second its bf16
    # update from the model the round started from.
    X, y = _data(89)
    est = cls(**_params(n_epochs=4, sync_every=2, merge_precision="bf16",
                        **extra)).fit(X, y)
    assert [h["merged"] for h in est.history_] == [False, True] * 2
    expected, _ = _by_hand(_init(), _parts(X, y), n_epochs=4,
                           batch_size=8, lr=0.05, sync_every=2)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=0)


def test_a_single_replica_adds_its_bf16_update():
    X, y = _data(45)
    est = SyncEpochAveragingRegressor(
        **_params(n_workers=1, merge_precision="bf16")).fit(X, y)
    expected, _ = _by_hand(_init(), _parts(X, y, 1), n_epochs=2,
                           batch_size=8, lr=0.05)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=0)


# ------------------------------------------ buffers, divergence, balance
def _classification(n=96):
    from sklearn.datasets import make_classification
    X, y = make_classification(n_samples=n, n_features=4, n_informative=3,
                               n_redundant=0, n_classes=3, random_state=0)
    return X.astype(np.float32), y


def _within_one_rounding(got, fp32, start):
    """``got`` is ``fp32`` up to the rounding of one merge's updates
    from ``start``: at most u times the largest update, entry by entry
    (integer entries equal)."""
    for key, value in fp32.items():
        if not value.is_floating_point():
            assert torch.equal(got[key], value), key
            continue
        bound = BF16_U * (value - start[key]).abs().max() * 2 + 1e-6
        assert float((got[key] - value).abs().max()) <= bound, key


@pytest.mark.parametrize("cls", [SyncEpochAveragingClassifier,
                                 AsyncEpochAveragingClassifier])
def test_batch_norm_buffers_and_balance_weights_with_bf16(cls):
    # One epoch, one merge, an even first deal with balance=True (every
    # replica weighs the same): the bf16 model is the fp32 one up to the
    # rounding of that merge's updates; num_batches_tracked is an
    # integer and travels as it is.
    X, y = _classification()
    torch.manual_seed(0)
    init = _models.Classifier(hidden=8)
    params = dict(module=init, n_workers=2, n_epochs=1, batch_size=16,
                  lr=0.1, balance=True, random_state=0)
    fp32 = cls(**params).fit(X, y)
    bf16 = cls(merge_precision="bf16", **params).fit(X, y)
    got = bf16.module_.state_dict()
    want = fp32.module_.state_dict()
    assert got["norm.num_batches_tracked"].dtype == torch.int64
    assert max(float((got[k] - v).abs().max()) for k, v in want.items()
               if v.is_floating_point()) > 1e-7
    _within_one_rounding(got, want, init.state_dict())


@pytest.fixture
def sequential():
    use_backend("sequential")
    yield
    use_backend("local")


def test_a_diverged_replica_is_left_out_of_the_bf16_merge(sequential,
                                                          tmp_path):
    # On the sequential backend worker 1's second training forward is
    # call 6 (worker 0 makes calls 1 to 4): its epoch turns NaN and is
    # skipped, so the model is worker 0's bf16 update alone, added to
    # the start.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(32, 4)).astype(np.float32)
    y = X.sum(axis=1).astype(np.float32)
    torch.manual_seed(0)
    init = _models.NaNOnCalls(counter=str(tmp_path / "calls"), first=6,
                              last=6)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", batch_size=4,
        n_epochs=1, lr=0.01, on_failure="skip",
        merge_precision="bf16").fit(X, y)
    assert est.history_[0]["diverged"] == [1]
    clean = copy.deepcopy(init)
    clean.counter = ""
    expected, _ = _by_hand(clean, _parts(X, y)[:1], n_epochs=1,
                           batch_size=4, lr=0.01, momentum=0.0)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=0)


# ------------------------------- what holds the fp32 global model only
# max_lag=0: a fit that ends starts the next from the global model, as
# the asynchronous rounds of one fit do only when none runs ahead.
@pytest.mark.parametrize("cls, extra", [
    (SyncEpochAveragingRegressor, {}),
    (AsyncEpochAveragingRegressor, {"max_lag": 0})])
def test_warm_start_and_resume_continue_the_bf16_fit(cls, extra, tmp_path):
    X, y = _data(89)
    bf16 = dict(merge_precision="bf16", **extra)
    whole = cls(**_params(n_epochs=2, **bf16)).fit(X, y)
    warm = cls(**_params(n_epochs=1, warm_start=True, **bf16)).fit(
        X, y).fit(X, y)
    ref.assert_same_model(warm.module_, whole.module_, atol=1e-7, rtol=0)
    cls(**_params(n_epochs=1, checkpoint_dir=tmp_path, **bf16)).fit(X, y)
    resumed = cls(**_params(n_epochs=2, checkpoint_dir=tmp_path,
                            **bf16)).fit(X, y, resume=True)
    ref.assert_same_model(resumed.module_, whole.module_, atol=1e-7,
                          rtol=0)


def test_a_saved_bf16_fit_loads_and_trains_on_alike(tmp_path):
    X, y = _data(89)
    original = SyncEpochAveragingRegressor(
        **_params(merge_precision="bf16")).fit(X, y)
    original.save(tmp_path / "model.pt")
    loaded = SyncEpochAveragingRegressor(
        **_params(merge_precision="bf16")).load(tmp_path / "model.pt")
    ref.assert_same_model(loaded.module_, original.module_, atol=0, rtol=0)
    original.partial_fit(X, y)
    loaded.partial_fit(X, y)
    ref.assert_same_model(loaded.module_, original.module_, atol=1e-7,
                          rtol=0)


# ------------------------------------------------------ the parameter
ESTIMATORS = [SyncEpochAveragingClassifier, SyncEpochAveragingRegressor,
              AsyncEpochAveragingClassifier, AsyncEpochAveragingRegressor]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_every_estimator_takes_merge_precision(cls):
    assert cls().get_params()["merge_precision"] == "fp32"
    est = clone(cls(merge_precision="bf16"))
    assert est.get_params()["merge_precision"] == "bf16"


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("value", ["fp16", "BF16", None, True])
def test_bad_merge_precision_is_named_before_any_task(cls, value):
    X, y = _classification(20)
    est = cls(module=_models.MLP, n_workers=2, merge_precision=value)
    with pytest.raises(InvalidParameterError, match=(
            r"The 'merge_precision' parameter of " + cls.__name__
            + r" must be a str among \{'fp32', 'bf16'\}. Got "
            + re.escape(repr(value)) + " instead.")):
        est.fit(X, y)
    assert not hasattr(est, "module_")


# ------------------------------------------------------ the payload
def test_the_payload_is_bf16_updates_and_integers_as_trained():
    base = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3),
            "h": torch.tensor([1.0], dtype=torch.float64)}
    trained = {"w": torch.tensor([1.5, 2.0 + 1 / 3]), "n": torch.tensor(5),
               "h": torch.tensor([1.25], dtype=torch.float64)}
    delta = _payload.encode(trained, base, "bf16")
    assert isinstance(delta, _payload.Delta)
    assert list(delta.entries) == ["w", "n", "h"]
    assert delta.entries["w"].dtype == torch.bfloat16
    assert delta.entries["h"].dtype == torch.bfloat16
    assert torch.equal(delta.entries["n"], torch.tensor(5))
    wide = _payload.widened(delta)
    assert wide["w"].dtype == torch.float32
    expected = (trained["w"] - base["w"]).to(torch.bfloat16).float()
    assert torch.equal(wide["w"], expected)
    back = _payload.apply(base, wide)
    assert back["h"].dtype == torch.float64
    assert torch.equal(back["w"], base["w"] + expected)
    assert torch.equal(back["n"], torch.tensor(5))
    with pytest.raises(ValueError, match="Got precision='fp32'"):
        _payload.encode(trained, base, "fp32")
