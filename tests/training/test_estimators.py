"""The estimators' behaviour: inputs, outputs, attributes and errors."""

import pickle
import re

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.datasets import make_classification, make_regression
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV

import dislib_nn as dnn
from dislib_nn import (AsyncEpochAveragingClassifier,
                       AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor, runtime)
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from dislib_nn.training.tasks import _reduce, _train
from dislib_nn.training.tasks._report import TrainStats
from tests.conftest import use_backend
from tests.training import _models, _reference as ref


@pytest.fixture(scope="module", autouse=True)
def _local():
    use_backend("local")


def _classification(n=120, labels=None):
    X, y = make_classification(n_samples=n, n_features=4, n_informative=3,
                               n_redundant=0, n_classes=3, random_state=0)
    if labels is not None:
        y = np.asarray(labels)[y]
    return X.astype(np.float32), y


def _regression(n=100, n_targets=1):
    X, y = make_regression(n_samples=n, n_features=4, n_targets=n_targets,
                           noise=0.5, random_state=0)
    return X.astype(np.float32), (y / 100).astype(np.float32)


# Tests that take ``strategy`` run with both strategies' estimators.
STRATEGIES = ("sync", "async")
_CLASSES = {"sync": (SyncEpochAveragingClassifier,
                     SyncEpochAveragingRegressor),
            "async": (AsyncEpochAveragingClassifier,
                      AsyncEpochAveragingRegressor)}


def _clf(strategy="sync", **kwargs):
    params = dict(module=_models.Classifier, n_epochs=3, batch_size=16,
                  lr=0.05, optimizer=torch.optim.Adam, n_workers=2,
                  random_state=0)
    params.update(kwargs)
    return _CLASSES[strategy][0](**params)


def _reg(strategy="sync", **kwargs):
    params = dict(module=_models.MLP, n_epochs=3, batch_size=16, lr=0.01,
                  n_workers=2, random_state=0)
    params.update(kwargs)
    return _CLASSES[strategy][1](**params)


# Accuracy on the training rows of a fit with more than one worker (or
# shuffled rows) against plain PyTorch's, trained the same way from the
# same weights: within 0.1, 15 of the 150 rows (a model that learned
# nothing scores about 0.4 here; PyTorch about 0.86).
ACC_TOL = 0.1


def _init(cls=_models.Classifier, **kwargs):
    torch.manual_seed(0)
    return cls(**kwargs)


def _accuracy(model, X, y):
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(X)).argmax(1).numpy()
    return float((pred == y).mean())


def _same_model(a, b, atol=0.0):
    for (k, v), w in zip(a.module_.state_dict().items(),
                         b.module_.state_dict().values()):
        torch.testing.assert_close(v, w, atol=atol, rtol=0, msg=k)


# ------------------------------------------------------------- fitting
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fit_sets_the_documented_attributes(strategy):
    X, y = _classification()
    Xv, yv = X[:30], y[:30]
    clf = _clf(strategy, validation_data=(Xv, yv)).fit(X[30:], y[30:])
    assert isinstance(clf.module_, _models.Classifier)
    assert not clf.module_.training
    assert all(p.device.type == "cpu" for p in clf.module_.parameters())
    assert clf.n_epochs_ == 3 and clf.n_features_in_ == 4
    assert clf.n_workers_ == 2
    assert list(clf.classes_) == [0, 1, 2]
    assert [h["epoch"] for h in clf.history_] == [1, 2, 3]
    for record in clf.history_:
        assert set(record) >= {"epoch", "train_loss", "valid_loss",
                               "valid_score", "dur_s"}
    # The last epoch's validation figures are the fitted model's.
    with torch.no_grad():
        out = clf.module_(torch.from_numpy(Xv))
    loss = torch.nn.functional.cross_entropy(out, torch.from_numpy(yv))
    assert clf.history_[-1]["valid_loss"] == pytest.approx(loss.item(),
                                                           rel=1e-5)
    assert clf.history_[-1]["valid_score"] == pytest.approx(
        clf.score(Xv, yv))
    # History is plain JSON-serialisable data.
    import json
    json.dumps(clf.history_)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_string_labels_are_encoded_and_returned(strategy):
    # The fit on string labels is the fit on their codes (the classes in
    # sorted order); max_lag=0 makes the asynchronous strategy
    # reproducible.
    extra = {"max_lag": 0} if strategy == "async" else {}
    X, codes = _classification()
    names = np.array(["cat", "dog", "emu"])
    y = names[codes]
    clf = _clf(strategy, n_epochs=5, **extra).fit(X, y)
    coded = _clf(strategy, n_epochs=5, **extra).fit(X, codes)
    assert list(clf.classes_) == ["cat", "dog", "emu"]
    np.testing.assert_array_equal(clf.predict(X), names[coded.predict(X)])
    proba = clf.predict_proba(X)
    assert proba.shape == (120, 3)
    np.testing.assert_allclose(proba.sum(1), 1, rtol=1e-6)
    np.testing.assert_allclose(proba, coded.predict_proba(X), rtol=1e-5,
                               atol=1e-6)
    assert clf.score(X, y) == pytest.approx(coded.score(X, codes))
    with pytest.raises(TypeError, match="classes_ are not numbers"):
        clf.predict(dnn.from_array(X, n_blocks=2))
    assert clf.predict_proba(dnn.from_array(X, n_blocks=2)).shape == (120, 3)


