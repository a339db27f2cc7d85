"""The per-block task kernels of the ds-tensor.

Every kernel is a module-level task taking and returning plain data: CPU
torch tensors, numpy arrays, numbers. A kernel that builds a large block
allocates it with :func:`~dislib_nn.runtime.shared_empty`, so the block is
returned without a further copy. Kernels never hold more than the blocks
they are given.
"""

import ctypes
import functools
import sys

import numpy as np
import torch

from dislib_nn.runtime import COLLECTION_IN, COLLECTION_OUT, Depth, Type, \
    shared_empty, task


# ------------------------------------------------------------- creation
@task(returns=1)
def _to_block(block):
    """Hand a block built on the master to the runtime."""
    return block


@task(returns=1)
def _random_block(shape, seed, dtype):
    generator = torch.Generator().manual_seed(seed)
    out = shared_empty(shape, dtype)
    if dtype.is_floating_point or dtype.is_complex:
        out.uniform_(0.0, 1.0, generator=generator)
    elif dtype == torch.bool:
        out.copy_(torch.randint(0, 2, shape, generator=generator))
    else:
        out.random_(0, 100, generator=generator)
    return out


@task(returns=1)
def _zeros_block(shape, dtype):
    return shared_empty(shape, dtype).zero_()


@task(returns=1)
def _read_npy_rows(path, start, stop):
    """Rows ``start:stop`` of a ``.npy`` file, read through a memory map."""
    array = np.load(path, mmap_mode="r")
    rows = array[start:stop]
    out = shared_empty(rows.shape, _torch_dtype(rows.dtype))
    np.copyto(_as_numpy(out), rows, casting="no")
    return out


@task(returns=1)
def _read_hdf5_rows(path, dataset, start, stop):
    """Rows ``start:stop`` of an HDF5 dataset, read straight into the block
    (HDF5 converts to the native byte order on the way)."""
    import h5py
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        out = shared_empty((stop - start,) + ds.shape[1:],
                           _torch_dtype(_native(ds.dtype)))
        if stop > start:
            ds.read_direct(_as_numpy(out), np.s_[start:stop])
    return out


@task(returns=1)
def _read_zarr_rows(path, component, start, stop):
    """Rows ``start:stop`` of a Zarr array, decoded straight into the
    block (in the native byte order)."""
    import zarr
    from zarr.buffer.cpu import NDBuffer
    array = zarr.open_array(store=path, path=component or "", mode="r")
    out = shared_empty((stop - start,) + tuple(array.shape[1:]),
                       _torch_dtype(_native(array.dtype)))
    if stop > start:
        array.get_basic_selection(
            slice(start, stop),
            out=NDBuffer.from_numpy_array(_as_numpy(out)))
    return out


@task(returns=1)
def _read_shards(paths, rows, sample_shape, dtype):
    """The ``.npy`` and ``.pt`` files ``paths`` one after the other in one
    block, ``rows[k]`` rows of ``sample_shape`` and ``dtype`` from
    ``paths[k]`` (what the master found there)."""
    out = shared_empty((sum(rows),) + tuple(sample_shape), dtype)
    at = 0
    for path, n in zip(paths, rows):
        if path.endswith(".npy"):
            part = np.load(path, mmap_mode="r")
            found = (tuple(part.shape), _torch_dtype(part.dtype))
        else:
            # weights_only: a file read here cannot run code.
            part = torch.load(path, map_location="cpu", weights_only=True,
                              mmap=True)
            found = (tuple(getattr(part, "shape", ())),
                     getattr(part, "dtype", None))
        if found != ((n,) + tuple(sample_shape), dtype):
            raise ValueError(
                f"{path} changed since the master read it: it holds shape "
                f"{found[0]} and dtype {found[1]}, not {n} rows of "
                f"{tuple(sample_shape)} and {dtype}.")
        if isinstance(part, np.ndarray):
            np.copyto(_as_numpy(out[at:at + n]), part, casting="no")
        else:
            out[at:at + n].copy_(part.detach())
        at += n
    return out


