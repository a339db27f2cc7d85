"""User-written strategies (``strategy=``, dislib_nn.strategies).

A plain averaging rule written on :class:`Strategy` trains what the
hand-written epoch-averaging loop trains; FedBuff, taken from
docs/writing_a_strategy.md as a user copies it, trains what a
hand-written FedBuff loop in plain PyTorch trains (arrivals in worker
order, as the sequential backend runs them), resumes, warm-starts and
loads to the bit; bad input is named before any training task.
"""

import copy
import importlib
import os
import re
import sys

import numpy as np
import pytest
import torch
from sklearn.base import clone

from dislib_nn import SyncEpochAveragingClassifier, SyncEpochAveragingRegressor
from dislib_nn.exceptions import InvalidParameterError
from dislib_nn.runtime import COLLECTION_IN, Depth, Type, task
from dislib_nn.strategies import Round, Strategy
from tests.conftest import use_backend
from tests.training import _models
from tests.training import _reference as ref

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "writing_a_strategy.md")
_LIST = {Type: COLLECTION_IN, Depth: 1}


def page_code():
    """The page's script, as a user copies it."""
    with open(PAGE, encoding="utf-8") as f:
        return re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)


@pytest.fixture(scope="module")
def FedBuff(tmp_path_factory):
    """The page's FedBuff, its script's definitions imported as a module
    (tasks are found by module and name, as COMPSs finds them)."""
    folder = tmp_path_factory.mktemp("page")
    (folder / "fedbuff_page.py").write_text(
        page_code().split('if __name__ == "__main__":')[0],
        encoding="utf-8")
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("fedbuff_page").FedBuff
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("fedbuff_page", None)


@pytest.fixture
def sequential():
    use_backend("sequential")
    yield
    use_backend("local")


@task(returns=1, states=_LIST, samples=_LIST)
def _average(states, samples):
    total = sum(samples)
    return {k: sum(s[k] * (n / total) for s, n in zip(states, samples))
            if states[0][k].is_floating_point() else states[-1][k]
            for k in states[0]}


class PlainAverage(Strategy):
    """Sample-weighted averaging, written on the public template."""

    def merge(self, trained):
        assert isinstance(trained, Round)
        self.global_model = _average(trained.states, trained.samples)


def _regression():
    return ref.regression_rows(91)


def test_plain_averaging_trains_what_the_hand_written_loop_trains(backend):
    X, y = _regression()
    init = ref.small_mlp()
    est = SyncEpochAveragingRegressor(
        module=copy.deepcopy(init), n_workers=2, shuffle="none",
        n_epochs=3, batch_size=8, lr=0.05, sync_every=1, lr_scaling="none",
        optimizer__momentum=0.9, strategy=PlainAverage).fit(X, y)
    parts = ref.split_like_blocks(torch.from_numpy(X),
                                  torch.from_numpy(y)[:, None], 2)
    expected = ref.epoch_averaging(init, parts, torch.nn.MSELoss(), epochs=3,
                                   batch_size=8, lr=0.05, momentum=0.9)
    ref.assert_same_model(est.module_, expected, atol=1e-6, rtol=1e-5)
    assert [h["n_merges"] for h in est.history_] == [1, 1, 1]


@pytest.mark.usefixtures("sequential")
def test_a_round_spans_sync_every_epochs_and_shares_of_one():
    X, y = _regression()
    seen = []

    class Counting(PlainAverage):
        def merge(self, trained):
            seen.append((trained.epoch, trained.share, trained.last))
            super().merge(trained)

    for every in (2, 0.5):
        seen.clear()
        SyncEpochAveragingRegressor(
            module=ref.small_mlp(), n_workers=2, n_epochs=4, batch_size=8,
            sync_every=every, strategy=Counting).fit(X, y)
        if every == 2:
            assert seen == [(1, None, False), (3, None, True)]
        else:
            assert [s[:2] for s in seen] == [
                (e, (k, 2)) for e in range(4) for k in range(2)]
            assert [s[2] for s in seen] == [False] * 7 + [True]


