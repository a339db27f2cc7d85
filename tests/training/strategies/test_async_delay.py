"""Asynchronous rounds that do not wait for their merge
(``AsyncEpochAveraging*(merge_delay=1)``): against the synchronous
estimators, against plain PyTorch written by hand, and the refusals."""

import copy
import re

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification

from dislib_nn import (AsyncEpochAveragingClassifier,
                       AsyncEpochAveragingRegressor,
                       SyncEpochAveragingRegressor)
from dislib_nn.exceptions import InvalidParameterError
from tests.conftest import use_backend
from tests.training import _models, _reference as ref

ATOL = 1e-5


def _regression(n=91):
    X, y = ref.regression_rows(n)
    return X, y


def _init():
    torch.manual_seed(0)
    return _models.MLP(n_features_in=4, n_outputs=1)


def _parts(X, y, n_workers=2):
    return ref.split_like_blocks(torch.from_numpy(X),
                                 torch.from_numpy(y)[:, None], n_workers)


def _assert_same(model, expected):
    ref.assert_same_model(model, expected, atol=ATOL, rtol=1e-4)


def _fit(cls, init, X, y, **params):
    settings = dict(module=init, n_workers=2, shuffle="none", n_epochs=5,
                    batch_size=8, lr=0.05, optimizer__momentum=0.9)
    settings.update(params)
    return cls(**settings).fit(X, y)


@pytest.mark.parametrize("sync_every", [1, 2])
def test_no_lag_is_the_synchronous_delayed_model(backend, sync_every):
    """``max_lag=0``: every start is the synchronous ``merge_delay=1``
    start, every merge fresh, and the fitted model the hand-written
    delayed correction's."""
    use_backend(backend)
    X, y = _regression()
    init = _init()
    est = _fit(AsyncEpochAveragingRegressor, init, X, y, max_lag=0,
               merge_delay=1, sync_every=sync_every)
    expected = ref.epoch_averaging(
        init, _parts(X, y), torch.nn.MSELoss(), epochs=5, batch_size=8,
        lr=0.05, momentum=0.9, sync_every=sync_every, merge_delay=1)
    _assert_same(est.module_, expected)
    assert all(m["staleness"] == 0 for h in est.history_
               for m in h["merges"])
    sync = _fit(SyncEpochAveragingRegressor, init, X, y, merge_delay=1,
                sync_every=sync_every)
    _assert_same(est.module_, sync.module_)
    undelayed = _fit(AsyncEpochAveragingRegressor, init, X, y, max_lag=0,
                     sync_every=sync_every)
    # The delay changes the model (the comparison above is not trivial).
    assert not torch.allclose(est.module_.body[0].weight,
                              undelayed.module_.body[0].weight, atol=1e-4)


def test_no_lag_with_rounds_within_epochs_is_the_synchronous_model(backend):
    """Two rounds an epoch, each worker's share of a round's rows the
    same in every round (92 rows: 23 per worker and round)."""
    use_backend(backend)
    X, y = _regression(n=92)
    init = _init()
    est = _fit(AsyncEpochAveragingRegressor, init, X, y, max_lag=0,
               merge_delay=1, sync_every=0.5, n_epochs=3)
    sync = _fit(SyncEpochAveragingRegressor, init, X, y, merge_delay=1,
                sync_every=0.5, n_epochs=3)
    _assert_same(est.module_, sync.module_)


def _hand_written_unbounded(init, parts, epochs, batch_size, lr, momentum,
                            exponent=0.5):
    """Asynchronous merges with one round of delay, ``max_lag=None``,
    folded in worker order (the sequential backend's), in plain PyTorch.

    Worker ``w`` starts round ``r`` from ``R_w(r - 1) + M_w(r - 2) -
    R_w(r - 2)``, ``M_w(k)`` the global model right after its own merge
    of round ``k``, and counts that start at ``M_w(r - 2)``'s progress
    plus one round's rows. Each merge adds ``weight * (trained -
    start)`` to the global model."""
    n_rows = sum(len(x) for x, _ in parts)
    glob = copy.deepcopy(init.state_dict())
    progress = 0
    replicas = [copy.deepcopy(init) for _ in parts]
    opts = [torch.optim.SGD(r.parameters(), lr=lr, momentum=momentum)
            for r in replicas]
    trained, after_merge = [], []     # per round, per worker
    for r in range(epochs):
        starts, start_progress = [], []
        for w, (replica, (x, y)) in enumerate(zip(replicas, parts)):
            if r == 0:
                start, p0 = copy.deepcopy(glob), 0
            elif r == 1:
                start, p0 = trained[0][w], n_rows
            else:
                merged, p_merged = after_merge[r - 2][w]
                start = {k: v + merged[k] - trained[r - 2][w][k]
                         for k, v in trained[r - 1][w].items()}
                p0 = p_merged + n_rows
            replica.load_state_dict(start)
            ref.train(replica, opts[w], torch.nn.MSELoss(), x, y,
                      batch_size, lr)
            starts.append(copy.deepcopy(start))
            start_progress.append(p0)
        trained.append([copy.deepcopy(rep.state_dict()) for rep in replicas])
        after_merge.append([])
        for w, (x, _) in enumerate(parts):
            n = len(x)
            tau = max(0, (progress - start_progress[w]) - (n_rows - n)) \
                / n_rows
            weight = n / n_rows * (1 + tau) ** -exponent
            glob = {k: v + weight * (trained[r][w][k] - starts[w][k])
                    for k, v in glob.items()}
            progress += n
            after_merge[r].append((copy.deepcopy(glob), progress))
    model = copy.deepcopy(init)
    model.load_state_dict(glob)
    return model


