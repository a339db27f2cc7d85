"""Modules whose forward returns several outputs.

Research models often return more than the predictions: logits with an
auxiliary head, a tuple ``(logits, features)``, a dict ``{"logits": ...,
"aux": ...}``, a named tuple. The estimators' ``output`` parameter names
the one that ``predict`` returns and the loss is computed on:

- ``None`` (the default): a tensor as it is, the first element of a
  tuple or list, the first value of a dict (in its insertion order);
- an int: that element of a tuple or list;
- a str: that key of a dict, or that field of a named tuple.

With ``loss_input="all"`` the criterion receives the whole output (the
tuple or dict, as the module returned it) and the targets, so that one
loss can combine several heads; predictions still come from ``output``.
"""

from collections.abc import Mapping

import torch

__all__ = ["pick", "LOSS_INPUTS"]

#: The values of ``loss_input``.
LOSS_INPUTS = ("output", "all")


def pick(output, select):
    """The prediction tensor of a forward's ``output`` (see the module).

    Raises ValueError or TypeError naming ``output=`` when ``select``
    does not fit what the forward returned.
    """
    if torch.is_tensor(output):
        if select is None:
            return output
        raise ValueError(
            f"output={select!r} names one of several outputs, but the "
            f"module's forward returned one tensor (of shape "
            f"{tuple(output.shape)}). Leave output=None.")
    if isinstance(output, Mapping):
        return _from_mapping(output, select)
    if isinstance(output, (tuple, list)):
        return _from_sequence(output, select)
    raise TypeError(
        f"the module's forward must return a tensor, or a tuple, list or "
        f"dict of them (the estimator's output parameter names which one "
        f"is predicted). It returned a {type(output).__name__}.")


def _from_mapping(output, select):
    keys = list(output)
    if not keys:
        raise ValueError("the module's forward returned an empty dict.")
    if select is None:
        select = keys[0]
    elif not isinstance(select, str) or select not in output:
        raise ValueError(
            f"output={select!r} is not a key of the dict the module's "
            f"forward returned; its keys are {_listed(keys)}.")
    return _tensor(output[select], select)


def _from_sequence(output, select):
    fields = getattr(output, "_fields", None)
    if not output:
        raise ValueError(f"the module's forward returned an empty "
                         f"{type(output).__name__}.")
    if select is None:
        select = 0
    if isinstance(select, str):
        if fields is None or select not in fields:
            names = (f"a named tuple with fields {_listed(fields)}"
                     if fields is not None else
                     f"a {type(output).__name__} of {len(output)}, whose "
                     f"elements are chosen by index (output=0 to "
                     f"{len(output) - 1})")
            raise ValueError(
                f"output={select!r} names a key, but the module's forward "
                f"returned {names}.")
        return _tensor(getattr(output, select), select)
    if select >= len(output):
        raise ValueError(
            f"output={select!r}, but the module's forward returned a "
            f"{type(output).__name__} of {len(output)} element(s) "
            f"(output=0 to {len(output) - 1}).")
    return _tensor(output[select], select)


def _tensor(value, select):
    if not torch.is_tensor(value):
        raise TypeError(
            f"the module's output {select!r} (the one the estimator's "
            f"output parameter selects) must be a tensor. It is a "
            f"{type(value).__name__}.")
    return value


def _listed(names):
    shown = ", ".join(repr(n) for n in list(names)[:10])
    return "[" + shown + (", ...]" if len(names) > 10 else "]")