def test_torch_tensors_are_accepted():
    X, y = _classification()
    clf = _clf().fit(torch.from_numpy(X), torch.from_numpy(y))
    _same_model(clf, _clf().fit(X, y))
    assert clf.predict(torch.from_numpy(X)).shape == (120,)


@pytest.mark.parametrize("n_targets", [1, 2])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_regression_targets_keep_their_shape(n_targets, strategy):
    X, y = _regression(n_targets=n_targets)
    reg = _reg(strategy).fit(X, y)
    assert reg.predict(X).shape == y.shape
    assert reg.predict(X).dtype == np.float64


def test_module_output_that_would_broadcast_is_an_error():
    class_ = _models.MLP
    X, y = _regression()
    # fit tries one sample before any task runs: a batch of one.
    with pytest.raises(ValueError, match=r"output has shape \(1, 3\) but "
                       r"the targets have shape \(1,\)"):
        _reg(module=class_, module__n_outputs=3).fit(X, y)


def test_classifier_output_must_have_one_column_per_class():
    X, y = _classification()
    with pytest.raises(ValueError, match="one column per class"):
        _clf(module__n_classes=2).fit(X, y)


@pytest.mark.parametrize("shuffle", ["global", "local", "none"])
def test_shuffle_modes_learn_like_plain_pytorch(shuffle):
    X, y = _classification(n=150)
    init = _init()
    clf = _clf(module=init, shuffle=shuffle, n_epochs=6).fit(X, y)
    x, t = torch.from_numpy(X), torch.from_numpy(y)
    criterion = torch.nn.CrossEntropyLoss()
    if shuffle == "none":
        # Fixed blocks, rows in order: epoch averaging done by hand.
        expected = ref.epoch_averaging(
            init, ref.split_like_blocks(x, t, 2), criterion, epochs=6,
            batch_size=16, lr=0.05, optimizer=torch.optim.Adam)
        ref.assert_same_model(clf.module_, expected, atol=2e-5, rtol=1e-4)
    single = ref.single_process(init, x, t, criterion, epochs=6,
                                batch_size=16, lr=0.05,
                                optimizer=torch.optim.Adam)
    assert abs(clf.score(X, y) - _accuracy(single, X, y)) <= ACC_TOL


def test_same_random_state_same_model():
    # The asynchronous strategy is reproducible with max_lag=0 only
    # (tests/training/strategies/test_async.py); otherwise merges run in the order
    # workers finish.
    X, y = _classification()
    a = _clf(module=_models.WithDropout, criterion=None,
             module__n_outputs=3).fit(X, y)
    b = _clf(module=_models.WithDropout, module__n_outputs=3).fit(X, y)
    for (k, v), w in zip(a.module_.state_dict().items(),
                         b.module_.state_dict().values()):
        assert torch.equal(v, w), k


