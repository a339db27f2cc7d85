"""The asynchronous estimators: against the synchronous ones, against
plain PyTorch, and the staleness arithmetic the docs state."""

import copy
import re

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification, make_regression

from dislib_nn import (AsyncEpochAveragingClassifier,
                       AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor, runtime)
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.training.merge import _stale as sm
from tests.conftest import use_backend
from tests.training import _models, _reference as ref

ATOL = 1e-5
# Accuracy on the 150 training rows against plain PyTorch trained the
# same way from the same weights: within 0.1, 15 rows (a model that
# learned nothing scores about 0.4, plain PyTorch 0.84).
ACC_TOL = 0.1


def _classification(n=150):
    X, y = make_classification(n_samples=n, n_features=4, n_informative=3,
                               n_redundant=0, n_classes=3, random_state=0)
    return X.astype(np.float32), y


def _regression(n=90):
    X, y = make_regression(n_samples=n, n_features=4, noise=1.0,
                           random_state=0)
    return X.astype(np.float32), (y / 100).astype(np.float32)


def _assert_same(a, b, atol=ATOL):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        torch.testing.assert_close(sa[key], sb[key], atol=atol, rtol=1e-4,
                                   msg=key)


# ------------------------------------------------- against the estimators
@pytest.mark.parametrize("settings", [
    dict(shuffle="global", optimizer_state="keep"),
    dict(shuffle="local", optimizer_state="reset", n_workers=3),
    dict(shuffle="none", optimizer_state="average"),
    dict(optimizer_state="average", outer_lr=0.8, outer_momentum=0.5,
         sync_every=2, n_epochs=5),
    dict(validation_fraction=0.2, early_stopping=True, patience=2,
         n_epochs=8),
])
def test_max_lag_zero_is_the_synchronous_model(backend, settings):
    use_backend(backend)
    X, y = _classification()
    params = dict(module=_models.Classifier, n_epochs=4, batch_size=16,
                  lr=0.05, optimizer=torch.optim.Adam, n_workers=2,
                  random_state=0)
    params.update(settings)
    sync = SyncEpochAveragingClassifier(**params).fit(X, y)
    lag0 = AsyncEpochAveragingClassifier(max_lag=0, **params).fit(X, y)
    _assert_same(lag0.module_, sync.module_)
    assert [h["merged"] for h in lag0.history_] == \
        [h["merged"] for h in sync.history_]
    for a, s in zip(lag0.history_, sync.history_):
        assert a["train_loss"] == pytest.approx(s["train_loss"], rel=1e-6)
        assert all(m["staleness"] == 0 for m in a["merges"])


@pytest.mark.parametrize("max_lag", [0, 1, None])
def test_one_worker_is_plain_pytorch(max_lag):
    use_backend("local")
    X, y = _regression()
    torch.manual_seed(0)
    init = _models.MLP(n_features_in=4, n_outputs=1)
    est = AsyncEpochAveragingRegressor(
        module=init, n_workers=1, shuffle="none", n_epochs=3,
        batch_size=16, lr=0.05, optimizer__momentum=0.9, max_lag=max_lag)
    est.fit(X, y)
    expected = ref.single_process(
        init, torch.from_numpy(X), torch.from_numpy(y)[:, None],
        torch.nn.MSELoss(), epochs=3, batch_size=16, lr=0.05, momentum=0.9)
    _assert_same(est.module_, expected)
    sync = SyncEpochAveragingRegressor(
        module=init, n_workers=1, shuffle="none", n_epochs=3,
        batch_size=16, lr=0.05, optimizer__momentum=0.9).fit(X, y)
    _assert_same(est.module_, sync.module_)


def test_two_workers_with_max_lag_zero_match_hand_written_averaging():
    use_backend("local")
    X, y = _regression(n=91)
    torch.manual_seed(0)
    init = _models.MLP(n_features_in=4, n_outputs=1)
    est = AsyncEpochAveragingRegressor(
        module=init, n_workers=2, shuffle="none", n_epochs=3, batch_size=8,
        lr=0.05, max_lag=0, outer_lr=0.7, outer_momentum=0.5)
    est.fit(X, y)
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], 2)
    expected = ref.epoch_averaging(
        init, parts, torch.nn.MSELoss(), epochs=3, batch_size=8, lr=0.05,
        outer_lr=0.7, outer_momentum=0.5)
    _assert_same(est.module_, expected)


