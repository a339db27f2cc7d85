"""Several inputs of a sample packed side by side into one row of bytes.

A module that takes several inputs (``forward(self, x_num, x_cat)``) is
fitted on X given as a dict or a tuple of arrays with equal rows. Fit
packs each sample's inputs, each in the dtype the module receives it
in, into one row of ``uint8``: the data become one DsTensor of shape
``(n, width)``, which every row operation (blocks, shuffles, validation
splits, dealing rows to workers) handles as it handles any other, so the
inputs of a sample stay together. A task unpacks each batch just before
the forward: each input's bytes copied once into a tensor of their own
and viewed in its dtype, passed by keyword (a dict) or by position (a
tuple).
"""

import numpy as np
import torch

__all__ = ["PackedLayout"]


class PackedLayout:
    """Where each input of a sample lies in its packed row.

    Parameters
    ----------
    keys : tuple
        The inputs' names (a dict's keys) or positions (a tuple's).
    keyed : bool
        True: the forward takes the inputs as keyword arguments.
    shapes : tuple of tuple
        Each input's sample shape.
    dtypes : tuple of torch.dtype
        The dtype the module receives each input in.
    """

    def __init__(self, keys, keyed, shapes, dtypes):
        self.keys = tuple(keys)
        self.keyed = bool(keyed)
        self.shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        self.dtypes = tuple(dtypes)
        sizes = [int(np.prod(s, dtype=np.int64)) * _itemsize(d)
                 for s, d in zip(self.shapes, self.dtypes)]
        self.offsets = tuple(int(o) for o in np.cumsum([0] + sizes))
        self.width = self.offsets[-1]

    def pack(self, parts, empty=None):
        """The rows of ``parts`` (arrays or tensors, one per input, equal
        rows) as one ``uint8`` tensor of shape ``(n, width)``, allocated
        by ``empty(shape, dtype)``."""
        n = len(parts[0])
        out = torch.empty((n, self.width), dtype=torch.uint8) \
            if empty is None else empty((n, self.width), torch.uint8)
        for part, dtype, lo, hi in zip(parts, self.dtypes, self.offsets,
                                       self.offsets[1:]):
            values = torch.as_tensor(np.asarray(part)) if not \
                torch.is_tensor(part) else part
            values = values.to(dtype).reshape(n, -1).contiguous()
            out[:, lo:hi] = values.view(torch.uint8).reshape(n, hi - lo)
        return out

    def unpack(self, rows):
        """The inputs of packed ``rows`` (on any device): a dict for
        keyword inputs, a tuple for positional ones."""
        n = rows.shape[0]
        # A copy of its own (at offset 0) for each input: a view of bytes
        # as int64 needs the start aligned to 8 bytes.
        parts = [torch.empty((n, hi - lo), dtype=torch.uint8,
                             device=rows.device).copy_(rows[:, lo:hi])
                 .view(dtype).reshape((n,) + shape)
                 for shape, dtype, lo, hi in zip(
                     self.shapes, self.dtypes, self.offsets,
                     self.offsets[1:])]
        if self.keyed:
            return dict(zip(self.keys, parts))
        return tuple(parts)

    def call(self, module, rows):
        """``module``'s forward on the inputs of ``rows``."""
        inputs = self.unpack(rows)
        return module(**inputs) if self.keyed else module(*inputs)

    def describe(self):
        """The inputs as the module receives them, for messages."""
        return ", ".join(
            f"{k!r}: {tuple(s)} {str(d).replace('torch.', '')}"
            for k, s, d in zip(self.keys, self.shapes, self.dtypes))


def _itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()
