"""DsTensor: an N-d tensor held as blocks of rows that tasks own."""

import numbers

import numpy as np
import torch

from dislib_nn.data import _rows, _tasks
from dislib_nn.data import _validation as v
from dislib_nn.data._lifetime import leases_for
from dislib_nn.exceptions import InvalidParameterError, ShapeError
from dislib_nn.runtime import by_value, n_workers, wait_on


class DsTensor:
    """A tensor of shape ``(n, *sample_shape)`` held as blocks of rows.

    Block ``i`` holds ``block_sizes[i]`` consecutive samples as a CPU
    ``torch.Tensor``. Blocks are futures of the task runtime: they live
    where the tasks that made them ran, and the master holds only their
    geometry until :meth:`collect` is called. Blocks made by dislib_nn
    are released when the last DsTensor holding them is garbage; blocks
    given to this constructor stay the caller's. Build one with
    :func:`from_array`, :func:`load_npy`, :func:`load_npy_files`,
    :func:`load_shards`, :func:`load_hdf5`, :func:`load_zarr`,
    :func:`random`, :func:`zeros` or :func:`from_ds_array`.

    Parameters
    ----------
    blocks : list
        One entry per block: a runtime future or a CPU tensor of shape
        ``(block_sizes[i], *sample_shape)``.
    block_sizes : tuple of int
        Rows of each block, every one at least 1.
    sample_shape : tuple of int
        Shape of one sample (``()`` for scalars such as labels).
    dtype : torch.dtype
    owned : bool, default=False
        Whether the tensor takes the blocks over: the futures among them
        are released from the runtime (``delete_object``) once no
        DsTensor holds them, as the blocks dislib_nn makes are. Leave it
        False for futures your program still uses: they stay yours.

    Examples
    --------
    >>> import numpy as np
    >>> import dislib_nn as dnn
    >>> x = dnn.from_array(np.arange(12.).reshape(6, 2), block_size=4)
    >>> x
    DsTensor(shape=(6, 2), dtype=torch.float64, block_sizes=(4, 2))
    >>> x[1:3].collect()
    tensor([[2., 3.],
            [4., 5.]], dtype=torch.float64)
    """

    def __init__(self, blocks, block_sizes, sample_shape, dtype, *,
                 owned=False):
        blocks = list(blocks)
        sizes = tuple(block_sizes)
        if len(blocks) != len(sizes):
            raise ShapeError(
                f"DsTensor got {len(blocks)} blocks but {len(sizes)} block "
                f"sizes {v.short_sizes(sizes)}.")
        v.explicit_sizes(sum(sizes), sizes, "DsTensor")
        if not isinstance(owned, bool):
            raise InvalidParameterError(
                f"The 'owned' parameter of DsTensor must be a bool. Got "
                f"{owned!r} instead.")
        self._blocks = blocks
        # Blocks given here stay the caller's unless `owned`.
        self._leases = leases_for(blocks, owned=owned)
        self._block_sizes = tuple(int(s) for s in sizes)
        self._sample_shape = v.sample_shape(sample_shape, "sample_shape",
                                            "DsTensor")
        self._dtype = v.torch_dtype(dtype, "dtype", "DsTensor")

    @classmethod
    def _from_blocks(cls, blocks, block_sizes, sample_shape, dtype):
        """Wrap blocks whose geometry the caller vouches for (no task).

        New futures among ``blocks`` become the library's: released when
        no DsTensor holds them any more (see ``_lifetime``).
        """
        self = cls.__new__(cls)
        self._blocks = list(blocks)
        self._leases = leases_for(self._blocks, owned=True)
        self._block_sizes = tuple(block_sizes)
        self._sample_shape = tuple(sample_shape)
        self._dtype = dtype
        return self

    # -------------------------------------------------------- geometry
    @property
    def shape(self):
        """``(n_rows, *sample_shape)``."""
        return (sum(self._block_sizes),) + self._sample_shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def sample_shape(self):
        return self._sample_shape

    @property
    def ndim(self):
        return 1 + len(self._sample_shape)

    @property
    def n_blocks(self):
        return len(self._block_sizes)

    @property
    def block_sizes(self):
        """Rows of each block (tuple of int)."""
        return self._block_sizes

    @property
    def blocks(self):
        """The blocks, in row order: a new list of runtime futures (or
        CPU tensors), block ``i`` of ``block_sizes[i]`` rows.

        Pass them to tasks of your own (``dislib_nn.runtime.task``) and
        wrap what those return in a new ``DsTensor(..., owned=True)``.
        To read rows on the master use :meth:`collect`: under COMPSs,
        ``wait_on`` of a block ends its future, and this tensor with it.
        """
        return list(self._blocks)

    def __len__(self):
        return sum(self._block_sizes)

    __iter__ = None      # rows live in tasks: iterating would be a trap

    def __array__(self, dtype=None, copy=None):
        """``numpy.asarray(x)``: the whole tensor, collected to the master.

        What :meth:`collect` does, as a numpy array, so that code written
        for arrays (scikit-learn's ``type_of_target`` and
        ``StratifiedKFold`` on labels, its metrics on predictions) takes
        a DsTensor. The rows always travel: ``copy=False`` raises.
        """
        if copy is False:
            raise ValueError(
                "numpy.asarray(DsTensor, copy=False): a DsTensor's rows "
                "live in tasks, so they are always copied to the master. "
                "Use copy=None or x.collect().")
        array = self.collect().numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __repr__(self):
        return (f"DsTensor(shape={self.shape}, dtype={self._dtype}, "
                f"block_sizes={v.short_sizes(self._block_sizes)})")

    # ----------------------------------------------------------- data
    def collect(self):
        """The whole tensor, on the master, as one CPU ``torch.Tensor``."""
        if not self._blocks:
            return torch.empty(self.shape, dtype=self._dtype)
        # Waiting on the blocks themselves would end them (COMPSs deletes
        # the data of every future wait_on resolves): a task copies them
        # into one tensor, and only that copy is waited for.
        whole = _tasks._assemble(list(self._blocks),
                                 [(0, n) for n in self._block_sizes])
        return torch.as_tensor(wait_on(whole))

    def map_blocks(self, fn, *others):
        """A new DsTensor of ``fn(block, *other_blocks)``, block by block.

        Parameters
        ----------
        fn : callable
            A picklable function (defined at module level, or a
            ``functools.partial`` of one) taking one tensor per DsTensor
            and returning a tensor (or numpy array) with the same number
            of rows. Its output sample shape and dtype are found by
            calling it on empty blocks; if that fails, by waiting for the
            first block.
        *others : DsTensor
            Tensors with the same block sizes, passed aligned.

        Returns
        -------
        DsTensor
        """
        if not callable(fn):
            raise InvalidParameterError(
                f"The 'fn' parameter of map_blocks must be callable. Got "
                f"{fn!r} instead.")
        for k, other in enumerate(others):
            v.check_ds_tensor(other, f"others[{k}]", "map_blocks")
            if other.block_sizes != self._block_sizes:
                raise ShapeError(
                    f"map_blocks needs others with the same block sizes as "
                    f"x. Got {v.short_sizes(self._block_sizes)} for x and "
                    f"{v.short_sizes(other.block_sizes)} for others[{k}]; "
                    f"rechunk(x.block_sizes) aligns them.")
        tensors = (self,) + others
        meta = _probe(fn, tensors)
        # A function from the user's script or notebook travels by value.
        fn = by_value(fn)
        blocks = []
        for i in range(self.n_blocks):
            aligned = [t._blocks[i] for t in tensors]
            if meta is None:
                blocks.append(_tasks._map(fn, aligned, None, None))
                meta = wait_on(_tasks._meta(blocks[0]))
            else:
                blocks.append(_tasks._map(fn, aligned, *meta))
        if meta is None:    # no block to ask: keep x's geometry
            meta = (self._sample_shape, self._dtype)
        return DsTensor._from_blocks(blocks, self._block_sizes, *meta)

    def rechunk(self, block_size=None, n_blocks=None):
        """The same rows in new blocks.

        Parameters
        ----------
        block_size : int or tuple of int, default=None
            Rows per block (the last block may be smaller), or the rows
            of each block.
        n_blocks : int, default=None
            Number of blocks of nearly equal size, instead of block_size.
            With neither, one block per worker of the runtime.

        Returns
        -------
        DsTensor
        """
        sizes = v.block_sizes(len(self), block_size, n_blocks,
                              "rechunk", n_workers())
        return _rows.rechunk(self, sizes)

    def __getitem__(self, key):
        """Rows selected by a slice, an integer index array or a mask.

        ``x[10:500]`` keeps whole blocks where it can; ``x[index]`` with
        an increasing index keeps each row in the block it came from;
        other index arrays build blocks of ``x``'s first block size,
        each gathering its rows from the blocks that hold them.
        ``x[rows, ...]`` and ``x[rows, :]`` (every sample axis kept, as
        scikit-learn's ``_safe_indexing`` writes it) are ``x[rows]``.
        """
        if isinstance(key, tuple):
            if len(key) == 0 or not _whole_samples(key[1:],
                                                   len(self._sample_shape)):
                raise InvalidParameterError(
                    f"DsTensor indexes rows only (x[rows], x[rows, ...]); "
                    f"select features inside tasks with map_blocks. Got a "
                    f"key with {len(key)} entries.")
            key = key[0]
        if isinstance(key, slice):
            return _rows.slice_rows(self, key)
        if isinstance(key, (numbers.Integral, np.integer)) and not \
                isinstance(key, (bool, np.bool_)):
            raise InvalidParameterError(
                f"DsTensor indexing keeps the rows axis: use x[{key}:"
                f"{key + 1}] or x[[{key}]] for one row. Got the int "
                f"{key}.")
        return _rows.take_rows(self, _rows.as_index(key, len(self)))

    def astype(self, dtype):
        """A DsTensor with blocks converted to ``dtype`` (torch or numpy)."""
        dtype = v.torch_dtype(dtype, "dtype", "astype")
        if dtype == self._dtype:
            return DsTensor._from_blocks(self._blocks, self._block_sizes,
                                         self._sample_shape, dtype)
        blocks = [_tasks._astype(b, dtype) for b in self._blocks]
        return DsTensor._from_blocks(blocks, self._block_sizes,
                                     self._sample_shape, dtype)

    def reshape_samples(self, shape):
        """A DsTensor whose samples have ``shape`` (one -1 is inferred).

        For example ``x.reshape_samples((1, 28, 28))`` turns rows of 784
        pixels into images with one channel.
        """
        shape = _sample_reshape(self._sample_shape, shape)
        if shape == self._sample_shape:
            return DsTensor._from_blocks(self._blocks, self._block_sizes,
                                         shape, self._dtype)
        blocks = [_tasks._reshape(b, shape) for b in self._blocks]
        return DsTensor._from_blocks(blocks, self._block_sizes, shape,
                                     self._dtype)

    def to_ds_array(self):
        """This tensor as a dislib ds-array (samples flattened to rows).

        Needs dislib. Each block becomes one row of blocks of the
        ds-array, a float or int numpy array of shape ``(rows, features)``.
        """
        from dislib_nn.data._interop import to_ds_array
        return to_ds_array(self)


