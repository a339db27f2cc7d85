"""Who releases what: the one place that calls ``delete_object``.

Under COMPSs every version of an object stays on the workers until the
application ends unless the master deletes it (epochs x replicas x model
size). A strategy hands :class:`Lifetimes` the futures it will not pass
to any task again; the rules of what may be deleted live here:

* a future that some later task or the estimator may still read is
  *kept* (:meth:`Lifetimes.keep`): global models that early stopping may
  come back to, the state the fit ends with;
* plain values (dicts, tensors, numbers) are not the runtime's to
  delete;
* a future is deleted once, however many lists it appears in.

Data blocks are not decided here: a DsTensor's blocks are released with
the last DsTensor that holds them (``dislib_nn.data._lifetime``).
"""

from dislib_nn.runtime import delete_object

__all__ = ["Lifetimes", "is_value"]


class Lifetimes:
    """Releases futures that no task will read again, and nothing else."""

    def __init__(self):
        # id -> object: holding the objects keeps their ids unique.
        self._kept = {}
        self._released = {}

    def keep(self, obj):
        """Never release ``obj`` (returned for chaining)."""
        if obj is not None:
            self._kept[id(obj)] = obj
        return obj

    def release(self, *objs):
        """Release each future among ``objs`` (lists are flattened)."""
        for obj in _flatten(objs):
            if obj is None or is_value(obj) or id(obj) in self._kept \
                    or id(obj) in self._released:
                continue
            self._released[id(obj)] = obj
            delete_object(obj)


def _flatten(objs):
    for obj in objs:
        if isinstance(obj, (list, tuple)):
            yield from _flatten(obj)
        else:
            yield obj


def is_value(obj):
    return isinstance(obj, (dict, int, float, str)) or hasattr(obj, "shape")
