"""X as several inputs: a dict (keyword arguments) or a tuple
(positional arguments) of arrays or DsTensors with equal rows.

Each input is checked as a single X is (scikit-learn's checks for
arrays, tasks for DsTensors), under its own name (``X['x_cat']``), and
keeps its kind: floating-point inputs reach the module in its floating
dtype, integer ones as int64, boolean ones as bool (no fallback to
floats: a module that takes several inputs says which it wants). Fit
learns their names, sample shapes and kinds (:class:`InputLayout`);
later calls must give the same. The inputs travel packed into one row
of bytes per sample (:mod:`.tasks._packed`).

A tuple is several inputs when each of its elements is an array, a
tensor or a DsTensor (anything with a ``shape``); a tuple of rows
(of numbers or lists) is one X, as scikit-learn reads it.
"""

from collections.abc import Mapping

import numpy as np
import torch

from dislib_nn.data import DsTensor, from_array
from dislib_nn.exceptions import ShapeError
from dislib_nn.training import _input_checks as _inputs
from dislib_nn.training import _input_dtype
from dislib_nn.training.tasks import _blocks
from dislib_nn.training.tasks._packed import PackedLayout

__all__ = ["is_several", "InputLayout", "SeveralInputs", "check_several",
           "check_same", "materialize_several", "one_given_to_several"]


def is_several(X):
    """Whether ``X`` is several inputs (see the module)."""
    if isinstance(X, Mapping):
        return True
    return isinstance(X, tuple) and len(X) > 0 and all(
        hasattr(part, "shape") and len(getattr(part, "shape")) > 0
        for part in X)


class InputLayout:
    """The inputs fit learned: names (or positions), sample shapes,
    kinds (``"float"``, ``"int"``, ``"bool"``).

    Kept with the fitted estimator as plain data (:meth:`to_plain`), so
    that ``save`` writes it and ``load`` reads it without running code.
    """

    def __init__(self, keys, keyed, shapes, kinds):
        self.keys = tuple(keys)
        self.keyed = bool(keyed)
        self.shapes = tuple(tuple(s) for s in shapes)
        self.kinds = tuple(kinds)

    def to_plain(self):
        return (self.keyed, tuple(zip(self.keys, self.shapes, self.kinds)))

    @classmethod
    def from_plain(cls, plain):
        keyed, inputs = plain
        keys, shapes, kinds = zip(*inputs)
        return cls(keys, keyed, shapes, kinds)

    def packed(self, float_dtype):
        """The :class:`PackedLayout` of a module of ``float_dtype``."""
        return PackedLayout(
            self.keys, self.keyed, self.shapes,
            [_input_dtype.module_input_dtype(k, float_dtype)
             for k in self.kinds])

    def names(self):
        return [f"X[{k!r}]" for k in self.keys]

    def __eq__(self, other):
        return isinstance(other, InputLayout) and \
            self.to_plain() == other.to_plain()


class SeveralInputs:
    """Checked inputs: each an array or a DsTensor, with equal rows."""

    def __init__(self, layout, parts):
        self.layout = layout
        self.parts = list(parts)
        self.shape = (self.parts[0].shape[0],)

    def packed(self, layout):
        """The inputs packed by ``layout``: a ``uint8`` array of
        ``(n, width)`` when all are arrays; else a DsTensor, packed block
        by block by tasks (arrays split like the DsTensors)."""
        tensors = [p for p in self.parts if _inputs.is_ds_tensor(p)]
        if not tensors:
            return layout.pack(self.parts).numpy()
        sizes = tuple(tensors[0].block_sizes)
        names = self.layout.names()
        for name, part in zip(names, self.parts):
            if _inputs.is_ds_tensor(part) and \
                    tuple(part.block_sizes) != sizes:
                raise ShapeError(
                    f"The inputs of X that are DsTensors must be split "
                    f"into the same blocks: {names[0]} has block sizes "
                    f"{sizes} but {name} has {tuple(part.block_sizes)}.")
        parts = [p if _inputs.is_ds_tensor(p) else from_array(
                     np.asarray(p), block_size=list(sizes))
                 for p in self.parts]
        blocks = [_blocks._pack_block(layout, list(group))
                  for group in zip(*(p.blocks for p in parts))]
        return DsTensor(blocks, sizes, (layout.width,), torch.uint8,
                        owned=True)