def test_unbounded_lag_keeps_the_synchronous_history_keys():
    use_backend("local")
    X, y = _classification()
    torch.manual_seed(0)
    init = _models.Classifier()
    clf = AsyncEpochAveragingClassifier(
        module=init, n_workers=2, n_epochs=4, batch_size=16,
        lr=0.05, optimizer=torch.optim.Adam, max_lag=None,
        validation_fraction=0.2, random_state=0).fit(X, y)
    sync_keys = {"epoch", "train_loss", "valid_loss", "valid_score", "lr",
                 "merged", "dur_s", "worker_samples", "worker_compute_s",
                 "diverged", "retried", "skipped", "errors", "tracebacks",
                 "schedule", "batchnorm_recomputed"}
    merges = []
    for record in clf.history_:
        assert set(record) == sync_keys | {"merges"}
        assert record["valid_score"] is not None
        assert sorted(m["worker"] for m in record["merges"]) == [0, 1]
        merges.extend(record["merges"])
    # Every merge ran once, in some order; a fresh one weighs its share.
    assert sorted(m["index"] for m in merges) == list(range(8))
    share = 60 / 120
    for m in merges:
        assert m["weight"] == pytest.approx(
            share * (1 + m["staleness"]) ** -0.5)
    single = ref.single_process(
        init, torch.from_numpy(X), torch.from_numpy(y),
        torch.nn.CrossEntropyLoss(), epochs=4, batch_size=16, lr=0.05,
        optimizer=torch.optim.Adam)
    single.eval()
    with torch.no_grad():
        theirs = (single(torch.from_numpy(X)).argmax(1).numpy() == y).mean()
    assert abs(clf.score(X, y) - theirs) <= ACC_TOL


@pytest.mark.parametrize("max_lag", [None, 0, 2])
@pytest.mark.parametrize("optimizer_state", ["keep", "average"])
def test_every_lag_releases_only_what_is_consumed(max_lag, optimizer_state):
    # A future released with delete_object cannot reach a task again
    # (the runtime raises): long chains with every option on show that
    # the strategy releases only what no later round reads.
    # Its accuracy is compared with the same run on the sequential
    # backend (merges in the order submitted). Here merges follow task
    # timings and every option stirs them: over repeated runs the local
    # fit scored from 0.09 below to 0.14 above the sequential one (0.63
    # to 0.66; a model that learned nothing scores about 0.4), so it
    # must not fall more than 0.15 below it.
    X, y = _classification()

    def run():
        clf = AsyncEpochAveragingClassifier(
            module=_models.Classifier, n_workers=3, n_epochs=7,
            batch_size=16, lr=0.05, optimizer=torch.optim.Adam,
            max_lag=max_lag, sync_every=2, outer_lr=0.8,
            outer_momentum=0.5, optimizer_state=optimizer_state,
            validation_fraction=0.2, warm_start=True, random_state=0)
        clf.fit(X, y).fit(X, y)
        clf.partial_fit(X, y)
        return clf

    try:
        use_backend("sequential")
        yardstick = run()
    finally:
        use_backend("local")
    clf = run()
    assert clf.n_epochs_ == 15
    assert clf.score(X, y) >= yardstick.score(X, y) - 0.15


@pytest.mark.parametrize("max_lag, reads", [
    # One task folds each round and returns the next round's start.
    (0, {"_fold_round": 6}),
    # Each worker's start picked from the 3 merges of the round before
    # (from the third round on), and a fresh copy from every merge.
    (1, {"_freshest": 3 * 4, "_fold": 18})])
def test_what_each_lag_reads_to_start_a_round(max_lag, reads):
    """3 workers, 3 epochs of two rounds each (6 rounds, 18 merges). With
    no lag a round costs one task, which folds its replicas and returns
    the next start (2P models moved, not one task reading every
    worker's merge per worker, P * P), and the model is still the
    synchronous one."""
    X, y = _classification()
    params = dict(module=_models.Classifier, n_workers=3, n_epochs=3,
                  batch_size=16, lr=0.05, sync_every=0.5, random_state=0)
    use_backend("sequential")
    try:
        with runtime.count_tasks() as calls:
            lagged = AsyncEpochAveragingClassifier(max_lag=max_lag,
                                                   **params).fit(X, y)
        sync = SyncEpochAveragingClassifier(**params).fit(X, y)
    finally:
        use_backend("local")
    names = ("_freshest", "_fold", "_fold_round")
    assert {k: calls[k] for k in names if calls[k]} == reads
    if max_lag == 0:
        _assert_same(lagged.module_, sync.module_)