def test_unbounded_lag_matches_hand_written_delayed_merges():
    use_backend("sequential")
    try:
        X, y = _regression()
        init = _init()
        est = _fit(AsyncEpochAveragingRegressor, init, X, y, max_lag=None,
                   merge_delay=1)
        undelayed = _fit(AsyncEpochAveragingRegressor, init, X, y,
                         max_lag=None)
        no_lag = _fit(AsyncEpochAveragingRegressor, init, X, y, max_lag=0,
                      merge_delay=1)
    finally:
        use_backend("local")
    expected = _hand_written_unbounded(init, _parts(X, y), epochs=5,
                                       batch_size=8, lr=0.05, momentum=0.9)
    _assert_same(est.module_, expected)
    # Each worker's start takes its own merge, not the round's: a model
    # of its own, and not the undelayed one either.
    for other in (undelayed, no_lag):
        assert not torch.allclose(est.module_.body[0].weight,
                                  other.module_.body[0].weight, atol=1e-4)


def test_delayed_fits_learn_on_every_backend_and_release_only_what_is_read(
        backend):
    """Long chains (sync_every shares, warm_start, partial_fit) reach
    every released future only through tasks that still read it (the
    runtime raises otherwise), and the model learns: within 0.1 of the
    same fit without the delay."""
    use_backend(backend)
    X, y = make_classification(n_samples=150, n_features=4, n_informative=3,
                               n_redundant=0, n_classes=3, random_state=0)
    X = X.astype(np.float32)

    def run(**extra):
        clf = AsyncEpochAveragingClassifier(
            module=_models.Classifier, n_workers=3, n_epochs=5,
            batch_size=16, lr=0.05, optimizer=torch.optim.Adam,
            sync_every=0.5, warm_start=True, random_state=0,
            validation_fraction=0.2, **extra)
        clf.fit(X, y).fit(X, y)
        clf.partial_fit(X, y)
        return clf

    for max_lag in (0, None):
        delayed = run(max_lag=max_lag, merge_delay=1)
        assert delayed.n_epochs_ == 11
        plain = run(max_lag=max_lag)
        assert delayed.score(X, y) >= plain.score(X, y) - 0.1


def test_auto_lag_runs_as_no_lag_and_history_says_so():
    use_backend("sequential")
    try:
        X, y = _regression()
        init = _init()
        auto = _fit(AsyncEpochAveragingRegressor, init, X, y, merge_delay=1,
                    n_epochs=3)
        zero = _fit(AsyncEpochAveragingRegressor, init, X, y, merge_delay=1,
                    max_lag=0, n_epochs=3)
    finally:
        use_backend("local")
    _assert_same(auto.module_, zero.module_)
    assert auto.history_[0]["schedule"]["max_lag"] == 0


@pytest.mark.parametrize("params, message", [
    ({"max_lag": 1}, "AsyncEpochAveragingClassifier takes merge_delay=1 "
                     "only with max_lag=0, None or 'auto'"),
    ({"optimizer_state": "average"},
     "AsyncEpochAveragingClassifier takes merge_delay=1 only with "
     "optimizer_state='keep' or 'reset'"),
    ({"merge_precision": "bf16"},
     "AsyncEpochAveragingClassifier takes merge_delay=1 only with "
     "merge_precision='fp32'"),
    ({"merge_delay": 2}, "The 'merge_delay' parameter of "
                         "AsyncEpochAveragingClassifier must be an int in "
                         "the range [0, 1]. Got 2 instead."),
])
def test_combinations_the_delay_cannot_run_are_refused_at_fit(params,
                                                               message):
    X, y = make_classification(n_samples=40, n_features=4, n_informative=3,
                               n_redundant=0, n_classes=3, random_state=0)
    settings = {"merge_delay": 1, **params}
    clf = AsyncEpochAveragingClassifier(module=_models.Classifier,
                                        **settings)
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        clf.fit(X.astype(np.float32), y)
    assert not hasattr(clf, "module_")
