"""What a fit learns: the one module that writes it.

An estimator's fitted state is the attributes in :data:`ATTRIBUTES`,
public (``module_``, ``history_``...) and private (the seed, the sizes
filled in for the module, the sample shape, the output adapter, what the
strategy carries between fits). Every path that leaves an estimator
fitted writes them through the functions below, so that each path leaves
the same attributes:

- ``fit`` and ``partial_fit``: :func:`learn_inputs`, :func:`learn_classes`
  or :func:`learn_targets`, :func:`start` (a new model),
  :func:`set_workers`, :func:`end_epoch` (the history callback),
  :func:`finish` (the model fetched after the last epoch),
  :func:`note_batchnorm_recomputed`;
- ``fit(resume=True)``: :func:`start`, then :func:`resume` (the
  checkpoint's model, history and carried state);
- ``load``: :func:`for_file` (what ``save`` writes), then :func:`loaded`;
- unpickling restores ``__dict__`` as pickled, which holds them all;
- a failed fit or load puts the estimator back with :func:`snapshot`.
"""

import numpy as np

from dislib_nn.training import _input_dtype
from dislib_nn.training._components import first_float_dtype

__all__ = ["PUBLIC", "PRIVATE", "ATTRIBUTES", "learn_inputs",
           "learn_several_inputs", "input_layout", "packed_layout",
           "settle_inputs", "input_kind", "learn_classes", "learn_targets", "start", "set_workers",
           "end_epoch", "finish", "note_batchnorm_recomputed",
           "resume", "for_file", "loaded",
           "snapshot", "Snapshot"]

#: The fitted attributes of the public API (``n_features_in_`` for 2-D X
#: only, ``feature_names_in_`` for a DataFrame with string column names
#: only, ``classes_`` for classifiers only).
PUBLIC = ("module_", "history_", "n_epochs_", "classes_", "n_features_in_",
          "feature_names_in_", "n_workers_", "optimizer_states_")
#: The private ones: the base seed (:mod:`._seeds`), the sizes filled in
#: for the module, the sample shape, the inputs' kind (``"float"``,
#: ``"int"`` or ``"bool"``: see :mod:`._input_dtype`), the targets'
#: dimensions (regressors), the inputs' names, shapes and kinds for a
#: module of several inputs (:class:`._several_inputs.InputLayout` as
#: plain data), the output adapter, and what the strategy carries to the
#: next fit
#: besides the optimizer states (``Carry.state``: the outer momentum
#: buffer, the outer optimizer's state...).
PRIVATE = ("_seed", "_inferred", "_sample_shape", "_input_kind",
           "_input_layout", "_y_ndim", "_output", "_carried")
ATTRIBUTES = PUBLIC + PRIVATE
#: What ``save`` does not write as attributes: the module goes as its
#: ``state_dict`` and the adapter is derived again at ``load``. What the
#: strategy carries (optimizer states, ``_carried``) is written, so that
#: a loaded estimator trains on as the one saved would.
_NOT_IN_FILE = ("module_", "_output")


# ------------------------------------------------------------------ fit
def learn_inputs(est, sample_shape, feature_names, kind):
    """The sample shape, the inputs' kind, ``n_features_in_`` (2-D X)
    and ``feature_names_in_`` (a DataFrame with string column names) of
    the first fit."""
    est._sample_shape = tuple(sample_shape)
    est._input_kind = kind
    vars(est).pop("_input_layout", None)
    _set_or_drop(est, "n_features_in_", sample_shape[0]
                 if len(sample_shape) == 1 else None)
    _set_or_drop(est, "feature_names_in_", feature_names)


def learn_several_inputs(est, layout):
    """The inputs of a first fit on several (an
    :class:`~._several_inputs.InputLayout`); the sample shape, that of
    their packed rows, is set when the module is built (:func:`start`)."""
    learn_inputs(est, (), None, _input_dtype.SEVERAL)
    est._input_layout = layout.to_plain()


def input_layout(est):
    """The :class:`~._several_inputs.InputLayout` ``est`` was fitted on,
    or None for one array X."""
    plain = getattr(est, "_input_layout", None)
    if plain is None:
        return None
    from dislib_nn.training._several_inputs import InputLayout
    return InputLayout.from_plain(plain)


def packed_layout(est, float_dtype):
    """How several inputs lie in X's packed rows for a module of
    ``float_dtype`` (:class:`~.tasks._packed.PackedLayout`), or None."""
    layout = input_layout(est)
    return None if layout is None else layout.packed(float_dtype)


def settle_inputs(est, kind):
    """The kind the module takes X in (``"float"`` for integer X that
    its forward takes as floats only; see :func:`._input_dtype.settle`)."""
    est._input_kind = kind


def learn_classes(est, classes):
    """``classes_``: the sorted labels a classifier predicts."""
    est.classes_ = np.asarray(classes)