# ------------------------------------------------ the arithmetic, no tasks
def test_a_stale_merge_weighs_less_than_a_fresh_one():
    fresh = sm.merge_weight(50, 100, sm.staleness(50, 50, 100), 0.5)
    stale = sm.merge_weight(50, 100, sm.staleness(150, 50, 100), 0.5)
    assert sm.staleness(50, 50, 100) == 0
    assert sm.staleness(150, 50, 100) == 1.0
    assert fresh == 0.5 and stale == pytest.approx(0.5 / 2 ** 0.5)
    assert sm.merge_weight(50, 100, 1.0, 0.0) == fresh  # discount off


def test_hand_computed_sequence_of_merges_gives_the_documented_weights():
    # docs/strategies.md: tau = max(0, moved - (N - n)) / N and
    # weight = n / N * (1 + tau) ** -k. N = 100 rows: worker 0 has 60,
    # worker 1 has 40; worker 0 merges twice before worker 1's first.
    got = sm.replay([(0, 60), (0, 60), (1, 40), (0, 60), (1, 40)],
                    n_rows=100, exponent=0.5)
    expected = [
        (0, 0.0, 0.6),          # nothing moved since the start
        (0, 0.0, 0.6),          # its own snapshot is current
        # worker 1 started at 0; 120 rows moved, a round would merge 60
        (1, 0.6, 0.4 * 1.6 ** -0.5),
        # worker 0's snapshot is at 120; 40 rows moved (worker 1's)
        (0, 0.0, 0.6),
        # worker 1's snapshot is at 160; 60 moved (worker 0's)
        (1, 0.0, 0.4),
    ]
    assert [(m["worker"], m["staleness"]) for m in got] == \
        [(w, pytest.approx(t)) for w, t, _ in expected]
    assert [m["weight"] for m in got] == \
        pytest.approx([w for _, _, w in expected])


def test_folds_of_one_round_are_the_weighted_mean():
    torch.manual_seed(0)
    start = {"w": torch.randn(3, 2), "n": torch.tensor(4)}
    trained = [{"w": torch.randn(3, 2), "n": torch.tensor(4 + i)}
               for i in range(3)]
    counts = [10, 30, 60]
    rules = sm.FoldRules(100, 3, 0.5, 1.0, 0.0, ["w"], False)
    glob = sm.new_global(start)
    records = [sm.fold(glob, start, 0, t, n, rules)
               for t, n in zip(trained, counts)]
    # Each started from the same model: none is stale.
    assert [r.weight for r in records] == [0.1, 0.3, 0.6]
    mean = ref.average([t for t in trained], counts)
    torch.testing.assert_close(glob.state["w"], mean["w"])
    assert glob.state["n"].item() == 6       # integers: the maximum
    assert glob.progress == 100


def test_fold_applies_the_delta_not_the_model():
    start = {"w": torch.zeros(2)}
    glob = sm.new_global({"w": torch.ones(2)})
    rules = sm.FoldRules(10, 2, 0.0, 1.0, 0.0, ["w"], False)
    sm.fold(glob, start, 0, {"w": torch.full((2,), 4.0)}, 5, rules)
    # global + 5/10 * (trained - start); dislib 1.0's (global + worker)/2
    # would give 2.5.
    torch.testing.assert_close(glob.state["w"], torch.full((2,), 3.0))


def test_stale_folds_keep_running_variances_positive():
    # A stale worker started from a variance of 1.0 that the global model
    # has since moved to 0.1; it trained to 0.2. Its delta (-0.8), added
    # at weight 0.5 to 0.1, gave -0.3: no longer a variance.
    rules = sm.FoldRules(10, 2, 0.0, 1.0, 0.0, ["w"], False)
    glob = sm.new_global({"w": torch.zeros(1), "var": torch.full((1,), 0.1),
                          "n": torch.tensor(3)})
    stale = {"w": torch.zeros(1), "var": torch.ones(1), "n": torch.tensor(1)}
    trained = {"w": torch.ones(1), "var": torch.full((1,), 0.2),
               "n": torch.tensor(5)}
    sm.fold(glob, stale, 0, trained, 5, rules)
    torch.testing.assert_close(glob.state["var"], torch.full((1,), 0.2))
    assert glob.state["n"].dtype == torch.int64
    assert glob.state["n"].item() == 5
    # The round's second merge: the weighted mean of the two values.
    other = {"w": torch.ones(1), "var": torch.full((1,), 0.6),
             "n": torch.tensor(4)}
    sm.fold(glob, stale, 0, other, 5, rules)
    torch.testing.assert_close(glob.state["var"], torch.full((1,), 0.4))