# ----------------------------------------------------------- transforms
@task(returns=2)
def _read_dataset_rows(dataset, start, stop, x_shape, x_dtype, y_shape,
                       y_dtype):
    """Items ``start:stop`` of a Dataset of ``(x, y)`` pairs as two
    blocks, every item checked against item 0's shapes."""
    from dislib_nn.data._dataset import item_array
    n = stop - start
    blocks = [shared_empty((n,) + tuple(shape), _torch_dtype(dtype))
              for shape, dtype in ((x_shape, x_dtype), (y_shape, y_dtype))]
    for row, index in enumerate(range(start, stop)):
        item = dataset[index]
        name = f"dataset[{index}]"
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(f"the items of a Dataset must be (x, y) pairs; "
                            f"{name} is a {type(item).__name__}.")
        for k, (block, shape) in enumerate(zip(blocks, (x_shape, y_shape))):
            value = item_array(item[k], "fit", name, k)
            if value.shape != tuple(shape):
                raise ValueError(
                    f"{'xy'[k]} of {name} has shape {value.shape}, but "
                    f"dataset[0]'s has {tuple(shape)}: every item must "
                    f"have the shapes of the first.")
            _as_numpy(block)[row] = value
    return blocks[0], blocks[1]


@task(returns=1, blocks={Type: COLLECTION_IN, Depth: 1})
def _map(fn, blocks, sample_shape, dtype):
    """``fn(*blocks)`` as a tensor, checked against the expected geometry."""
    out = fn(*blocks)
    if isinstance(out, np.ndarray):
        out = torch.from_numpy(out)
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"map_blocks: {_name(fn)} must return a torch tensor or a "
            f"numpy array. Got {type(out).__name__} instead.")
    rows = blocks[0].shape[0]
    if out.dim() == 0 or out.shape[0] != rows:
        raise ValueError(
            f"map_blocks: {_name(fn)} must keep the rows of its block: "
            f"given {rows} rows it returned shape {tuple(out.shape)}.")
    if sample_shape is not None and (tuple(out.shape[1:]) != sample_shape
                                     or out.dtype != dtype):
        raise ValueError(
            f"map_blocks: {_name(fn)} returned samples of shape "
            f"{tuple(out.shape[1:])} and dtype {out.dtype} for one block, "
            f"but {sample_shape} and {dtype} when called on an empty "
            f"block. Its output geometry must not depend on the data.")
    return out.detach().cpu().contiguous()


@task(returns=1)
def _meta(block):
    """``(sample_shape, dtype)`` of a block."""
    return tuple(block.shape[1:]), block.dtype


@task(returns=1, pieces={Type: COLLECTION_IN, Depth: 1})
def _assemble(pieces, ranges):
    """Concatenate ``pieces[k][start:stop]`` for each ``(start, stop)``."""
    rows = sum(stop - start for start, stop in ranges)
    first = pieces[0]
    out = shared_empty((rows,) + tuple(first.shape[1:]), first.dtype)
    at = 0
    for piece, (start, stop) in zip(pieces, ranges):
        out[at:at + stop - start] = piece[start:stop]
        at += stop - start
    return out


@task(returns=1)
def _take(block, index):
    """Rows ``index`` (int64 array, local to the block) of ``block``."""
    out = shared_empty((len(index),) + tuple(block.shape[1:]), block.dtype)
    _take_into(out, block, index)
    return out


@task(returns=1, blocks={Type: COLLECTION_IN, Depth: 1})
def _gather(blocks, source, local, sample_shape, dtype):
    """Row ``r`` of the result is ``blocks[source[r]][local[r]]``."""
    out = shared_empty((len(source),) + tuple(sample_shape), dtype)
    positions = _group(source, len(blocks))
    _scatter(out, blocks, positions, [local[p] for p in positions])
    return out


@task(returns=1)
def _astype(block, dtype):
    out = shared_empty(tuple(block.shape), dtype)
    out.copy_(block)
    return out


@task(returns=1)
def _reshape(block, sample_shape):
    out = shared_empty((block.shape[0],) + tuple(sample_shape), block.dtype)
    out.view(block.shape).copy_(block)
    return out


