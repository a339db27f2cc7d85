"""Saving a fitted estimator's weights and parameters, and loading them.

A file holds the estimator's parameters, the fitted attributes that
``predict`` and ``score`` need (classes, input shape, history) and the
module's ``state_dict``; not the optimizer states or anything of the
training data. It is written with ``torch.save`` to a temporary file,
then renamed, so a crash never leaves a torn file.
"""

import os

import torch

from dislib_nn.exceptions import NotFittedError, ShapeError

__all__ = ["save_estimator", "load_estimator", "load_weights"]

_FORMAT = "dislib_nn.estimator"
_VERSION = 1
# Fitted attributes that only training needs.
_TRAINING_ONLY = ("module_", "optimizer_states_", "_carried", "_clock",
                  "_extra_params")


def save_estimator(est, path):
    """Write ``est``'s parameters, fitted attributes and weights."""
    if not est.__sklearn_is_fitted__():
        raise NotFittedError(
            f"This {type(est).__name__} instance is not fitted yet: there "
            f"are no weights to save. Call 'fit' first.")
    params = est.get_params(deep=False)
    fitted = {k: v for k, v in vars(est).items()
              if k not in params and k not in _TRAINING_ONLY}
    content = {"format": _FORMAT, "version": _VERSION,
               "estimator": _class_name(type(est)), "params": params,
               "fitted": fitted,
               "weights": {k: v.detach().cpu().clone() for k, v in
                           est.module_.state_dict().items()}}
    path = os.fspath(path)
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        torch.save(content, temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def load_estimator(est, path, build_module):
    """Give ``est`` the fitted state saved in ``path``.

    ``est``'s own parameters decide the module (``build_module(inferred,
    sample_shape)`` builds it); an estimator whose ``module`` is None
    takes every parameter from the file first. The file is unpickled:
    load only files you trust.
    """
    content = _read(path)
    saved_class = content["estimator"]
    if saved_class != _class_name(type(est)):
        raise TypeError(
            f"{os.fspath(path)!r} holds a {saved_class}; it cannot be "
            f"loaded into a {_class_name(type(est))}.")
    before = dict(vars(est))
    extra = dict(getattr(est, "_extra_params", {}))
    fitted = content["fitted"]
    try:
        if est.module is None:
            est.set_params(**content["params"])
        module = build_module(fitted.get("_inferred"),
                              fitted.get("_sample_shape"))
        load_weights(module, content["weights"], source=os.fspath(path))
    except BaseException:
        vars(est).clear()
        vars(est).update(before)
        if "_extra_params" in before:
            est._extra_params = extra
        raise
    vars(est).update(fitted)
    est.module_ = module.cpu().eval()
    est.optimizer_states_ = None
    est._velocity = None
    return est


def load_weights(module, state, source="the saved weights"):
    """``module.load_state_dict(state)``, with an error naming what differs."""
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = {k: (tuple(state[k].shape), tuple(own[k].shape))
              for k in sorted(set(own) & set(state))
              if tuple(state[k].shape) != tuple(own[k].shape)}
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"keys the module has and {source} lacks: "
                         f"{missing}")
        if unexpected:
            parts.append(f"keys {source} has and the module lacks: "
                         f"{unexpected}")
        if shapes:
            parts.append("different shapes (saved, module): " + ", ".join(
                f"{k} {a} vs {b}" for k, (a, b) in shapes.items()))
        raise ShapeError(
            f"{source} do not fit module {type(module).__name__} (another "
            f"architecture?): " + "; ".join(parts) + ".")
    module.load_state_dict(state)


def _read(path):
    try:
        content = torch.load(os.fspath(path), map_location="cpu",
                             weights_only=False)
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unreadable file
        raise ValueError(f"{os.fspath(path)!r} is not a file written by "
                         f"save(): {exc}") from exc
    if not isinstance(content, dict) or content.get("format") != _FORMAT:
        raise ValueError(f"{os.fspath(path)!r} is not a file written by "
                         f"an estimator's save().")
    if content.get("version") != _VERSION:
        raise ValueError(
            f"{os.fspath(path)!r} was written in format version "
            f"{content.get('version')!r}; this dislib_nn reads version "
            f"{_VERSION}.")
    return content


def _class_name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"
