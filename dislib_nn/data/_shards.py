"""Loading ds-tensors from sharded data sets: many ``.npy`` / ``.pt`` files.

Each file (a shard) holds consecutive samples; a block is one shard, or
several consecutive ones, read by one task. The master reads only what
describes each file: a ``.npy`` header, and for a ``.pt`` file the small
pickle of ``torch.save``'s zip format, its tensor's data memory-mapped
and never read. Shards are read by their tasks, on the workers, at the
same (absolute) paths: a shared file system on a cluster.
"""

import os
import zipfile

import torch

from dislib_nn.data import _placing, _tasks
from dislib_nn.data import _validation as v
from dislib_nn.data._io import _header
from dislib_nn.data._tensor import DsTensor
from dislib_nn.exceptions import (DataFileError, DtypeError,
                                  InvalidParameterError, ShapeError)

_SUFFIXES = (".npy", ".pt")


def load_shards(paths_or_folder, shards_per_block=1):
    """A DsTensor of the samples of many ``.npy`` and ``.pt`` files.

    Parameters
    ----------
    paths_or_folder : str, os.PathLike or sequence of them
        A folder, whose ``*.npy`` and ``*.pt`` files are read in the
        sorted order of their names (other files and hidden ones are left
        out; pad numbers with zeros, ``part-0002.pt``, so that name order
        is sample order), or a list of such files, in the order given.
        Each file holds samples of one shape and dtype, the same in every
        file, with at least one sample: a ``numpy.save`` array or a
        ``torch.save`` file of one tensor (read with
        ``weights_only=True``: a file that would run code is refused).
        ``.npy`` and ``.pt`` files may be mixed.
    shards_per_block : int, default=1
        Consecutive files read into one block by one task; the last block
        takes the files left over.

    Returns
    -------
    DsTensor
        Block ``i`` holds files ``i * shards_per_block`` onwards.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np, torch
    >>> import dislib_nn as dnn
    >>> folder = tempfile.mkdtemp()
    >>> np.save(os.path.join(folder, "part-0.npy"), np.ones((30, 4)))
    >>> torch.save(torch.zeros(20, 4, dtype=torch.float64),
    ...            os.path.join(folder, "part-1.pt"))
    >>> dnn.load_shards(folder)
    DsTensor(shape=(50, 4), dtype=torch.float64, block_sizes=(30, 20))
    """
    caller, name = "load_shards", "paths_or_folder"
    if isinstance(paths_or_folder, (str, bytes, os.PathLike)):
        try:
            folder = os.fsdecode(os.path.abspath(os.fspath(
                paths_or_folder)))
        except TypeError:
            folder = None
        if folder is None or not os.path.isdir(folder):
            kind = ("a file: list it, [path], or use load_npy for one "
                    ".npy file" if folder and os.path.isfile(folder)
                    else "not a folder")
            raise InvalidParameterError(
                f"The '{name}' parameter of {caller} must be a folder or "
                f"a list of .npy and .pt files. Got {paths_or_folder!r}, "
                f"{kind}.")
        paths = sorted(os.path.join(folder, f) for f in os.listdir(folder)
                       if f.endswith(_SUFFIXES) and not f.startswith(".")
                       and os.path.isfile(os.path.join(folder, f)))
        if not paths:
            raise ShapeError(
                f"{caller}: '{name}' = {folder!r} holds no .npy or .pt "
                f"files.")
    else:
        paths = _listed(paths_or_folder, caller, name,
                        "a folder or a list of .npy and .pt files")
    per_block = v.check_int(shards_per_block, "shards_per_block", caller,
                            1, len(paths), " (the number of files)")
    return _from_files(paths, per_block, caller, name, with_pt=True)


def load_npy_files(paths):
    """A DsTensor with one block per ``.npy`` file, in the order given.

    The layout of sharded data sets: each file holds consecutive samples
    and becomes one block, read by its own task. :func:`load_shards`
    also reads ``.pt`` files, a folder, and several files per block.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        ``.npy`` files holding samples of the same shape and dtype, each
        with at least one row.

    Returns
    -------
    DsTensor
    """
    paths = _listed(paths, "load_npy_files", "paths", "a list of .npy "
                    "paths", "; load_npy reads one file")
    return _from_files(paths, 1, "load_npy_files", "paths", with_pt=False)


def _listed(paths, caller, name, expected, hint=""):
    """``paths`` as a non-empty list, or InvalidParameterError."""
    if isinstance(paths, (str, bytes, os.PathLike)) or not hasattr(
            paths, "__iter__"):
        raise InvalidParameterError(
            f"The '{name}' parameter of {caller} must be {expected}. Got "
            f"{paths!r} instead{hint}.")
    paths = list(paths)
    if not paths:
        raise ShapeError(f"{caller} needs at least one file. Got an empty "
                         f"list of paths.")
    return paths


