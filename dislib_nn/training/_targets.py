"""What differs between classification and regression, in one place.

An estimator holds one of :data:`CLASSIFICATION` and :data:`REGRESSION`;
everything that depends on the kind of target asks it: how ``y`` is
checked and encoded, the dtype the criterion gets, how the module's
output is checked and shaped, which sizes ``fit`` fills in for the
module, and which statistics and score a block of predictions yields.
Both objects are picklable (tasks receive them inside
:class:`OutputAdapter`).
"""

import numpy as np
import torch

from dislib_nn.data import DsTensor
from dislib_nn.exceptions import ShapeError
from dislib_nn.runtime import wait_on
from dislib_nn.training import _fitted
from dislib_nn.training import _input_checks as _inputs
from dislib_nn.training import _labels, _metrics
from dislib_nn.training._outputs import pick
from dislib_nn.training._sklearn_checks import (check_array,
                                                check_classification_targets,
                                                column_or_1d)
from dislib_nn.training.tasks import _blocks

__all__ = ["CLASSIFICATION", "REGRESSION", "OutputAdapter"]

_ELEMENTWISE_LOSSES = (torch.nn.MSELoss, torch.nn.L1Loss,
                       torch.nn.SmoothL1Loss, torch.nn.HuberLoss)


class _Classification:
    """Labels of any values, encoded as int64 class indices."""

    name = "classifier"
    default_criterion = torch.nn.CrossEntropyLoss

    def __reduce__(self):
        return "CLASSIFICATION"

    def check_ds(self, y, name):
        if y.sample_shape not in ((), (1,)):
            raise ShapeError(
                f"{name} must hold one label per sample; multi-output "
                f"classification is not supported. Got a DsTensor of "
                f"shape {y.shape}.")

    def check_array(self, y, name, finite):
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] != 1:
            raise ShapeError(
                f"{name} must hold one label per sample (1-D); multi-output "
                f"classification is not supported. Got shape {y.shape}.")
        y = column_or_1d(y, warn=True)
        if y.dtype.kind in "fc" or y.dtype == object:
            _check_finite_labels(y, name)
        check_classification_targets(y)
        return y

    def y_dtype(self, float_dtype):
        return torch.int64

    def target_shape(self, y):
        """A target's shape as the training step sees it: a class index."""
        return ()

    def learn(self, estimator, y, reset, classes):
        """Learn ``classes_`` at the first fit (labels are checked against
        them when encoded, later)."""
        if not reset:
            return
        if classes is not None:
            learned = np.unique(np.asarray(classes))
        elif _inputs.is_ds_tensor(y):
            parts = wait_on([_blocks._unique_labels(b)
                             for b in y.blocks])
            learned = _labels.union(parts)
        else:
            learned = np.unique(y)
        if len(learned) < 2:
            raise ValueError(
                f"y holds one class only "
                f"({learned[:1].tolist()[0]!r}): a classifier "
                f"needs samples of at least 2 classes. (partial_fit takes "
                f"them all in classes= on its first call.)")
        _fitted.learn_classes(estimator, learned)

    def as_ds_tensor(self, estimator, y, block_sizes, np_dtype):
        """Labels as a DsTensor of class indices (by tasks for DsTensors)."""
        if _inputs.is_ds_tensor(y):
            blocks = [_blocks._encode_labels(b, estimator.classes_, "y")
                      for b in y.blocks]
            return DsTensor(blocks, y.block_sizes, (), torch.int64,
                            owned=True)
        y = _labels.encode(y, estimator.classes_, "y")
        return _inputs.as_ds_tensor(y, block_sizes=block_sizes)

    def score_labels(self, estimator, y):
        """``(y, classes)`` for block scoring: arrays are encoded here,
        DsTensors by the tasks (``classes`` is then ``classes_``)."""
        if _inputs.is_ds_tensor(y):
            return y, estimator.classes_
        return _labels.encode(y, estimator.classes_, "y"), None

    def inferred_sizes(self, estimator, y):
        return {"n_classes": len(getattr(estimator, "classes_", ())),
                "n_features_in": getattr(estimator, "n_features_in_",
                                         None)}

    def adapter(self, estimator, y_ndim, x_dtype, float_dtype):
        return OutputAdapter(self, len(estimator.classes_), False, x_dtype,
                             float_dtype, *_selection(estimator),
                             layout=_fitted.packed_layout(estimator,
                                                          float_dtype))

    def shape_output(self, adapter, output, criterion, target):
        # predict and predict_proba read one score per class, whatever
        # the loss: check it at the first batch, not after training.
        n = adapter.n_classes
        if output.ndim != 2 or output.shape[1] != n:
            raise ValueError(
                f"the module's output has shape {tuple(output.shape)}, "
                f"but a classifier needs one column per class: shape "
                f"({output.shape[0]}, {n}) for the {n} classes of y. Give "
                f"the module {n} outputs (a module class whose __init__ "
                f"takes n_classes gets it filled in by fit).")
        return output

    def score_target(self, adapter, y):
        return y

    def block_stats(self, output, y, loss_sum=None, wants=()):
        return _metrics.class_stats(output, y, loss_sum, wants)