@pytest.mark.parametrize("optimizer_state", ["keep", "average"])
def test_asynchronous_merges_stay_valid_states(optimizer_state):
    # Any order of stale merges: every buffer and averaged optimizer
    # state is a convex mix of the replicas' (variances, Adam's second
    # moments stay >= 0), and integer entries stay integers.
    gen = torch.Generator().manual_seed(0)
    start = {"w": torch.randn(4, generator=gen), "var": torch.rand(4),
             "n": torch.tensor(0)}
    rules = sm.FoldRules(40, 4, 0.5, 1.0, 0.0, ["w"],
                         optimizer_state == "average")
    glob = sm.new_global(start, {"state": {0: {"exp_avg_sq": torch.zeros(4),
                                               "step": torch.tensor(0.0)}},
                                 "param_groups": [{"params": [0]}]})
    snapshots = [glob.snapshot()] * 4
    for merge in range(24):
        worker = int(torch.randint(4, (1,), generator=gen))
        state, optim, info = snapshots[worker]
        # Statistics that shrink after a few merges: stale workers hold
        # snapshots of large ones.
        scale = 4.0 if merge < 6 else 0.01
        trained = {"w": state["w"] + torch.randn(4, generator=gen),
                   "var": torch.rand(4, generator=gen) * scale,
                   "n": state["n"] + 3}
        trained_optim = {"state": {0: {
            "exp_avg_sq": torch.rand(4, generator=gen) * scale,
            "step": torch.tensor(float(merge))}},
            "param_groups": [{"params": [0]}]}
        sm.fold(glob, state, info.progress, trained, 10, rules,
                trained_optim)
        snapshots[worker] = glob.snapshot()
        assert bool((glob.state["var"] >= 0).all())
        assert not glob.state["n"].is_floating_point()
        if glob.optim:
            assert bool((glob.optim["0.exp_avg_sq"] >= 0).all())


# ---------------------------------------------------------------- balance
@pytest.mark.parametrize("cls", [SyncEpochAveragingRegressor,
                                 AsyncEpochAveragingRegressor])
def test_balance_deals_more_rows_to_the_faster_worker(cls):
    # The hook (tests/training/_models.py) slows worker 1 by counting
    # module builds, which needs tasks to run in submission order.
    use_backend("sequential")
    try:
        X, y = _regression(n=400)
        dealt = {}
        for balance in (False, True):
            _models.SlowOddReplica.builds = 0
            # 20 ms per batch (0.4 s per epoch of 200 rows): far above
            # what a loaded machine adds to the fast worker's 20 batches.
            est = cls(module=_models.SlowOddReplica, module__delay=0.02,
                      n_workers=2, n_epochs=4, batch_size=10, lr=0.01,
                      random_state=0, balance=balance).fit(X, y)
            dealt[balance] = [h["worker_samples"] for h in est.history_]
    finally:
        use_backend("local")
    assert all(a == b for a, b in dealt[False])
    fast, slow = dealt[True][-1]
    assert fast > slow > 0 and fast + slow == 400
    # The first epoch has no measurement yet: it is dealt evenly.
    assert dealt[True][0] == [200, 200]


def _linear_reference(start, rows, batch_size, lr):
    """Plain PyTorch: epoch after epoch, a replica per worker trains from
    the merged model on its rows (all-zero inputs, targets 1), and the
    replicas are averaged with equal weights."""
    model = torch.nn.Linear(4, 1)
    model.load_state_dict(start)
    for epoch_rows in rows:
        states = []
        for n in epoch_rows:
            replica = copy.deepcopy(model)
            opt = torch.optim.SGD(replica.parameters(), lr=lr)
            ref.train(replica, opt, torch.nn.MSELoss(), torch.zeros(n, 4),
                      torch.ones(n, 1), batch_size, lr)
            states.append(replica.state_dict())
        model.load_state_dict(ref.average(states, [1] * len(states)))
    return model


@pytest.mark.parametrize("cls, extra", [
    (SyncEpochAveragingRegressor, {}),
    (AsyncEpochAveragingRegressor, {"max_lag": 0})])
def test_balance_merges_every_replica_alike(cls, extra):
    # The deal is uneven for speed only: the merge must not weigh the
    # faster worker's replica by its rows. With all-zero inputs every
    # row's gradient is the same, so the model depends on the rows per
    # worker (read back from history_) and not on which rows they were.
    use_backend("sequential")
    try:
        _models.SlowOddReplica.builds = 0
        X = np.zeros((400, 4), dtype=np.float32)
        y = np.ones(400, dtype=np.float32)
        est = cls(module=_models.SlowOddReplica, module__bias=0.0,
                  n_workers=2, n_epochs=4, batch_size=10, lr=0.02,
                  random_state=0, balance=True, **extra).fit(X, y)
    finally:
        use_backend("local")
    rows = [h["worker_samples"] for h in est.history_]
    assert any(fast != slow for fast, slow in rows)
    start = {"weight": torch.zeros(1, 4), "bias": torch.zeros(1)}
    expected = _linear_reference(start, rows, batch_size=10, lr=0.02)
    got = est.module_.state_dict()
    torch.testing.assert_close(got["body.weight"], expected.weight.detach())
    torch.testing.assert_close(got["body.bias"], expected.bias.detach(),
                               atol=ATOL, rtol=1e-4)