def _whole_samples(rest, n_sample_axes):
    """Whether the key entries after the rows keep every sample axis."""
    full = slice(None)
    ellipses = sum(1 for k in rest if k is Ellipsis)
    slices = sum(1 for k in rest if isinstance(k, slice) and k == full)
    return ellipses + slices == len(rest) and ellipses <= 1 and \
        slices <= n_sample_axes


def _probe(fn, tensors):
    """``(sample_shape, dtype)`` of ``fn`` applied to empty blocks, or None."""
    empty = [torch.empty((0,) + t.sample_shape, dtype=t.dtype)
             for t in tensors]
    try:
        out = fn(*empty)
    except Exception:  # noqa: BLE001 - any failure: ask a real block
        return None
    if isinstance(out, np.ndarray):
        try:
            out = torch.from_numpy(out)
        except TypeError:
            return None
    if not isinstance(out, torch.Tensor) or out.dim() == 0 \
            or out.shape[0] != 0:
        return None
    return tuple(out.shape[1:]), out.dtype


def _sample_reshape(current, shape):
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        dims = None
    if dims is None or any(d < -1 for d in dims) or dims.count(-1) > 1:
        raise InvalidParameterError(
            f"The 'shape' parameter of reshape_samples must be a tuple of "
            f"ints >= 0 with at most one -1. Got {shape!r} instead.")
    size = int(np.prod(current, dtype=np.int64))
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if -1 in dims:
        if known == 0 or size % known:
            raise ShapeError(
                f"reshape_samples cannot reshape samples of shape "
                f"{current} ({size} values) into {dims}.")
        dims = tuple(size // known if d == -1 else d for d in dims)
    elif known != size:
        raise ShapeError(
            f"reshape_samples cannot reshape samples of shape {current} "
            f"({size} values) into {dims} ({known} values).")
    return dims