def check_several(X, name="X"):
    """``X`` (a dict or tuple of inputs) checked: a :class:`SeveralInputs`.

    Raises TypeError for a dict whose keys are not strings (they become
    the forward's keyword arguments), ShapeError for no inputs or inputs
    with different numbers of rows, and each input's own error (named
    ``X['key']`` or ``X[0]``) otherwise.
    """
    keyed = isinstance(X, Mapping)
    keys = list(X) if keyed else list(range(len(X)))
    if not keys:
        raise ShapeError(f"{name} is an empty dict: give the module's "
                         f"inputs as {{name: array}}.")
    if keyed:
        bad = [k for k in keys if not isinstance(k, str)]
        if bad:
            raise TypeError(
                f"The keys of {name} name the forward's keyword arguments, "
                f"so they must be strings. Got {bad[0]!r} "
                f"({type(bad[0]).__name__}).")
    parts, shapes, kinds = [], [], []
    for key in keys:
        part_name = f"{name}[{key!r}]"
        try:
            part = _inputs.check_x(X[key], part_name, ensure_2d=False)
        except ValueError as exc:
            if part_name in str(exc):
                raise
            # scikit-learn's message does not always name the input.
            raise ValueError(f"{part_name}: {exc}") from None
        if len(part.shape) == 0:
            raise ShapeError(
                f"{part_name} is a scalar; each input needs one row per "
                f"sample.")
        if _inputs.is_ds_tensor(part):
            _inputs.check_finite_blocks(part, part_name)
        parts.append(part)
        shapes.append(tuple(part.shape[1:]))
        kinds.append(_input_dtype.kind_of(part.dtype))
    rows = [p.shape[0] for p in parts]
    if len(set(rows)) > 1:
        listed = ", ".join(f"{name}[{k!r}] has {r}"
                           for k, r in zip(keys, rows))
        raise ShapeError(
            f"The inputs of {name} must have the same number of rows (one "
            f"per sample): {listed}.")
    return SeveralInputs(InputLayout(keys, keyed, shapes, kinds), parts)


def check_same(fitted, inputs, name, estimator):
    """Raise if ``inputs`` (a :class:`SeveralInputs`) differ from those
    fit learned (``fitted``: an :class:`InputLayout`, or None for an
    estimator fitted on one array)."""
    est = type(estimator).__name__
    given = inputs.layout
    if fitted is None:
        raise ValueError(
            f"{name} is a {'dict' if given.keyed else 'tuple'} of "
            f"{len(given.keys)} inputs, but {est} was fitted on one array "
            f"X. Pass X as at fit.")
    if given.keyed != fitted.keyed or given.keys != fitted.keys:
        raise ValueError(
            f"{name} holds the inputs {_keys(given)}, but {est} was "
            f"fitted on {_keys(fitted)}. Pass the inputs given to fit.")
    for key, part, shape, f_shape, f_kind in zip(
            given.keys, inputs.parts, given.shapes, fitted.shapes,
            fitted.kinds):
        if shape != f_shape:
            raise ShapeError(
                f"{name}[{key!r}] has samples of shape {shape}, but {est} "
                f"was fitted on samples of shape {f_shape}.")
        _input_dtype.check_kind(f_kind, part.dtype, f"{name}[{key!r}]",
                                estimator)


def materialize_several(module, layout):
    """Shape the module's lazy layers, if it has any, with one zero
    sample of its inputs."""
    lazy = torch.nn.parameter.UninitializedTensorMixin
    if not any(isinstance(t, lazy) for t in
               list(module.parameters()) + list(module.buffers())):
        return
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            layout.call(module, torch.zeros((1, layout.width),
                                            dtype=torch.uint8))
    finally:
        module.train(training)


def one_given_to_several(fitted, name, estimator):
    """The error for one array given to an estimator fitted on several
    inputs."""
    kind = "dict" if fitted.keyed else "tuple"
    return ValueError(
        f"{name} is one array, but {type(estimator).__name__} was fitted "
        f"on several inputs, {_keys(fitted)}: pass {name} as a {kind} of "
        f"them.")


def _keys(layout):
    return (f"a dict with keys {list(layout.keys)}" if layout.keyed
            else f"a tuple of {len(layout.keys)}")