# --------------------------------------------------------------- FedBuff
def _hand_written_fedbuff(init, parts, epochs, k, lr, momentum, batch):
    """FedBuff in plain PyTorch: replicas train from their own starts;
    arrivals in worker order, weighted by 1/sqrt(1 + staleness); the
    model moves by the buffer's mean every k arrivals."""
    n = len(parts)
    models = [copy.deepcopy(init) for _ in range(n)]
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum)
            for m in models]
    model = {key: v.clone() for key, v in init.state_dict().items()}
    starts, versions = [model] * n, [0] * n
    buffer, arrived, version = {}, 0, 0
    criterion = torch.nn.CrossEntropyLoss()
    for _ in range(epochs):
        trained = []
        for w, (x, y) in enumerate(parts):
            models[w].load_state_dict(starts[w])
            ref.train(models[w], opts[w], criterion, x, y, batch, lr)
            trained.append({key: v.detach().clone()
                            for key, v in models[w].state_dict().items()})
        for w in range(n):
            weight = (1 + version - versions[w]) ** -0.5
            for key, value in trained[w].items():
                if value.is_floating_point():
                    buffer[key] = buffer.get(key, 0) \
                        + weight * (value - starts[w][key])
            arrived += 1
            if arrived == k:
                model = {key: v + buffer[key] / k if key in buffer else v
                         for key, v in model.items()}
                buffer, arrived, version = {}, 0, version + 1
            starts[w], versions[w] = dict(model), version
    return model


def _classes(n=160):
    from sklearn.datasets import make_classification
    X, y = make_classification(n_samples=n, n_features=6, n_informative=4,
                               n_redundant=0, n_classes=3, random_state=0)
    return X.astype(np.float32), y


def _fedbuff_params(fedbuff, **more):
    torch.manual_seed(0)
    init = _models.MLP(n_features_in=6, n_outputs=3, hidden=8)
    return init, dict(module=copy.deepcopy(init), n_workers=3,
                      shuffle="none", batch_size=16, lr=0.1,
                      sync_every=1, lr_scaling="none",
                      optimizer__momentum=0.9, strategy=fedbuff,
                      strategy__k=2, random_state=0, **more)


@pytest.mark.usefixtures("sequential")
def test_the_pages_fedbuff_trains_what_a_hand_written_fedbuff_trains(
        FedBuff):
    X, y = _classes()
    init, params = _fedbuff_params(FedBuff)
    est = SyncEpochAveragingClassifier(n_epochs=4, **params).fit(X, y)
    parts = ref.split_like_blocks(torch.from_numpy(X), torch.from_numpy(y),
                                  3)
    expected = _hand_written_fedbuff(init, parts, 4, 2, 0.1, 0.9, 16)
    got = est.module_.state_dict()
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, atol=1e-6, rtol=1e-5)
    # Not the synchronous average: the rule changed the model.
    sync = SyncEpochAveragingClassifier(
        n_epochs=4, **{k: v for k, v in params.items()
                       if not k.startswith("strategy")}).fit(X, y)
    assert not torch.allclose(got["body.0.weight"],
                              sync.module_.state_dict()["body.0.weight"],
                              atol=1e-4)
    # 3 arrivals an epoch, the model moves every 2: 6 versions.
    assert est.strategy_state_["server"]["version"] == 6
    assert [len(h["merge_info"][0]) for h in est.history_] == [3] * 4


def _same_model(a, b):
    for key, value in a.module_.state_dict().items():
        assert torch.equal(value, b.module_.state_dict()[key]), key


