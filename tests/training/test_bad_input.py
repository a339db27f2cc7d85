"""What users get wrong, thrown at the public API.

Each mistake must raise an error naming it, before any training task
runs (the module's forward logs every call made in training mode, which
only training tasks use), and leave the estimator as it was.
"""

import os
import threading

import numpy as np
import pytest
import torch

import dislib_nn as dnn
from dislib_nn import (SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from dislib_nn.exceptions import (InvalidParameterError, NotFittedError,
                                  ShapeError)
from dislib_nn.runtime import barrier
from tests.training._faults import RaisingInit, Recorder, VectorLoss
from tests.training._models import MLP

rng = np.random.RandomState(0)
X = rng.randn(20, 4).astype("float32")
Y = (X[:, 0] > 0).astype(np.int64)
Y_REG = X[:, 1].copy()


def _with(array, index, value):
    out = array.astype("float32").copy()
    out[index] = value
    return out


def _clf(log, **params):
    base = dict(module=Recorder, module__log=str(log), n_epochs=1,
                n_workers=2, batch_size=4, random_state=0)
    return SyncEpochAveragingClassifier(**dict(base, **params))


def _reg(log, **params):
    base = dict(module=MLP, n_epochs=1, n_workers=2, batch_size=4,
                random_state=0)
    return SyncEpochAveragingRegressor(**dict(base, **params))


def _not_callable_optimizer(params, lr):
    return [p for p in params]


# (estimator maker, its parameters, X, y, error, message)
FIT_MISTAKES = {
    "strings": (_clf, {}, X.astype("U8"), Y, ValueError,
                "dtype='numeric' is not compatible with arrays of "
                "bytes/strings"),
    "object_array": (_clf, {}, np.array([[1.0, "a", 2.0, 3.0]] * 20,
                                        dtype=object), Y, ValueError,
                     "could not convert string to float: 'a'"),
    "complex": (_clf, {}, X.astype(complex), Y, ValueError,
                "Complex data not supported"),
    "nan_in_x": (_clf, {}, _with(X, (3, 1), np.nan), Y, ValueError,
                 "Input X contains NaN"),
    "inf_in_x": (_clf, {}, _with(X, (3, 1), np.inf), Y, ValueError,
                 "Input X contains infinity"),
    "nan_in_x_ds": (_clf, {}, lambda: dnn.from_array(
        _with(X, (7, 2), np.nan), block_size=5), Y, ValueError,
        r"Input X contains NaN or infinity \(in block 1\)"),
    "inf_in_y_ds": (_reg, {}, X, lambda: dnn.from_array(
        _with(Y_REG, 3, np.inf), block_size=5), ValueError,
        r"Input y contains NaN or infinity \(in block 0\)"),
    "nan_in_y_regressor": (_reg, {}, X, _with(Y_REG, 2, np.nan),
                           ValueError, "Input y contains NaN"),
    "nan_label": (_clf, {}, X, _with(Y, 2, np.nan), ValueError,
                  "Input y contains NaN or infinity"),
    "x_not_the_module_input": (
        _clf, {"module__n_features_in": 4}, np.hstack([X, X]), Y,
        RuntimeError, r"shapes cannot be multiplied \(1x8 and 4x2\)"),
    "labels_2d": (_clf, {}, X, np.stack([Y, Y], axis=1), ShapeError,
                  r"one label per sample \(1-D\).*Got shape \(20, 2\)"),
    "targets_3d": (_reg, {}, X, np.zeros((20, 2, 2)), ValueError,
                   "Found array with dim 3"),
    "targets_not_matching_output": (
        _reg, {"module__n_outputs": 3}, X, Y_REG, ValueError,
        r"output has shape \(1, 3\) but the targets have shape \(1,\)"),
    "lengths": (_clf, {}, X, Y[:-1], ShapeError,
                "same number of samples. Got X with 20 and y with 19"),
    "empty_array": (_clf, {}, X[:0], Y[:0], ValueError,
                    r"Found array with 0 sample\(s\)"),
    "empty_ds_tensor": (_clf, {}, lambda: dnn.from_array(
        X, block_size=5)[0:0], Y[:0], ShapeError, "X is empty: it has 0 "
        "rows"),
    "one_row_ds_tensor": (_reg, {"n_workers": None}, lambda: dnn.from_array(
        X[:1], block_size=1), Y_REG[:1], ShapeError,
        r"needs at least 2 samples. Got X with 1 row \(one sample\)"),
    "one_row_classifier": (_clf, {"n_workers": None}, X[:1], Y[:1],
                           ValueError, r"one class only \(1\)"),
    "float_labels": (_clf, {}, X, Y + 0.5, ValueError,
                     "Unknown label type: continuous"),
    "one_class": (_clf, {}, X, np.zeros(20, np.int64), ValueError,
                  r"y holds one class only \(0\): a classifier needs "
                  r"samples of at least 2 classes"),
    "more_workers_than_rows": (
        _clf, {"n_workers": 21}, X, Y, InvalidParameterError,
        r"'n_workers' parameter .* must be at most the number of samples "
        r"of X \(20\).* Got 21"),
    "module_constructor_raises": (_reg, {"module": RaisingInit}, X, Y_REG,
                                  RuntimeError,
                                  "RaisingInit cannot be built"),
    "optimizer_is_a_string": (_clf, {"optimizer": "sgd"}, X, Y,
                              InvalidParameterError,
                              r"'optimizer' parameter .* Got 'sgd'"),
    "optimizer_is_a_module": (_clf, {"optimizer": torch.nn.Linear}, X, Y,
                              TypeError, r"optimizer Linear could not be "
                              r"built with lr=0.01"),
    "optimizer_returns_a_list": (
        _clf, {"optimizer": _not_callable_optimizer}, X, Y, TypeError,
        r"optimizer _not_callable_optimizer must build a "
        r"torch.optim.Optimizer .* It returned list"),
    "merge_precision_fp16": (
        _clf, {"merge_precision": "fp16"}, X, Y, InvalidParameterError,
        r"The 'merge_precision' parameter of SyncEpochAveragingClassifier "
        r"must be a str among \{'fp32', 'bf16'\}. Got 'fp16' instead."),
    "merge_delay_with_bf16": (
        _clf, {"merge_delay": 1, "merge_precision": "bf16"}, X, Y,
        InvalidParameterError,
        r"SyncEpochAveragingClassifier takes merge_delay=1 only with "
        r"merge_precision='fp32'.* Got merge_delay=1 and "
        r"merge_precision='bf16'."),
    "merge_delay_with_averaged_optimizers": (
        _clf, {"merge_delay": 1, "optimizer_state": "average"}, X, Y,
        InvalidParameterError,
        r"takes merge_delay=1 only with optimizer_state='keep' or "
        r"'reset'.* Got merge_delay=1 and optimizer_state='average'."),
    "sharded_with_bf16": (
        _clf, {"merge": "sharded", "merge_precision": "bf16"}, X, Y,
        InvalidParameterError,
        r"SyncEpochAveragingClassifier takes merge='sharded' only with "
        r"merge_precision='fp32'.* Got merge='sharded' and "
        r"merge_precision='bf16'; use merge='tree' for it."),
    "sharded_with_averaged_optimizers": (
        _clf, {"merge": "sharded", "optimizer_state": "average"}, X, Y,
        InvalidParameterError,
        r"takes merge='sharded' only with optimizer_state='keep' or "
        r"'reset'.* Got merge='sharded' and optimizer_state='average'"),
    "sharded_with_merge_delay": (
        _clf, {"merge": "sharded", "merge_delay": 1}, X, Y,
        InvalidParameterError,
        r"takes merge='sharded' only with merge_delay=0.* Got "
        r"merge='sharded' and merge_delay=1"),
    "merge_unknown": (
        _clf, {"merge": "ring"}, X, Y, InvalidParameterError,
        r"The 'merge' parameter of SyncEpochAveragingClassifier must be a "
        r"str among \{'tree', 'sharded'\}. Got 'ring' instead."),
    "nan_component_argument": (
        _clf, {"optimizer__momentum": float("nan")}, X, Y,
        InvalidParameterError,
        r"The 'optimizer__momentum' argument of "
        r"SyncEpochAveragingClassifier is NaN"),
    "checkpoint_dir_unwritable": (
        _clf, {"checkpoint_dir": "/proc/dislib_nn_checkpoints"}, X, Y,
        InvalidParameterError,
        r"The checkpoint folder '/proc/dislib_nn_checkpoints' cannot be "
        r"written: .*Give checkpoint_dir"),
    "criterion_not_reduced": (
        _clf, {"criterion": VectorLoss}, X, Y, ValueError,
        r"criterion VectorLoss must return a scalar .* It returned a "
        r"tensor of shape \(1,\)"),
}


def _value(v):
    return v() if callable(v) else v


def _training_forwards(log):
    if not os.path.exists(log):
        return 0
    with open(log) as f:
        return f.read().count("forward")


@pytest.mark.parametrize("case", list(FIT_MISTAKES))
def test_fit_mistake_is_named_before_training(case, backend, tmp_path):
    make, params, x, y, error, match = FIT_MISTAKES[case]
    log = tmp_path / "forwards.log"
    est = make(log, **params)
    before = dict(vars(est))
    with pytest.raises(error, match=match):
        est.fit(_value(x), _value(y))
    barrier()       # nothing left running
    assert _training_forwards(log) == 0
    assert vars(est).keys() == before.keys()
    assert all(vars(est)[k] is v for k, v in before.items())


def test_bad_input_to_a_warm_start_leaves_the_model(backend, tmp_path):
    log = tmp_path / "forwards.log"
    est = _clf(log).fit(X, Y)
    est.set_params(warm_start=True)
    weights = {k: v.clone() for k, v in est.module_.state_dict().items()}
    history = list(est.history_)
    forwards = _training_forwards(log)
    for x, y, match in ((_with(X, (0, 0), np.inf), Y, "infinity"),
                        (X[:, :3], Y, "X has 3 features, but "
                         "SyncEpochAveragingClassifier is expecting 4"),
                        (X, np.full(20, 7), "labels that were not seen")):
        with pytest.raises(ValueError, match=match):
            est.fit(x, y)
        with pytest.raises(ValueError, match=match):
            est.partial_fit(x, y)
    assert _training_forwards(log) == forwards
    assert est.history_ == history and est.n_epochs_ == 1
    for key, value in est.module_.state_dict().items():
        assert torch.equal(value, weights[key])


def test_predict_before_fit(tmp_path):
    est = _clf(tmp_path / "log")
    for method in (est.predict, est.predict_proba):
        with pytest.raises(NotFittedError, match="is not fitted yet"):
            method(X)
    assert not hasattr(est, "module_")


@pytest.mark.parametrize("as_ds", [False, True])
def test_predict_with_the_wrong_number_of_features(as_ds, backend,
                                                   tmp_path):
    est = _clf(tmp_path / "log").fit(X, Y)
    x = dnn.from_array(X[:, :3], block_size=5) if as_ds else X[:, :3]
    with pytest.raises(ValueError, match="X has 3 features, but "
                       "SyncEpochAveragingClassifier is expecting 4 "
                       "features as input"):
        est.predict(x)
    with pytest.raises(ValueError, match="X has 3 features"):
        est.score(x, Y)


def _sgd_without_options(params, lr):
    return torch.optim.SGD(params, lr=lr)


# (parameters, message): a mistyped component argument or prefix, named
# with the component, what it takes and the closest name.
PREFIXED_MISTAKES = {
    "module_argument": (
        {"module__hiden": 3},
        r"got module__hiden=3, an unknown parameter: module Recorder takes "
        r"no argument 'hiden'; its arguments are n_features_in, n_classes, "
        r"log\."),
    "module_argument_hint": (
        {"regressor": True, "module__hiden": 3},
        r"got module__hiden=3, an unknown parameter: module MLP takes no "
        r"argument 'hiden'; its arguments are n_features_in, n_outputs, "
        r"hidden\. Did you mean 'module__hidden'\?"),
    "optimizer_argument": (
        {"optimizer__momentun": 0.9},
        r"got optimizer__momentun=0.9, an unknown parameter: optimizer SGD "
        r"takes no argument 'momentun'; its arguments are momentum, "
        r"dampening, .* Did you mean 'optimizer__momentum'\?"),
    "optimizer_factory_argument": (
        {"optimizer": _sgd_without_options, "optimizer__momentum": 0.9},
        r"optimizer _sgd_without_options takes no argument 'momentum'; it "
        r"takes no arguments\."),
    "optimizer_lr": (
        {"optimizer__lr": 0.1},
        r"got optimizer__lr=0.1: the optimizer's learning rate is "
        r"SyncEpochAveragingClassifier's own 'lr' parameter .* Pass lr=0.1 "
        r"instead"),
    "criterion_argument": (
        {"criterion__label_smothing": 0.1},
        r"got criterion__label_smothing=0.1, an unknown parameter: "
        r"criterion CrossEntropyLoss takes no argument 'label_smothing'; "
        r"its arguments are weight, .* Did you mean "
        r"'criterion__label_smoothing'\?"),
    "lr_schedule_argument": (
        {"lr_schedule": torch.optim.lr_scheduler.StepLR,
         "lr_schedule__step_sise": 2},
        r"got lr_schedule__step_sise=2, an unknown parameter: lr_schedule "
        r"StepLR takes no argument 'step_sise'; its arguments are "
        r"step_size, .* Did you mean 'lr_schedule__step_size'\?"),
    "lr_schedule_arguments_without_a_scheduler": (
        {"lr_schedule__gamma": 0.5},
        r"lr_schedule__ arguments \(gamma\) were given, but lr_schedule is "
        r"not a torch scheduler class\. Got None"),
    "module_arguments_with_an_instance": (
        {"regressor": True, "module": MLP(), "module__hidden": 4},
        r"module__ arguments \(hidden\) were given, but module is an "
        r"instance \(MLP\)"),
    "empty_argument": (
        {"module__": 3},
        r"parameter 'module__' that names no argument of module"),
    "module_prefix": (
        {"modul__hidden": 3},
        r"'modul__' is not a component prefix; the prefixes are module__, "
        r"criterion__, optimizer__, lr_schedule__, outer_optimizer__\. "
        r"Did you mean "
        r"'module__hidden'\?"),
    "optimizer_prefix": (
        {"optimiser__momentum": 0.9},
        r"'optimiser__' is not a component prefix.* Did you mean "
        r"'optimizer__momentum'\?"),
    "criterion_prefix": (
        {"criterium__weight": None},
        r"Did you mean 'criterion__weight'\?"),
    "lr_schedule_prefix": (
        {"lr_schedul__gamma": 0.5},
        r"Did you mean 'lr_schedule__gamma'\?"),
}


@pytest.mark.parametrize("case", list(PREFIXED_MISTAKES))
@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_mistyped_component_argument_is_named_before_any_task(
        case, method, tmp_path):
    params, match = PREFIXED_MISTAKES[case]
    params = dict(params)
    log = tmp_path / "forwards.log"
    # The regressor's MLP logs no forward: the NaN below still shows
    # that no task ran before the error.
    make, y = (_reg, Y_REG) if params.pop("regressor", False) else (_clf, Y)
    est = make(log, **params)
    before = dict(vars(est))
    # X holds a NaN that only a task finds: the parameter error comes
    # first, before the data is looked at.
    x = dnn.from_array(_with(X, (7, 2), np.nan), block_size=5)
    with pytest.raises(InvalidParameterError, match=match) as info:
        getattr(est, method)(x, y)
    # TypeError too: what building the component would have raised.
    assert isinstance(info.value, TypeError)
    barrier()
    assert _training_forwards(log) == 0
    assert vars(est).keys() == before.keys()
    assert all(vars(est)[k] is v for k, v in before.items())


def test_component_arguments_that_fit_are_accepted(tmp_path):
    est = _reg(tmp_path, module__hidden=4, optimizer__momentum=0.9,
               criterion__reduction="mean",
               lr_schedule=torch.optim.lr_scheduler.StepLR,
               lr_schedule__step_size=1, lr_schedule__gamma=0.5).fit(X, Y_REG)
    assert est.module_.body[0].out_features == 4
    assert [h["lr"] for h in est.history_] == [0.01]


@pytest.mark.parametrize("make", [
    lambda: SyncEpochAveragingClassifier(module=torch.nn.Linear(5, 2),
                                         n_workers=2),
    lambda: SyncEpochAveragingRegressor(module=torch.nn.Linear(5, 1),
                                        n_workers=2, validation_fraction=0.2),
], ids=["classifier", "regressor-validation"])
@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_a_module_that_does_not_take_the_rows_starts_no_worker_pool(
        local, make, method):
    """The one-sample trial runs on the master before X is blocked: a
    fresh process learns of the mistake without starting a pool."""
    dnn.runtime.shutdown()
    est = make()
    target = Y if isinstance(est, SyncEpochAveragingClassifier) else Y_REG
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes"):
        getattr(est, method)(X, target)
    assert not dnn.runtime.started()


class _HoldsALock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 2)
        self.helper = torch.nn.Module()
        self.helper.guard = threading.Lock()

    def forward(self, x):
        return self.body(x)


def test_a_module_instance_that_cannot_be_copied_names_the_attribute(
        sequential):
    est = SyncEpochAveragingClassifier(module=_HoldsALock(), n_workers=2)
    with pytest.raises(TypeError, match=r"module is an instance "
                       r"\(_HoldsALock\), which fit copies.*once for every "
                       r"worker.*attribute 'helper.guard' \(a _thread.lock\) "
                       r"cannot be copied.*Pass the class instead"):
        est.fit(X, Y)
    assert not hasattr(est, "module_")
