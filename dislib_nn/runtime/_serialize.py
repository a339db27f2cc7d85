"""How task arguments and results cross process boundaries.

Everything a task receives or returns is pickled, as COMPSs does. Large
CPU tensors and numpy arrays do not travel inside the pickle: their bytes
sit in shared memory and only a file descriptor crosses the socket. The
receiver maps that memory copy-on-write, so a task that mutates an ``IN``
argument changes its private copy only, as under COMPSs, without paying
for a copy it never makes.

Pickling is strict, to surface on a laptop what COMPSs would get wrong on a
cluster: a future that is not a declared dependency raises
:class:`HiddenFuture`, and lambdas or closures fail as plain ``pickle``
makes them fail (COMPSs never uses cloudpickle), and a class or function
defined in ``__main__`` raises :class:`MainReference` unless it is wrapped
in :func:`~dislib_nn.runtime.by_value` (a COMPSs worker cannot import the
user's script as ``__main__``).
"""

import io
import mmap
import os
import pickle
import weakref

import numpy as np
import torch

from dislib_nn.runtime._by_value import is_main_global

# Below this size a buffer is cheaper to copy inside the pickle than to
# hand over as shared memory.
SHARE_MIN_BYTES = 64 * 1024

_NUMPY_KINDS = frozenset("biufc")


class HiddenFuture(Exception):
    """A future was found where the runtime does not resolve futures."""

    def __init__(self, future):
        super().__init__(future)
        self.future = future


class MainReference(Exception):
    """A class or function of ``__main__`` would travel by reference."""

    def __init__(self, obj):
        super().__init__(obj)
        self.obj = obj


class Payload:
    """Pickled bytes and the shared-memory descriptors they refer to.

    A payload owns its file descriptors and closes them when it is closed
    or garbage-collected. Loading a payload does not consume it: the same
    payload may be loaded, or sent, any number of times.
    """

    __slots__ = ("data", "fds", "_finalizer", "__weakref__")

    def __init__(self, data, fds=()):
        self.data = data
        self.fds = list(fds)
        self._finalizer = (weakref.finalize(self, _close_fds, self.fds)
                           if self.fds else None)

    def close(self):
        if self._finalizer is not None:
            self._finalizer()

    @property
    def nbytes(self):
        return len(self.data)