def learn_targets(est, y_ndim):
    """The dimensions of a regressor's targets (1: flat, 2: columns)."""
    est._y_ndim = int(y_ndim)


def start(est, module, seed, inferred):
    """A new model: ``module`` (built, on the CPU), no epoch run yet."""
    est._seed = int(seed)
    est._inferred = dict(inferred)
    est.module_ = module.cpu()
    est._output = _adapter(est)
    if est._output.layout is not None:
        est._sample_shape = (est._output.layout.width,)
    est.history_ = []
    est.n_epochs_ = 0
    est.optimizer_states_ = None
    est._carried = {}


def set_workers(est, n_workers):
    """``n_workers_``: the replicas the current fit trains."""
    est.n_workers_ = int(n_workers)


def end_epoch(est, record):
    """One more epoch read: its record joins ``history_``."""
    est.history_.append(record)
    est.n_epochs_ += 1


def finish(est, state, optimizer_states, carried):
    """The model, optimizer states and carried state after the last
    epoch, fetched from the workers."""
    est.module_.load_state_dict(state)
    est.module_.eval()
    est.optimizer_states_ = optimizer_states
    est._carried = dict(carried)


def note_batchnorm_recomputed(est):
    """The fit's final model got its BatchNorm statistics recomputed
    (after :func:`finish`): its last record says so."""
    est.history_[-1]["batchnorm_recomputed"] = True


def resume(est, model, n_epochs, history, optimizer_states, carried):
    """Continue from a checkpoint (after :func:`start` built the model):
    its model, epoch count, history and what the strategy carried."""
    est.module_.load_state_dict(model)
    est.module_.eval()
    est.history_ = list(history)
    est.n_epochs_ = int(n_epochs)
    est.optimizer_states_ = optimizer_states
    est._carried = dict(carried or {})


# ---------------------------------------------------------- save, load
def for_file(est):
    """The fitted attributes ``save`` writes (the weights go apart)."""
    return {name: getattr(est, name) for name in ATTRIBUTES
            if name not in _NOT_IN_FILE and hasattr(est, name)}


def loaded(est, attributes, module):
    """Fitted from a file: its attributes (what the strategy carries
    included; none in a file written before it was saved) and ``module``
    with the saved weights in it."""
    _forget(est)
    for name, value in attributes.items():
        if name in ATTRIBUTES and name not in _NOT_IN_FILE:
            setattr(est, name, value)
    if "history_" not in attributes:
        est.history_ = []
    if "_input_kind" not in attributes:     # written before it was kept
        est._input_kind = _input_dtype.FLOAT
    est.module_ = module.cpu().eval()
    est._output = _adapter(est)
    est.optimizer_states_ = attributes.get("optimizer_states_")
    est._carried = dict(attributes.get("_carried") or {})


# ------------------------------------------------------------- failures
def snapshot(est):
    """What ``est`` holds now, to put back if a fit or load fails."""
    return Snapshot(est)


class Snapshot:
    """A copy of an estimator's state, taken before ``fit`` or ``load``.

    A failed or interrupted call (KeyboardInterrupt included) calls
    :meth:`restore`, which leaves the estimator as it was: unfitted after
    a first fit, with its earlier model, history and optimizer states
    after a warm start or ``partial_fit``, with its own parameters after
    a ``load`` that took the file's.
    """

    def __init__(self, est):
        self.est = est
        self.attributes = dict(vars(est))
        extra = self.attributes.get("_extra_params")
        self.extra = None if extra is None else dict(extra)
        history = self.attributes.get("history_")
        self.history = list(history) if history is not None else None
        module = self.attributes.get("module_")
        self.weights = None if module is None else {
            k: v.detach().clone() for k, v in module.state_dict().items()}

    def restore(self):
        vars(self.est).clear()
        vars(self.est).update(self.attributes)
        if self.extra is not None:
            self.est._extra_params.clear()
            self.est._extra_params.update(self.extra)
        if self.history is not None:
            self.est.history_[:] = self.history
        if self.weights is not None:
            self.est.module_.load_state_dict(self.weights)


# -------------------------------------------------------------- helpers
def _adapter(est):
    """The output adapter (:class:`~._targets.OutputAdapter`), derived
    from the targets learned, the inputs' kind and the module's floating
    dtype."""
    float_dtype = first_float_dtype(est.module_)
    return est._targets.adapter(
        est, getattr(est, "_y_ndim", 1), _input_dtype.module_input_dtype(
            input_kind(est), float_dtype), float_dtype)


def input_kind(est):
    """The kind of inputs ``est`` was fitted on (``"float"`` for an
    estimator pickled before the kind was kept)."""
    return getattr(est, "_input_kind", _input_dtype.FLOAT)


def _forget(est):
    for name in ATTRIBUTES:
        vars(est).pop(name, None)


def _set_or_drop(est, name, value):
    if value is None:
        vars(est).pop(name, None)
    else:
        setattr(est, name, value)