def test_balanced_folds_share_alike_and_count_rounds_by_merges():
    # balance=True (equal_shares): N = 100 rows dealt 75 / 25; each merge
    # counts an even deal's 50 rows, whatever it trained on. Worker 0
    # merges twice before worker 1's first: worker 1 is half a round
    # stale (moved 100, a round would merge 50), not 0.75 (150 - 75).
    rules = sm.FoldRules(100, 2, 0.5, 1.0, 0.0, ["w"], False,
                         equal_shares=True)
    start = {"w": torch.zeros(1)}
    glob = sm.new_global(start)
    one = {"w": torch.ones(1)}
    first = sm.fold(glob, start, 0, one, 75, rules)
    second = sm.fold(glob, start, 50, one, 75, rules)
    third = sm.fold(glob, start, 0, one, 25, rules)
    assert [first.staleness, second.staleness] == [0, 0]
    assert first.weight == second.weight == 0.5
    assert third.staleness == pytest.approx(0.5)
    assert third.weight == pytest.approx(0.5 / 1.5 ** 0.5)
    assert [first.index, second.index, third.index] == [0, 1, 2]
    assert glob.progress == 150
    torch.testing.assert_close(glob.state["w"],
                               torch.tensor([1.0 + 0.5 / 1.5 ** 0.5]))


# ----------------------------------------------------------------- errors
@pytest.mark.parametrize("param, value, message", [
    ("max_lag", -1, "The 'max_lag' parameter of AsyncEpochAveraging"
                    "Classifier must be a str among {'auto'}, None or "
                    "an int in the range [0, inf). Got -1 instead."),
    ("max_lag", "none", "The 'max_lag' parameter of AsyncEpochAveraging"
                        "Classifier must be a str among {'auto'}, None or "
                        "an int in the range [0, inf). Got 'none' "
                        "instead."),
    ("max_lag", 1.5, "The 'max_lag' parameter"),
    ("staleness_exponent", -0.5, "The 'staleness_exponent' parameter of "
                                 "AsyncEpochAveragingClassifier must be a "
                                 "float in the range [0, inf). Got -0.5 "
                                 "instead."),
    ("balance", "yes", "The 'balance' parameter"),
])
def test_invalid_async_parameters_are_rejected_at_fit(param, value,
                                                      message):
    X, y = _classification()
    clf = AsyncEpochAveragingClassifier(module=_models.Classifier,
                                        **{param: value})
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        clf.fit(X, y)


@pytest.mark.parametrize("cls", [SyncEpochAveragingClassifier,
                                 AsyncEpochAveragingClassifier])
def test_balance_needs_data_that_may_move(cls):
    X, y = _classification()
    clf = cls(module=_models.Classifier, balance=True, shuffle="none")
    with pytest.raises(InvalidParameterError,
                       match="balance=True only with shuffle='global' or "
                             "'local'"):
        clf.fit(X, y)


def test_max_lag_zero_gives_one_model_whichever_worker_finishes_first(
        local, tmp_path):
    """A round's folds run in worker order at ``max_lag=0``: the model
    does not depend on which worker ends its epoch first."""
    from tests.training._faults import SlowRows
    rng = np.random.RandomState(0)
    x = rng.randn(64, 4).astype(np.float32)
    x[:, 0] = np.repeat([0.0, 1.0], 32)        # worker 0's rows, worker 1's
    y = (x @ rng.randn(4, 1)).astype(np.float32)
    models, orders = [], []
    for slow in ("0", "1"):
        (tmp_path / "slow_rows").write_text(slow)
        est = AsyncEpochAveragingRegressor(
            module=SlowRows, module__folder=str(tmp_path), max_lag=0,
            shuffle="none", n_workers=2, n_epochs=3, batch_size=8, lr=0.05,
            optimizer__momentum=0.9, random_state=0).fit(x, y)
        models.append(est.module_.state_dict())
        orders.append([[m["worker"] for m in sorted(
            h["merges"], key=lambda m: m["index"])] for h in est.history_])
    assert orders[0] == orders[1] == [[0, 1]] * 3
    for key in models[0]:
        assert torch.equal(models[0][key], models[1][key]), key