def test_n_workers_is_capped_by_the_number_of_blocks():
    # A fixed partition (see tests/training/strategies/test_replicas.py for the
    # global shuffle, which re-blocks).
    X, y = _classification()
    x = dnn.from_array(X, n_blocks=3)
    with pytest.warns(UserWarning, match="training 3 replicas"):
        clf = _clf(n_workers=8, shuffle="none").fit(x, y)
    assert clf.n_workers_ == 3


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_lazy_modules_are_shaped_at_fit(strategy):
    X, y = _regression()
    reg = _reg(strategy, module=_models.Lazy).fit(X, y)
    assert reg.module_.fc.weight.shape == (1, 4)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_early_stopping_stops_and_keeps_the_best_model(strategy):
    X, y = _classification(n=160)
    Xv, yv = X[:40], y[:40]
    clf = _clf(strategy, n_epochs=50, lr=0.5, optimizer=torch.optim.SGD,
               early_stopping=True, patience=2, validation_data=(Xv, yv))
    clf.fit(X[40:], y[40:])
    losses = [h["valid_loss"] for h in clf.history_]
    assert clf.n_epochs_ == len(losses) < 50
    best = int(np.argmin(losses))
    assert len(losses) - 1 - best == 2      # patience epochs after the best
    # The model kept is the best one, not the last one.
    with torch.no_grad():
        out = clf.module_(torch.from_numpy(Xv))
        loss = torch.nn.functional.cross_entropy(out, torch.from_numpy(yv))
    assert loss.item() == pytest.approx(losses[best], rel=1e-4)


def test_validation_data_is_scored_every_merge():
    X, y = _classification()
    clf = _clf(validation_data=(X[:30], y[:30])).fit(X[30:], y[30:])
    scores = [h["valid_score"] for h in clf.history_]
    assert len(scores) == clf.n_epochs_ == 3
    # The last epoch's score is the fitted model's on the same rows.
    assert scores[-1] == pytest.approx(clf.score(X[:30], y[:30]))
    # Each is the model of its own epoch: a fit stopped there scores so.
    first = _clf(validation_data=(X[:30], y[:30]), n_epochs=1).fit(
        X[30:], y[30:])
    assert scores[0] == pytest.approx(first.score(X[:30], y[:30]))


def test_verbose_prints_one_line_per_epoch(capsys):
    X, y = _classification()
    _clf(verbose=1, n_epochs=2).fit(X, y)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    assert lines[0] == ("SyncEpochAveragingClassifier: 2 workers, backend "
                        "local; one merge per epoch")
    assert lines[1].startswith("epoch   1/2") and "train_loss" in lines[1]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_warm_start_and_partial_fit_extend_the_history(strategy):
    X, y = _classification()
    clf = _clf(strategy, warm_start=True, n_epochs=2).fit(X, y)
    clf.fit(X, y)
    assert clf.n_epochs_ == 4 and len(clf.history_) == 4
    clf.partial_fit(X, y)
    assert clf.n_epochs_ == 5
    assert [h["epoch"] for h in clf.history_] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_partial_fit_classes_argument(strategy):
    X, y = _classification()
    clf = _clf(strategy, module__n_classes=4)
    clf.partial_fit(X[y < 2], y[y < 2], classes=[0, 1, 2, 3])
    assert list(clf.classes_) == [0, 1, 2, 3]
    clf.partial_fit(X, y)


# ------------------------------------------------------------ DsTensors
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ds_tensor_fit_predict_score_never_collect_x(monkeypatch, strategy):
    X, y = _classification()
    x = dnn.from_array(X, n_blocks=4)
    yd = dnn.from_array(y, n_blocks=4)

    def no_collect(self):
        raise AssertionError("the master collected a DsTensor")

    monkeypatch.setattr(dnn.DsTensor, "collect", no_collect)
    clf = _clf(strategy, validation_fraction=0.2).fit(x, yd)
    assert list(clf.classes_) == [0, 1, 2]
    pred = clf.predict(x)
    proba = clf.predict_proba(x)
    score = clf.score(x, yd)
    monkeypatch.undo()
    assert isinstance(pred, dnn.DsTensor) and pred.shape == (120,)
    assert proba.shape == (120, 3) and proba.block_sizes == x.block_sizes
    np.testing.assert_array_equal(pred.collect().numpy(), clf.predict(X))
    np.testing.assert_allclose(proba.collect().numpy(), clf.predict_proba(X),
                               rtol=1e-5, atol=1e-6)
    assert score == pytest.approx(clf.score(X, y))


def test_ds_tensor_regression_score_matches_sklearn():
    X, y = _regression(n_targets=2)
    reg = _reg(n_epochs=5).fit(X, y)
    x, yd = dnn.from_array(X, n_blocks=3), dnn.from_array(y, n_blocks=3)
    assert reg.score(x, yd) == pytest.approx(reg.score(X, y), abs=1e-6)
    pred = reg.predict(x)
    assert pred.shape == (100, 2)
    np.testing.assert_allclose(pred.collect().numpy(), reg.predict(X),
                               rtol=1e-5, atol=1e-6)