@pytest.mark.usefixtures("sequential")
def test_fedbuff_resumes_warm_starts_and_loads_to_the_bit(FedBuff,
                                                          tmp_path):
    X, y = _classes()
    _, params = _fedbuff_params(FedBuff)
    whole = SyncEpochAveragingClassifier(n_epochs=5, **params).fit(X, y)
    ckpt = str(tmp_path / "ckpt")
    SyncEpochAveragingClassifier(n_epochs=2, checkpoint_dir=ckpt,
                                 **params).fit(X, y)
    resumed = SyncEpochAveragingClassifier(
        n_epochs=5, checkpoint_dir=ckpt, **params).fit(X, y, resume=True)
    _same_model(resumed, whole)
    # warm_start: the carried server, starts and versions go on.
    warm = SyncEpochAveragingClassifier(n_epochs=2, **params).fit(X, y)
    warm.set_params(warm_start=True, n_epochs=3).fit(X, y)
    _same_model(warm, whole)
    # save / load carry the strategy's state; loading runs no code.
    short = SyncEpochAveragingClassifier(n_epochs=2, **params).fit(X, y)
    short.save(str(tmp_path / "m.pt"))
    loaded = SyncEpochAveragingClassifier(**params).load(
        str(tmp_path / "m.pt"))
    assert loaded.strategy_state_["server"]["version"] == \
        short.strategy_state_["server"]["version"] > 0
    loaded.set_params(warm_start=True, n_epochs=3).fit(X, y)
    _same_model(loaded, whole)


# ------------------------------------------------------------ parameters
def test_parameters_route_clone_and_leave_the_instance_alone(FedBuff):
    given = FedBuff(k=3)
    est = SyncEpochAveragingClassifier(strategy=given, strategy__k=4)
    assert est.get_params()["strategy__k"] == 4
    est.set_params(strategy__server_lr=0.5)
    copied = clone(est)
    assert copied.get_params()["strategy__server_lr"] == 0.5
    assert copied.strategy is not None and given.k == 3
    assert repr(given) == "FedBuff(k=3, server_lr=1.0)"


@pytest.mark.parametrize("params, words", [
    ({"strategy__kk": 2}, ["strategy__kk", "'kk'", "['k', 'server_lr']"]),
    ({"strategy": "fedbuff"}, ["'strategy'", "Strategy subclass"]),
    ({"strategy": None, "strategy__k": 2}, ["strategy__k", "strategy=None"]),
    ({"merge_delay": 1}, ["merge_delay", "default 0"]),
    ({"optimizer_state": "average"}, ["optimizer_state", "'average'"]),
    ({"outer_lr": 0.5}, ["outer_lr", "0.5"]),
    ({"merge_precision": "bf16"}, ["merge_precision", "'bf16'"]),
])
@pytest.mark.usefixtures("sequential")
def test_bad_parameters_are_named_before_any_task(FedBuff, params, words):
    X, y = _classes()
    _, base = _fedbuff_params(FedBuff)
    est = SyncEpochAveragingClassifier(**dict(base, **params))
    with pytest.raises(InvalidParameterError) as info:
        est.fit(X, y)
    for word in words:
        assert word in str(info.value)
    assert not hasattr(est, "module_")


@pytest.mark.usefixtures("sequential")
def test_begins_refusal_and_a_bad_merge_are_the_users_errors(FedBuff):
    X, y = _classes()
    _, base = _fedbuff_params(FedBuff)
    with pytest.raises(ValueError, match="int k >= 1, got 0"):
        SyncEpochAveragingClassifier(**dict(base, strategy__k=0)).fit(X, y)

    class ReturnsAFuture(PlainAverage):
        def merge(self, trained):
            super().merge(trained)
            return [self.global_model]

    class ReturnsADict(PlainAverage):
        def merge(self, trained):
            super().merge(trained)
            return {"a": 1}

    for cls, words in ((ReturnsAFuture, "also holds"),
                       (ReturnsADict, "None or a list")):
        plain = {k: v for k, v in base.items() if k != "strategy__k"}
        est = SyncEpochAveragingClassifier(**dict(plain, strategy=cls))
        with pytest.raises(TypeError, match=words):
            est.fit(X, y)
        assert not hasattr(est, "module_")