def _from_files(paths, per_block, caller, name, with_pt):
    """The DsTensor of ``paths``, ``per_block`` consecutive files a block;
    every file's geometry read and checked before any task."""
    headers = [_file_header(p, caller, f"{name}[{k}]", with_pt)
               for k, p in enumerate(paths)]
    first_path, first_shape, first_dtype = headers[0]
    for k, (path, shape, dtype) in enumerate(headers):
        if shape[1:] != first_shape[1:]:
            raise ShapeError(
                f"{caller} needs files with samples of one shape: "
                f"{first_path} has samples of shape {first_shape[1:]} but "
                f"{name}[{k}] = {path} has {shape[1:]}.")
        if dtype != first_dtype:
            raise ShapeError(
                f"{caller} needs files of one dtype: {first_path} holds "
                f"{first_dtype} but {name}[{k}] = {path} holds {dtype}.")
    groups = [headers[i:i + per_block]
              for i in range(0, len(headers), per_block)]
    rows = [[shape[0] for _, shape, _ in group] for group in groups]
    blocks = _placing.per_block(
        len(groups), lambda i: _tasks._read_shards(
            [p for p, _, _ in groups[i]], rows[i], first_shape[1:],
            first_dtype))
    sizes = [sum(r) for r in rows]
    return DsTensor._from_blocks(blocks, sizes, first_shape[1:],
                                 first_dtype)


def _file_header(path, caller, name, with_pt):
    """``(absolute path, shape, torch dtype)`` of a ``.npy`` file, or
    with ``with_pt`` of a ``.npy`` or ``.pt`` file."""
    if not with_pt or not isinstance(path, (str, os.PathLike)):
        return _header(path, caller, name)      # it names a bad path
    if os.fspath(path).endswith(".pt"):
        return _pt_header(path, caller, name)
    if os.fspath(path).endswith(".npy"):
        return _header(path, caller, name)
    raise DataFileError(
        f"{caller} reads .npy (numpy.save) and .pt (torch.save) files. "
        f"Got '{name}' = {os.fspath(path)!r}.")


def _pt_header(path, caller, name):
    """``(absolute path, shape, torch dtype)`` of a ``.pt`` file of one
    tensor: its pickle is read, its data memory-mapped, not read."""
    try:
        path = os.path.abspath(os.fspath(path))
    except TypeError:
        raise InvalidParameterError(
            f"The '{name}' parameter of {caller} must be a path. Got "
            f"{path!r} instead.") from None
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{caller}: '{name}' = {path!r} does not exist or is not a "
            f"file.")
    if not zipfile.is_zipfile(path):
        raise DataFileError(
            f"{caller}: '{name}' = {path!r} is not a file of torch.save's "
            f"zip format (the default since torch 1.6): load it and "
            f"torch.save it again.")
    try:
        tensor = torch.load(path, map_location="cpu", weights_only=True,
                            mmap=True)
    except Exception as exc:    # noqa: BLE001 - the file is the user's
        raise DataFileError(
            f"{caller}: '{name}' = {path!r} could not be read with "
            f"torch.load(weights_only=True): {type(exc).__name__}: "
            f"{str(exc)[:300]}") from None
    if not isinstance(tensor, torch.Tensor) or \
            tensor.layout != torch.strided:
        what = (f"a {tensor.layout} tensor"
                if isinstance(tensor, torch.Tensor)
                else f"a {type(tensor).__name__}")
        raise DataFileError(
            f"{caller}: '{name}' = {path!r} holds {what}; a .pt shard "
            f"holds one dense tensor (torch.save(tensor, path)).")
    if not _holdable(tensor.dtype):
        raise DtypeError(
            f"{caller} cannot hold dtype {tensor.dtype} of '{name}' = "
            f"{path!r} in a block. Convert it first (for example to "
            f"float32).")
    if tensor.dim() == 0 or tensor.shape[0] == 0:
        raise ShapeError(
            f"{caller} needs data with at least one row. '{name}' = "
            f"{path!r} holds a tensor of shape {tuple(tensor.shape)}.")
    return path, tuple(tensor.shape), tensor.dtype


def _holdable(dtype):
    """Whether a block may have this dtype: those of numpy's arrays, as for
    a ``.npy`` file, and bfloat16."""
    if dtype == torch.bfloat16:
        return True
    try:
        torch.empty(0, dtype=dtype).numpy()
    except TypeError:
        return False
    return True