def test_ds_tensor_with_array_targets():
    X, y = _regression()
    reg = _reg().fit(dnn.from_array(X, n_blocks=2), y)
    assert reg.predict(X).shape == (100,)


def test_dislib_ds_arrays_are_accepted():
    from tests.data.test_interop import FakeDsArray
    X, y = _classification()
    x_ds = FakeDsArray(X.astype(np.float64), (40, 3))
    y_ds = FakeDsArray(y[:, None], (40, 1))
    clf = _clf().fit(x_ds, y_ds)
    assert clf.n_features_in_ == 4 and list(clf.classes_) == [0, 1, 2]
    # The same fit as on a DsTensor of the same blocks.
    same = _clf().fit(dnn.from_array(X, n_blocks=3), y)
    _same_model(clf, same)
    np.testing.assert_array_equal(clf.predict(x_ds), same.predict(X))
    assert clf.score(x_ds, y_ds) == pytest.approx(same.score(X, y))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_master_fetches_no_weights_during_fit(monkeypatch, strategy):
    fetched = []
    original = runtime.wait_on

    def spy(*objs):
        values = original(*objs)
        fetched.append(values)
        return values

    monkeypatch.setattr(runtime, "wait_on", spy)
    X, y = _classification()
    _clf(strategy, n_epochs=4, validation_fraction=0.2,
         optimizer_state="reset").fit(X, y)

    def holds_tensor(value):
        if torch.is_tensor(value):
            return True
        if isinstance(value, dict):
            return any(holds_tensor(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(holds_tensor(v) for v in value)
        return False

    assert len(fetched) == 5        # one wait per epoch, then the model
    assert not any(holds_tensor(v) for v in fetched[:-1])
    assert holds_tensor(fetched[-1])


def test_merge_tree_gives_the_weighted_mean_of_the_finite_replicas():
    # The merge tasks run for real: the merged model is the sample-
    # weighted mean, computed by hand, of the replicas that did not
    # diverge; the tree releases its partial sums, never the replicas.
    # (Its depth, ceil(log2 P), is checked by tests/training/merge/test_merge.py
    # on the pure reduction and by tests/test_benchmarks.py on the task
    # graph.)
    replicas = [{"w": torch.full((3,), float(i)),
                 "b": torch.tensor([2.0 * i + 1])} for i in range(5)]
    counts = [1, 2, 3, 4, 5]
    previous = {k: torch.zeros_like(v) for k, v in replicas[0].items()}

    def merge(finite):
        released = []

        class Lifetimes:
            release = staticmethod(released.append)

        model, optim, outer = _reduce.submit_merge(
            replicas, None, counts, Lifetimes(),
            [TrainStats(finite=f) for f in finite], previous)
        assert optim is None and outer is None
        assert len(released) == 3
        assert not any(r is leaf for r in released for leaf in replicas)
        return runtime.wait_on(model)

    finite = [True, True, False, True, True]
    merged = merge(finite)
    kept = [i for i, f in enumerate(finite) if f]
    expected = ref.average([replicas[i] for i in kept],
                           [counts[i] for i in kept])
    assert list(merged) == list(expected)
    for key in expected:
        torch.testing.assert_close(merged[key], expected[key])
    # When every replica diverged the model is the previous one.
    for key, value in merge([False] * 5).items():
        assert torch.equal(value, previous[key])


# -------------------------------------------------------- scikit-learn
def test_prefixed_params_get_set_clone():
    clf = _clf(module__hidden=32, optimizer__weight_decay=1e-4)
    params = clf.get_params()
    assert params["module__hidden"] == 32
    assert params["optimizer__weight_decay"] == 1e-4
    clf.set_params(module__hidden=8, criterion__label_smoothing=0.1)
    copy = clone(clf)
    assert copy.get_params()["module__hidden"] == 8
    assert copy.get_params()["criterion__label_smoothing"] == 0.1
    X, y = _classification()
    copy.fit(X, y)
    assert copy.module_.hidden.out_features == 8


@pytest.mark.parametrize("key, hint", [
    ("modul__hidden", "Did you mean 'module__hidden'"),
    ("optimiser__momentum", "Did you mean 'optimizer__momentum'"),
    ("n_epoch", "Did you mean 'n_epochs'"),
])
def test_unknown_parameters_get_a_did_you_mean_hint(key, hint):
    X, y = _classification()
    clf = _clf(**{key: 1})
    with pytest.raises(InvalidParameterError, match=re.escape(hint)):
        clf.fit(X, y)
    # set_params raises at once, as scikit-learn's does, and sets
    # nothing of the call.
    clf = _clf()
    with pytest.raises(InvalidParameterError, match=re.escape(hint)):
        clf.set_params(lr=0.5, **{key: 1})
    assert clf.get_params() == _clf().get_params()


def test_grid_search_over_prefixed_params():
    X, y = _classification(n=90)
    search = GridSearchCV(_clf(n_epochs=2),
                          {"module__hidden": [4, 8], "lr": [0.01, 0.05]},
                          cv=3)
    search.fit(X, y)
    assert set(search.best_params_) == {"module__hidden", "lr"}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_pickle_after_fit(strategy):
    X, y = _classification()
    clf = _clf(strategy).fit(X, y)
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(again.predict_proba(X),
                                  clf.predict_proba(X))


def test_module_instance_is_copied_not_changed():
    X, y = _classification()
    torch.manual_seed(0)
    init = _models.Classifier()
    before = {k: v.clone() for k, v in init.state_dict().items()}
    clf = _clf(module=init).fit(X, y)
    for k, v in init.state_dict().items():
        assert torch.equal(v, before[k])
    assert clf.module_ is not init


# -------------------------------------------------------------- errors
@pytest.mark.parametrize("param, value, message", [
    ("n_epochs", -1, "The 'n_epochs' parameter of SyncEpochAveraging"
                     "Classifier must be an int in the range [1, inf). "
                     "Got -1 instead."),
    ("batch_size", 0, "The 'batch_size' parameter of SyncEpochAveraging"
                      "Classifier must be an int in the range [1, inf). "
                      "Got 0 instead."),
    ("shuffle", "sometimes", "The 'shuffle' parameter of SyncEpochAveraging"
                             "Classifier must be a str among {'global', "
                             "'local', 'none'}. Got 'sometimes' instead."),
    ("module", "resnet", "The 'module' parameter of SyncEpochAveraging"
                         "Classifier must be a subclass of torch.nn.Module "
                         "or an instance of one. Got 'resnet' instead."),
    ("module", None, "The 'module' parameter"),
    ("optimizer_state", "forget", "The 'optimizer_state' parameter"),
    ("lr", 0.0, "The 'lr' parameter"),
    ("sync_every", 0, "The 'sync_every' parameter"),
    ("outer_momentum", 1.0, "The 'outer_momentum' parameter"),
    ("validation_fraction", 1.0, "The 'validation_fraction' parameter"),
    ("device", "gpu", "The 'device' parameter of SyncEpochAveraging"
                      "Classifier must be 'auto' or a torch device"),
    ("early_stopping", "yes", "The 'early_stopping' parameter"),
    ("n_workers", 0, "The 'n_workers' parameter"),
    ("random_state", -3, "The 'random_state' parameter"),
])
def test_invalid_parameters_are_rejected_at_fit(param, value, message):
    X, y = _classification()
    clf = _clf(**{param: value})        # __init__ never complains
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        clf.fit(X, y)


def test_validation_fraction_and_data_together_are_rejected():
    X, y = _classification()
    with pytest.raises(InvalidParameterError, match="not both"):
        _clf(validation_fraction=0.1, validation_data=(X, y)).fit(X, y)


def test_x_and_y_of_different_lengths():
    X, y = _classification()
    with pytest.raises(ShapeError, match="X with 120 and y with 119"):
        _clf().fit(X, y[:-1])
    with pytest.raises(ShapeError, match="X with 120 and y with 119"):
        _clf().fit(dnn.from_array(X), dnn.from_array(y[:-1]))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_are_rejected(bad):
    X, y = _regression()
    Xb = X.copy()
    Xb[5, 2] = bad
    with pytest.raises(ValueError, match="Input X contains"):
        _reg().fit(Xb, y)
    with pytest.raises(ValueError, match=r"Input X contains NaN or "
                       r"infinity \(in block 0\)"):
        _reg().fit(dnn.from_array(Xb, n_blocks=2), y)
    yb = y.copy()
    yb[7] = bad
    with pytest.raises(ValueError, match="Input y contains"):
        _reg().fit(X, yb)
    with pytest.raises(ValueError, match="Input y contains"):
        _reg().fit(dnn.from_array(X, n_blocks=2),
                   dnn.from_array(yb, n_blocks=2))
    Xc, yc = _classification()
    yc = yc.astype(float)
    yc[3] = bad
    with pytest.raises(ValueError, match="Input y contains"):
        _clf().fit(Xc, yc)


def test_predict_before_fit():
    X, _ = _classification()
    for est in (_clf(), _reg()):
        with pytest.raises(NotFittedError):
            est.predict(X)


def test_unseen_labels_at_score_time():
    X, y = _classification()
    clf = _clf().fit(X, y)
    with pytest.raises(ValueError, match="not seen in fit: 'cat'"):
        clf.score(dnn.from_array(X, n_blocks=2), np.array(["cat"] * 120))
    y2 = y.copy()
    y2[:3] = 7
    with pytest.raises(ValueError, match="labels that were not seen in fit:"
                       r" 7\. The classes seen in fit are \[0, 1, 2\]"):
        clf.score(X, y2)
    with pytest.raises(ValueError, match="labels that were not seen in fit"):
        clf.score(dnn.from_array(X, n_blocks=2),
                  dnn.from_array(y2, n_blocks=2))


def test_error_in_forward_surfaces_with_its_message_and_task():
    X, y = _classification()
    with pytest.raises(ValueError, match="forward exploded on purpose") as e:
        _clf(module=_models.Broken).fit(X, y)
    # Found by fit's one-sample check on the master, before any task.
    notes = " ".join(getattr(e.value, "__notes__", []))
    assert "raised by the forward of module Broken on one sample" in notes


def test_cuda_device_without_a_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    X, y = _classification()
    with pytest.raises(RuntimeError, match="device='cuda' was asked for, "
                       "but this task sees no CUDA GPU"):
        _clf(device="cuda").fit(X, y)


def test_device_cpu_and_auto_train_on_cpu():
    X, y = _classification()
    fits = [_clf(device=device, n_epochs=1).fit(X, y)
            for device in ("cpu", "auto", torch.device("cpu"))]
    for clf in fits:
        assert all(p.device.type == "cpu" for p in clf.module_.parameters())
        _same_model(clf, fits[0])


def test_gpu_task_is_chosen_only_where_gpus_are_asked_for(monkeypatch,
                                                         sequential):
    # Outside COMPSs no task asks the runtime for GPUs, whatever the
    # environment says (ComputingUnitsGPUs is a COMPSs setting): a fit
    # submits the CPU training task.
    monkeypatch.setenv("ComputingUnitsGPUs", "1")
    assert runtime.gpus_per_task() == 0
    X, y = _classification()
    for device in ("auto", "cpu"):
        with runtime.count_tasks() as counts:
            _clf(device=device, n_epochs=1).fit(X, y)
        assert counts["_train_epoch"] == 2, device
        assert not {"_train_epoch_gpu", "_train_epoch_gpu_once"} & set(
            counts), device
    # A CUDA device asks for the GPU task, which COMPSs places on a GPU
    # (there is none to fit on here).
    tasks = _train
    assert tasks.train_task_for("cuda:1") is tasks._train_epoch_gpu
    gpu = tasks._train_epoch_gpu.constraints["processors"]
    assert {p["processorType"] for p in gpu} == {"CPU", "GPU"}


def test_on_failure_raise_submits_a_training_task_never_rerun(sequential):
    X, y = _classification()
    for policy, name in (("raise", "_train_epoch_once"),
                         ("skip", "_train_epoch")):
        with runtime.count_tasks() as counts:
            _clf(on_failure=policy, n_epochs=1).fit(X, y)
        assert {k for k in counts if k.startswith("_train_epoch")} \
            == {name}, policy
    tasks = _train
    assert tasks.train_task_for("cuda", "raise") is \
        tasks._train_epoch_gpu_once
    assert tasks._train_epoch_once.spec.on_failure == "FAIL"
    assert tasks._train_epoch_gpu_once.spec.on_failure == "FAIL"
    assert tasks._train_epoch.spec.on_failure == "RETRY"
    assert tasks._train_epoch_gpu_once.constraints == \
        tasks._train_epoch_gpu.constraints


def test_predict_checks_the_number_of_features():
    X, y = _classification()
    clf = _clf().fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features, but "
                       "SyncEpochAveragingClassifier is expecting 4"):
        clf.predict(X[:, :3])


def test_plateau_scheduler_steps_on_the_validation_loss():
    X, y = _classification()
    clf = _clf(n_epochs=6, lr=0.05, validation_fraction=0.25,
               lr_schedule=torch.optim.lr_scheduler.ReduceLROnPlateau,
               lr_schedule__patience=0, lr_schedule__factor=0.5,
               lr_schedule__threshold=10.0)
    clf.fit(X, y)
    # A threshold of 1000 % means no epoch ever counts as an improvement
    # (not even the first, against an infinite best): with patience 0 the
    # rate halves after every epoch.
    assert [h["lr"] for h in clf.history_] == pytest.approx(
        [0.05 / 2 ** i for i in range(6)])


def test_schedule_arguments_without_a_scheduler_class():
    X, y = _classification()
    with pytest.raises(TypeError, match="lr_schedule__ arguments"):
        _clf(lr_schedule__gamma=0.5).fit(X, y)


def test_module_arguments_with_an_instance_are_an_error():
    X, y = _classification()
    with pytest.raises(TypeError, match="module is an instance"):
        _clf(module=_models.Classifier(), module__hidden=4).fit(X, y)


def test_bad_module_arguments_name_the_prefixed_keyword():
    X, y = _classification()
    with pytest.raises(TypeError, match="module__width=3"):
        _clf(module__width=3).fit(X, y)


def test_early_stopping_without_validation_watches_the_training_loss():
    X, y = _classification()
    clf = _clf(n_epochs=30, lr=2.0, optimizer=torch.optim.SGD,
               early_stopping=True, patience=1).fit(X, y)
    assert all(h["valid_loss"] is None for h in clf.history_)
    losses = [h["train_loss"] for h in clf.history_]
    assert clf.n_epochs_ == len(losses) < 30
    # It stopped ``patience`` epochs after the lowest training loss.
    assert len(losses) - 1 - int(np.argmin(losses)) == 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_failed_first_fit_leaves_no_model(strategy):
    X, y = _classification()
    clf = _clf(strategy, module=_models.Broken)
    with pytest.raises(ValueError, match="forward exploded"):
        clf.fit(X, y)
    with pytest.raises(NotFittedError):
        clf.predict(X)


@pytest.mark.parametrize("optimizer_state", ["keep", "reset", "average"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_option_at_once_releases_only_what_is_consumed(
        optimizer_state, strategy):
    # Futures released with delete_object cannot be passed to a task
    # again (the runtime raises): a full run with every option on shows
    # the trainer releases only futures nothing will read.
    # The same run on the sequential backend (tasks one at a time, in
    # the order submitted) is the yardstick: the synchronous strategy
    # gives its model; the asynchronous one merges in the order workers
    # finish, so its accuracy is compared, within ACC_TOL.
    X, y = _classification(n=150)

    def run():
        clf = _clf(strategy, n_workers=3, n_epochs=7, sync_every=2,
                   outer_lr=0.8,
                   outer_momentum=0.5, optimizer_state=optimizer_state,
                   early_stopping=True, patience=10,
                   validation_fraction=0.2, shuffle="global",
                   warm_start=True)
        clf.fit(X, y).fit(X, y)
        clf.partial_fit(X, y)
        return clf

    clf = run()
    assert clf.n_epochs_ == 15
    try:
        use_backend("sequential")
        yardstick = run()
    finally:
        use_backend("local")
    if strategy == "sync":
        _same_model(clf, yardstick, atol=1e-5)
    assert abs(clf.score(X, y) - yardstick.score(X, y)) <= ACC_TOL


@pytest.mark.parametrize("strategy", ["sync", "async"])
def test_warm_up_is_the_first_epoch_of_training_and_its_record_says_so(
        strategy):
    # lr_scaling="linear" at 2 replicas: the rate is 2 x lr, half of it
    # in the first epoch of training; a warm_start fit that continues
    # trains at the full rate from its first epoch, and history_ says
    # which epoch was warmed up.
    X, y = _classification()
    clf = _clf(strategy, optimizer=torch.optim.SGD, lr=0.05,
               lr_scaling="linear", n_epochs=2).fit(X, y)
    clf.set_params(warm_start=True).fit(X, y)
    rates = [h["lr"] for h in clf.history_]
    warm = [h["schedule"]["warmup"] for h in clf.history_]
    assert rates == pytest.approx([0.05, 0.1, 0.1, 0.1])
    assert warm == [True, False, False, False]
