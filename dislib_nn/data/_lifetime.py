"""Who releases a block, and when: the ds-tensor's ownership rule.

A block made by dislib_nn's own tasks belongs to the library; the
runtime keeps its data (on a COMPSs worker's disk and memory, in the
local backend's shared memory) until told otherwise. Several DsTensors
may share a block (a slice, ``astype`` to the same dtype, a split), so
each block gets one :class:`Lease`, shared by every DsTensor that holds
the block; when the last of them is gone the lease ends and the block is
released with ``delete_object``, as dislib's ``Array.__del__`` does. A
block the library did not make (a DsTensor built by the user from their
own futures, a ds-array's blocks) gets a lease that never releases, so
nothing it does not own is ever deleted. Tasks already submitted on a
released block still run: the runtime frees the data once they are done.
"""

import weakref

import numpy as np
import torch

from dislib_nn.runtime import delete_object

__all__ = ["Lease", "leases_for", "release"]

# id(block) -> its lease, while any DsTensor holds it. The lease keeps the
# block alive, so the id cannot be reused meanwhile.
_LEASES = weakref.WeakValueDictionary()


class Lease:
    """Holds one block; releases it when no DsTensor needs it any more."""

    __slots__ = ("block", "owned", "__weakref__")

    def __init__(self, block, owned):
        self.block = block
        self.owned = owned

    def __del__(self):
        if self.owned:
            try:
                delete_object(self.block)
            except Exception:  # noqa: BLE001 - e.g. at interpreter exit
                pass


def leases_for(blocks, owned):
    """The lease of each block: its existing one, or a new one.

    A block already held by a DsTensor keeps the lease it has (so a slice
    of a user's tensor never releases the user's block); a new future
    gets a lease that releases it when ``owned``. Values (tensors held on
    the master, numpy arrays) need none.
    """
    out = []
    for block in blocks:
        if _is_value(block):
            out.append(None)
            continue
        lease = _LEASES.get(id(block))
        if lease is None or lease.block is not block:
            lease = Lease(block, owned)
            _LEASES[id(block)] = lease
        out.append(lease)
    return out


def release(*objs):
    """Release intermediate futures once the tasks reading them are submitted.

    For what the library makes and consumes inside one call (shuffle
    plans, pieces), which no DsTensor holds. Lists are walked, so that
    each future is deleted by itself (COMPSs deletes nothing when given
    a list).
    """
    for obj in objs:
        if isinstance(obj, (list, tuple)):
            release(*obj)
        elif obj is not None and not _is_value(obj):
            delete_object(obj)


def _is_value(obj):
    return isinstance(obj, (torch.Tensor, np.ndarray)) or hasattr(
        obj, "toarray")