class _Regression:
    """Real targets, 1-D or 2-D (multi-output), in the module's dtype."""

    name = "regressor"
    default_criterion = torch.nn.MSELoss

    def __reduce__(self):
        return "REGRESSION"

    def check_ds(self, y, name):
        if len(y.sample_shape) > 1:
            raise ShapeError(
                f"{name} must be 1-D or 2-D (one row per sample). Got a "
                f"DsTensor of shape {y.shape}.")

    def check_array(self, y, name, finite):
        y = check_array(y, dtype="numeric", ensure_2d=False, input_name=name,
                        **finite)
        if y.ndim > 2:
            raise ShapeError(f"{name} must be 1-D or 2-D. Got shape "
                             f"{y.shape}.")
        return y

    def y_dtype(self, float_dtype):
        return float_dtype

    def target_shape(self, y):
        """A target's shape as the training step sees it: y's row."""
        return tuple(y.shape[1:])

    def learn(self, estimator, y, reset, classes):
        """Remember (first fit) or check (later) the targets' dimensions."""
        y_ndim = len(y.shape)
        if reset:
            _fitted.learn_targets(estimator, y_ndim)
        elif y_ndim != estimator._y_ndim:
            raise ShapeError(
                f"y has {y_ndim} dimension(s), but this estimator was "
                f"fitted with {estimator._y_ndim}-D targets.")

    def as_ds_tensor(self, estimator, y, block_sizes, np_dtype):
        """Targets as a DsTensor in the module's dtype."""
        return _inputs.as_ds_tensor(
            y, block_sizes=block_sizes,
            dtype=None if _inputs.is_ds_tensor(y) else np_dtype)

    def score_labels(self, estimator, y):
        return y, None

    def inferred_sizes(self, estimator, y):
        return {"n_outputs": 1 if len(y.shape) == 1 else y.shape[1],
                "n_features_in": getattr(estimator, "n_features_in_",
                                         None)}

    def adapter(self, estimator, y_ndim, x_dtype, float_dtype):
        return OutputAdapter(self, None, y_ndim == 1, x_dtype, float_dtype,
                             *_selection(estimator),
                             layout=_fitted.packed_layout(estimator,
                                                          float_dtype))

    def shape_output(self, adapter, output, criterion, target):
        if adapter.flat_target and output.ndim == 2 and output.shape[1] == 1:
            output = output[:, 0]
        if (target is not None and isinstance(criterion, _ELEMENTWISE_LOSSES)
                and output.shape != target.shape):
            raise ValueError(
                f"the module's output has shape {tuple(output.shape)} but "
                f"the targets have shape {tuple(target.shape)}; "
                f"{type(criterion).__name__} would broadcast them against "
                f"each other. Make the module return one value per target "
                f"column ({tuple(target.shape)[1:] or 'a 1-D output'}).")
        return output

    def score_target(self, adapter, y):
        if adapter.flat_target and y.ndim == 2:
            return y[:, 0]
        return y

    def block_stats(self, output, y, loss_sum=None, wants=()):
        return _metrics.regression_stats(output, y, loss_sum, wants)


CLASSIFICATION = _Classification()
REGRESSION = _Regression()


class OutputAdapter:
    """Checks the module's output against the targets, and shapes it.

    Parameters
    ----------
    targets : CLASSIFICATION or REGRESSION
    n_classes : int or None
        For classifiers: how many columns the output must have.
    flat_target : bool
        For regressors: y was 1-D, so an output of shape (n, 1) is read as
        (n,) (a column would broadcast against a 1-D target in the loss).
    x_dtype : torch.dtype
        The dtype the module receives inputs in: its floating dtype for
        floating-point X, int64 or bool for integer or boolean X (see
        :mod:`._input_dtype`).
    float_dtype : torch.dtype
        The module's floating dtype (a regressor's targets are cast to
        it).
    select : int, str or None
        The estimator's ``output``: which of several outputs of the
        forward is predicted (:func:`._outputs.pick`).
    loss_input : {"output", "all"}
        The estimator's ``loss_input``: the criterion gets the selected
        output, or all the forward returned.
    layout : PackedLayout or None
        For a module of several inputs: how they lie in X's packed rows
        (:mod:`.tasks._packed`; ``x_dtype`` is then ``torch.uint8``).
    """

    def __init__(self, targets, n_classes, flat_target, x_dtype,
                 float_dtype, select=None, loss_input="output",
                 layout=None):
        self.targets = targets
        self.n_classes = n_classes
        self.flat_target = flat_target
        self.x_dtype = x_dtype
        self.float_dtype = float_dtype
        self.select = select
        self.loss_input = loss_input
        self.layout = layout

    def y_dtype(self):
        return self.targets.y_dtype(self.float_dtype)

    def forward(self, module, x):
        """``module``'s forward on a batch ``x`` of X's rows (unpacked
        into the module's inputs when it takes several)."""
        if self.layout is None:
            return module(x)
        return self.layout.call(module, x)

    def __call__(self, output, criterion=None, target=None):
        """The predictions in ``output`` (what the forward returned),
        checked and shaped for the targets."""
        return self.targets.shape_output(
            self, pick(output, self.select), criterion, target)

    def loss(self, output, criterion, target):
        """The criterion's loss of a batch whose forward returned
        ``output``: on the predictions, or on all of it."""
        predictions = self(output, criterion, target)
        if self.loss_input == "all":
            return criterion(output, target)
        return criterion(predictions, target)

    def __setstate__(self, state):
        # Adapters pickled before outputs could be selected.
        state.setdefault("select", None)
        state.setdefault("loss_input", "output")
        state.setdefault("layout", None)
        self.__dict__.update(state)


def _selection(estimator):
    return (getattr(estimator, "output", None),
            getattr(estimator, "loss_input", "output"))


def _check_finite_labels(y, name):
    if y.dtype == object:
        numeric = [v for v in y if isinstance(v, (float, np.floating))]
        bad = any(not np.isfinite(v) for v in numeric)
    else:
        bad = not np.all(np.isfinite(y))
    if bad:
        raise ValueError(f"Input {name} contains NaN or infinity.")
