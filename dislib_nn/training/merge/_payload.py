"""Lower-precision merge payloads: a replica's update, cast for the trip.

With ``merge_precision="bf16"`` a training task that a merge follows
returns a :class:`Delta` instead of its trained state dict: for every
floating-point tensor entry, its update ``trained - base`` cast to
``torch.bfloat16`` (half the bytes of float32), ``base`` being the
model the replica's round started from, which the merge adds the
averaged update to; every other entry (integer buffers such as
BatchNorm's ``num_batches_tracked``, complex tensors, plain numbers)
as trained. The merges widen each update to float32 before they weigh
it (:func:`widened`) and add the averaged update to the float32 model
(:func:`apply`): only the upload is rounded, the sums and the model are
not. This is the lower-precision communication of Streaming DiLoCo and
OpenDiLoCo (bf16 deltas, fp32 accumulation).

Pure functions on state dicts (no runtime imports). A :class:`Delta` is
marked by its type: the merges never guess a payload from its dtypes.
"""

import collections
import numbers

import torch

__all__ = ["PRECISIONS", "Delta", "encode", "widened", "apply"]

#: ``merge_precision`` -> the dtype the updates travel in (``"fp32"``:
#: no :class:`Delta`, the trained state dict itself).
PRECISIONS = {"bf16": torch.bfloat16}

_WIDEN = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


class Delta:
    """A replica's update from ``base``, the payload of one merge.

    Attributes
    ----------
    entries : collections.OrderedDict
        The state dict's keys, in order: ``trained - base`` in
        ``precision``'s dtype for real floating-point tensors,
        ``trained - base`` as it is for complex tensors and Python
        floats, the trained value for everything else.
    precision : str
        The ``merge_precision`` it was cast for (``"bf16"``).
    """

    __slots__ = ("entries", "precision")

    def __init__(self, entries, precision):
        self.entries = entries
        self.precision = precision

    def __getstate__(self):
        return self.entries, self.precision

    def __setstate__(self, state):
        self.entries, self.precision = state

    def __repr__(self):
        return (f"<Delta of {len(self.entries)} entries in "
                f"{self.precision}>")


def encode(trained, base, precision):
    """The :class:`Delta` of state dict ``trained`` from ``base``.

    Raises
    ------
    ValueError
        For a ``precision`` that has no payload dtype (``"fp32"``).
    """
    if precision not in PRECISIONS:
        raise ValueError(
            f"merge payloads are cast to one of {sorted(PRECISIONS)}. "
            f"Got precision={precision!r}.")
    dtype = PRECISIONS[precision]
    entries = collections.OrderedDict()
    for key, value in trained.items():
        start = base[key]
        if torch.is_tensor(value) and value.is_floating_point():
            wide = _WIDEN.get(value.dtype, value.dtype)
            entries[key] = (value.detach().to(wide)
                            - start.detach().to(wide)).to(dtype)
        elif torch.is_tensor(value) and value.is_complex():
            entries[key] = value.detach() - start.detach()
        elif _is_float(value):
            entries[key] = float(value) - float(start)
        else:
            entries[key] = value
    return Delta(entries, precision)


def widened(delta):
    """The updates of a :class:`Delta` in float32 (its other entries as
    they are): what the merges weigh and add."""
    out = collections.OrderedDict()
    for key, value in delta.entries.items():
        if torch.is_tensor(value) and value.dtype in _WIDEN:
            value = value.to(_WIDEN[value.dtype])
        out[key] = value
    return out


def apply(base, update):
    """``base`` plus ``update`` (a mapping of updates, as
    :func:`widened` gives them, or their weighted mean): floating-point
    entries add up (in float32 for low-precision ones, then in
    ``base``'s dtype), every other entry takes ``update``'s value."""
    out = collections.OrderedDict()
    for key, start in base.items():
        value = update[key]
        if torch.is_tensor(start) and (start.is_floating_point()
                                       or start.is_complex()):
            wide = _WIDEN.get(start.dtype, start.dtype)
            out[key] = (start.to(wide) + value.to(wide)).to(start.dtype)
        elif _is_float(start):
            out[key] = float(start) + float(value)
        else:
            out[key] = value
    return out


def _is_float(value):
    return isinstance(value, numbers.Real) and not isinstance(
        value, (bool, numbers.Integral)) and not torch.is_tensor(value)