# -------------------------------------------------------------- shuffle
@task(returns=1)
def _split_index(labels, counts, seed):
    """Which rows of one block go to each output block.

    ``counts[j, c]`` rows of class ``c`` (of ``labels``, an int array of
    class numbers; all rows are class 0 when ``labels`` is None) go to
    output block ``j``, chosen uniformly at random. Returns one sorted
    int64 array of rows per output block.
    """
    counts = np.asarray(counts, dtype=np.int64)
    n_out, n_classes = counts.shape
    rng = np.random.default_rng(seed)
    dest = np.empty(int(counts.sum()), dtype=np.int32)
    for c in range(n_classes):
        choice = np.repeat(np.arange(n_out, dtype=np.int32), counts[:, c])
        rng.shuffle(choice)
        if labels is None:
            dest[:] = choice
        else:
            dest[np.flatnonzero(labels == c)] = choice
    order = np.argsort(dest, kind="stable")
    bounds = np.zeros(n_out + 1, dtype=np.int64)
    np.cumsum(np.bincount(dest, minlength=n_out), out=bounds[1:])
    return [order[bounds[j]:bounds[j + 1]].astype(np.int64)
            for j in range(n_out)]


@task(returns=0, pieces={Type: COLLECTION_OUT, Depth: 1})
def _split(block, index, pieces):
    """Cut a block into ``pieces[j] = block[index[j]]`` (two-pass shuffle)."""
    for j, rows in enumerate(index):
        piece = shared_empty((len(rows),) + tuple(block.shape[1:]),
                             block.dtype)
        _take_into(piece, block, rows)
        pieces[j] = piece


@task(returns=1, pieces={Type: COLLECTION_IN, Depth: 1})
def _merge(pieces, seed):
    """Concatenate the pieces of one output block, in a random order."""
    positions, picks = _placement([len(p) for p in pieces], seed)
    first = pieces[0]
    out = shared_empty((sum(len(p) for p in pieces),)
                       + tuple(first.shape[1:]), first.dtype)
    _scatter(out, pieces, positions, picks)
    return out


@task(returns=0, blocks={Type: COLLECTION_IN, Depth: 1},
      index={Type: COLLECTION_IN, Depth: 1},
      out={Type: COLLECTION_OUT, Depth: 1})
def _shuffle_gather(blocks, index, outputs, seeds, out):
    """``out[k]``: what ``_merge`` makes of output block ``outputs[k]``.

    ``index[i]`` is input block ``i``'s plan (``_split_index``). One pass
    instead of two, for several output blocks at once: used where every
    block is in this machine's memory already, so that reading rows of
    all blocks costs no transfer, and each block is mapped once per task
    rather than once per output block.
    """
    first = blocks[0]
    for i, block in enumerate(blocks):
        _prefault(block, sum(len(index[i][j]) for j in outputs))
    for k, (j, seed) in enumerate(zip(outputs, seeds)):
        rows = [plan[j] for plan in index]
        positions, picks = _placement([len(ix) for ix in rows], seed)
        block = shared_empty((sum(len(ix) for ix in rows),)
                             + tuple(first.shape[1:]), first.dtype)
        _scatter(block, blocks, positions,
                 [ix[pick] for ix, pick in zip(rows, picks)])
        out[k] = block


@task(returns=1)
def _class_counts(labels):
    """Sorted distinct labels of a block and how often each appears."""
    values = _as_numpy(labels).reshape(len(labels))
    classes, counts = np.unique(values, return_counts=True)
    return classes, counts


@task(returns=1)
def _encode_labels(labels, classes):
    """Index of each row's label in ``classes`` (int64 numpy array)."""
    values = _as_numpy(labels).reshape(len(labels))
    return np.searchsorted(classes, values).astype(np.int64)


# -------------------------------------------------------------- interop
@task(returns=1)
def _to_numpy_2d(block):
    return _as_numpy(block).reshape(block.shape[0], -1).copy()


@task(returns=1)
def _first_dtype(block):
    return np.asarray(block[:0].toarray() if hasattr(block, "toarray")
                      else block[:0]).dtype