def _close_fds(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


def dumps(obj, slots=None, check_main=True, share=True):
    """Pickle ``obj`` into a :class:`Payload`.

    ``slots`` maps ``id(future)`` to an index for the futures that are
    declared dependencies; they are written as references and resolved by
    :func:`loads`. Any other future raises :class:`HiddenFuture`. With
    ``check_main`` (task arguments), a class or function of ``__main__``
    raises :class:`MainReference`; results go back to the master, which
    can import its own script, so they are not checked. ``share=False``
    keeps every byte inside the pickle, for payloads that leave this
    machine (the dask backend).
    """
    buffer = io.BytesIO()
    pickler = (_StrictPickler if check_main else _Pickler)(buffer,
                                                            slots or {},
                                                            share)
    try:
        pickler.dump(obj)
    except BaseException:
        _close_fds(pickler.fds)
        raise
    return Payload(buffer.getvalue(), pickler.fds)


def loads(payload, deps=()):
    """Rebuild the object in ``payload``; ``deps[i]`` fills slot ``i``."""
    unpickler = _Unpickler(io.BytesIO(payload.data), payload.fds, deps)
    return unpickler.load()


class _Pickler(pickle.Pickler):
    def __init__(self, file, slots, share=True):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.slots = slots
        self.share = share
        self.fds = []
        self._storage_index = {}

    def persistent_id(self, obj):
        kind = type(obj)
        if self.share and (kind is torch.Tensor
                           or kind is torch.nn.Parameter):
            return self._tensor_id(obj)
        if self.share and kind is np.ndarray:
            return self._array_id(obj)
        if getattr(kind, "_dislib_nn_future", False):
            index = self.slots.get(id(obj))
            if index is None:
                raise HiddenFuture(obj)
            return ("dep", index)
        return None

    def _tensor_id(self, tensor):
        if (tensor.device.type != "cpu" or tensor.layout != torch.strided
                or tensor.is_quantized or tensor.nbytes < SHARE_MIN_BYTES
                or (tensor.requires_grad and not tensor.is_leaf)):
            return None
        if tensor.is_conj() or tensor.is_neg():
            tensor = tensor.resolve_conj().resolve_neg()
        storage = tensor.untyped_storage()
        if storage.nbytes() > 2 * tensor.nbytes:
            # A small view of a big buffer: send its own bytes only.
            tensor = tensor.detach().clone()
            storage = tensor.untyped_storage()
        key = storage.data_ptr()
        index = self._storage_index.get(key)
        if index is None:
            fd, size = storage._share_fd_cpu_()
            self.fds.append(os.dup(fd))
            index = self._storage_index[key] = (len(self.fds) - 1, size)
        return ("tensor", index[0], index[1], str(tensor.dtype)[6:],
                tensor.storage_offset(), tuple(tensor.shape),
                tuple(tensor.stride()), tensor.requires_grad,
                type(tensor) is torch.nn.Parameter)

    def _array_id(self, array):
        if (array.dtype.kind not in _NUMPY_KINDS or array.dtype.fields
                or array.nbytes < SHARE_MIN_BYTES):
            return None
        array = np.ascontiguousarray(array)
        fd = os.memfd_create("dislib_nn", os.MFD_CLOEXEC)
        self.fds.append(fd)
        os.ftruncate(fd, array.nbytes)
        with mmap.mmap(fd, array.nbytes) as region:
            target = np.frombuffer(region, dtype=array.dtype)
            target[:] = array.reshape(-1)
            del target
        return ("array", len(self.fds) - 1, array.nbytes, array.dtype.str,
                array.shape)


class _StrictPickler(_Pickler):
    """Task arguments: a ``__main__`` class or function is an error."""

    def reducer_override(self, obj):
        # Plain pickle would send it as "__main__.Name", which no COMPSs
        # worker can import (see _by_value).
        if is_main_global(obj):
            raise MainReference(obj)
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, fds, deps):
        super().__init__(file)
        self.fds = fds
        self.deps = deps
        self._storages = {}

    def persistent_load(self, pid):
        tag = pid[0]
        if tag == "dep":
            return self.deps[pid[1]]
        if tag == "tensor":
            return self._load_tensor(*pid[1:])
        if tag == "array":
            _, index, nbytes, dtype, shape = pid
            region = _map_private(self.fds[index], nbytes)
            return np.frombuffer(region, dtype=np.dtype(dtype)).reshape(shape)
        raise pickle.UnpicklingError(f"unknown persistent id {tag!r}")

    def _load_tensor(self, index, size, dtype, offset, shape, stride,
                     requires_grad, is_parameter):
        storage = self._storages.get(index)
        if storage is None:
            region = _map_private(self.fds[index], size)
            storage = torch.frombuffer(region, dtype=torch.uint8)\
                .untyped_storage()
            self._storages[index] = storage
        tensor = torch.empty(0, dtype=getattr(torch, dtype))
        tensor.set_(storage, offset, shape, stride)
        if is_parameter:
            return torch.nn.Parameter(tensor, requires_grad=requires_grad)
        if requires_grad:
            tensor.requires_grad_(True)
        return tensor


def _map_private(fd, nbytes):
    return mmap.mmap(fd, nbytes, flags=mmap.MAP_PRIVATE,
                     prot=mmap.PROT_READ | mmap.PROT_WRITE)


def shared_empty(shape, dtype=torch.float32):
    """A new tensor allocated directly in shared memory.

    A task that fills such a tensor and returns it hands it to the master
    without the copy into shared memory that an ordinary tensor costs.
    """
    shape = tuple(shape)
    numel = 1
    for n in shape:
        numel *= n
    tensor = torch.empty(0, dtype=dtype)
    nbytes = numel * tensor.element_size()
    if nbytes < SHARE_MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    storage = torch.UntypedStorage._new_shared(nbytes)
    return tensor.set_(storage, 0, shape)
