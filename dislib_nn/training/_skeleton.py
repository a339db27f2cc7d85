"""A module instance without the tensors its state dict brings.

Every task that builds the module loads a model state into it, so the
instance's own parameters and persistent buffers are dead weight in
the recipe tasks receive. :func:`skeleton` copies the instance with
those tensors on the ``meta`` device (shape, dtype and
``requires_grad``, no data); what the state dict does not hold stays
as it is: non-persistent buffers, plain tensor attributes, extra state
a ``set_extra_state`` overwrites anyway. :func:`flesh_out` makes a
module of it again, every meta tensor an empty CPU tensor of its shape
and dtype, for ``load_state_dict`` to fill.

Tied weights stay tied: each tensor, however many attributes name it,
has one replacement (the memo ``copy.deepcopy`` takes).
"""

import copy

import torch

__all__ = ["Skeleton", "skeleton", "flesh_out"]


class Skeleton:
    """A module instance whose state-dict tensors are meta tensors.

    Parameters
    ----------
    module : torch.nn.Module
        The weightless copy (:func:`skeleton`).
    """

    def __init__(self, module):
        self.module = module

    def __repr__(self):
        return f"Skeleton({type(self.module).__name__})"


def skeleton(module):
    """A :class:`Skeleton` of ``module``: a copy whose parameters and
    persistent buffers have no data. Lazy (uninitialised) parameters
    are kept, as they hold no data either."""
    memo = {}
    for tensor in _state_tensors(module):
        if id(tensor) in memo or _lazy(tensor):
            continue
        empty = torch.empty_like(tensor, device="meta")
        if isinstance(tensor, torch.nn.Parameter):
            empty = torch.nn.Parameter(empty,
                                       requires_grad=tensor.requires_grad)
        memo[id(tensor)] = empty
    return Skeleton(copy.deepcopy(module, memo))


def flesh_out(bones):
    """A new module from the :class:`Skeleton` ``bones``: its meta
    tensors become uninitialised CPU tensors, to be filled by
    ``load_state_dict``."""
    memo = {}
    for tensor in _state_tensors(bones.module):
        if id(tensor) in memo or not tensor.is_meta:
            continue
        empty = torch.empty(tensor.shape, dtype=tensor.dtype)
        if isinstance(tensor, torch.nn.Parameter):
            empty = torch.nn.Parameter(empty,
                                       requires_grad=tensor.requires_grad)
        memo[id(tensor)] = empty
    return copy.deepcopy(bones.module, memo)


def _state_tensors(module):
    """The parameters and persistent buffers of ``module`` and its
    submodules, duplicates included."""
    for sub in module.modules():
        for tensor in sub._parameters.values():
            if tensor is not None:
                yield tensor
        for name, tensor in sub._buffers.items():
            if tensor is not None and \
                    name not in sub._non_persistent_buffers_set:
                yield tensor


def _lazy(tensor):
    return isinstance(tensor, torch.nn.parameter.UninitializedTensorMixin)