@task(returns=1, columns={Type: COLLECTION_IN, Depth: 1})
def _from_grid_row(columns, dtype):
    parts = [np.asarray(c.toarray() if hasattr(c, "toarray") else c)
             for c in columns]
    rows = parts[0].shape[0]
    width = sum(p.shape[1] for p in parts)
    out = shared_empty((rows, width), _torch_dtype(dtype))
    target = _as_numpy(out)
    at = 0
    for part in parts:
        target[:, at:at + part.shape[1]] = part
        at += part.shape[1]
    return out


# -------------------------------------------------------------- helpers
def _placement(sizes, seed):
    """A uniformly random order of the rows of pieces of ``sizes`` rows.

    Returns ``positions`` and ``picks``: output row ``positions[i][k]``
    receives row ``picks[i][k]`` of piece ``i``. Which output rows each
    piece fills is a random arrangement of the pieces' labels; the
    piece's rows are dealt to them in a random order.
    """
    rng = np.random.default_rng(seed)
    label = np.int16 if len(sizes) < 2 ** 15 else np.int32
    source = np.repeat(np.arange(len(sizes), dtype=label), sizes)
    rng.shuffle(source)
    positions = _group(source, len(sizes))
    return positions, [rng.permutation(n) for n in sizes]


def _group(source, n_groups):
    """The (increasing) rows ``r`` with ``source[r] == i``, for each i."""
    order = np.argsort(source, kind="stable")
    bounds = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(source, minlength=n_groups), out=bounds[1:])
    return [order[bounds[i]:bounds[i + 1]] for i in range(n_groups)]


def _scatter(out, blocks, positions, rows):
    """``out[positions[i]] = blocks[i][rows[i]]`` for every block ``i``.

    Rows are copied in chunks of about 1 MiB, in increasing output order:
    the temporaries stay in cache and never become large allocations
    (which numpy backs with transparent huge pages, whose compaction can
    stall for seconds on a machine whose memory is fragmented by shared
    memory).
    """
    target = _as_numpy(out)
    chunk = max(1, _CHUNK_BYTES // max(1, target[:1].nbytes))
    for block, where, which in zip(blocks, positions, rows):
        array = _as_numpy(block)
        for start in range(0, len(where), chunk):
            stop = start + chunk
            target[where[start:stop]] = np.take(
                array, which[start:stop], axis=0, mode="clip")


_CHUNK_BYTES = 1 << 20


def _prefault(block, rows_read):
    """Map the pages of ``block`` in one call if most will be read.

    On the local backend a block arrives as a fresh memory mapping, and
    each page costs a fault on first read; asking the kernel to map them
    all at once (``MADV_POPULATE_READ``, Linux >= 5.14) is several times
    cheaper when most pages are read anyway. A failure changes nothing.
    """
    libc = _libc()
    if libc is None or block.shape[0] == 0:
        return
    rows_per_page = max(1.0, 4096 / max(1, block[:1].nbytes))
    touched = 1 - (1 - rows_read / block.shape[0]) ** rows_per_page
    if touched < 0.25:
        return
    storage = block.untyped_storage()
    libc.madvise(ctypes.c_void_p(storage.data_ptr()),
                 ctypes.c_size_t(storage.nbytes()), _MADV_POPULATE_READ)


@functools.lru_cache(maxsize=1)
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_MADV_POPULATE_READ = 22


def _take_into(out, block, index):
    # Indices are ours and in range: mode="clip" skips numpy's bounds
    # check, which also makes it write through a buffer and copy twice.
    np.take(_as_numpy(block), index, axis=0, out=_as_numpy(out),
            mode="clip")


def _as_numpy(tensor):
    """A numpy view of a CPU tensor (bfloat16 seen as raw int16)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy()
    return tensor.numpy()


def _native(np_dtype):
    """A numeric numpy dtype in the machine's byte order (torch has no
    other); any other dtype as it is."""
    return np_dtype.newbyteorder("=") if np_dtype.kind in "biufc" \
        else np_dtype


def _torch_dtype(np_dtype):
    return torch.from_numpy(np.empty(0, dtype=np_dtype)).dtype


def _name(fn):
    return getattr(fn, "__qualname__", None) or repr(fn)
