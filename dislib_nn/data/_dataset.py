"""ds-tensors from a map-style ``torch.utils.data.Dataset`` of pairs.

A Dataset whose items are ``(x, y)`` pairs (tensors, numpy arrays or
numbers) becomes two DsTensors of the same blocks: ``x`` stacks the
items' first elements, ``y`` their second.

What moves: the master reads item 0 only (for the samples' shapes and
dtypes); each block is read by its own task, which gets a copy of the
Dataset object and the range of its rows, and calls ``dataset[i]`` for
them. So a Dataset that reads files (it holds paths, opens them in
``__getitem__``) is read on the workers, the files never passing through
the master; they must be readable at the same paths there. A
``TensorDataset`` of two tensors already holds every row in memory: its
tensors are blocked on the master as arrays are, so that its rows travel
once instead of once per block.
"""

import numbers
import pickle

import numpy as np
import torch

from dislib_nn.data import _validation as v
from dislib_nn.data._creation import from_array
from dislib_nn.data._placing import per_block
from dislib_nn.data._tasks import _read_dataset_rows, _torch_dtype
from dislib_nn.data._tensor import DsTensor
from dislib_nn.runtime import by_value, n_workers

__all__ = ["from_dataset", "is_dataset", "item_array"]


def is_dataset(obj):
    """True for a torch Dataset (map-style or iterable)."""
    return isinstance(obj, torch.utils.data.Dataset)


def from_dataset(dataset, block_size=None, n_blocks=None):
    """``(x, y)``: DsTensors of a Dataset's ``(x, y)`` items, each block
    read by its own task.

    Parameters
    ----------
    dataset : torch.utils.data.Dataset
        A map-style Dataset (``len`` and ``dataset[i]``) whose items are
        ``(x, y)`` pairs of tensors, arrays or numbers, every item of the
        same shapes. It must pickle: each block's task gets a copy.
    block_size, n_blocks : int, default=None
        As in :func:`from_array`; with neither, one block per worker of
        the runtime.

    Returns
    -------
    (DsTensor, DsTensor)

    Examples
    --------
    >>> import torch
    >>> import dislib_nn as dnn
    >>> ds = torch.utils.data.TensorDataset(torch.ones(10, 3),
    ...                                     torch.zeros(10))
    >>> x, y = dnn.from_dataset(ds, n_blocks=2)
    >>> x
    DsTensor(shape=(10, 3), dtype=torch.float32, block_sizes=(5, 5))
    """
    n_rows, first = _check(dataset, "from_dataset", "dataset")
    sizes = v.block_sizes(n_rows, block_size, n_blocks, "from_dataset",
                          n_workers())
    tensors = getattr(dataset, "tensors", None)
    if type(dataset) is torch.utils.data.TensorDataset and \
            len(tensors) == 2:
        return (from_array(tensors[0], block_size=list(sizes)),
                from_array(tensors[1], block_size=list(sizes)))
    x0, y0 = (item_array(value, "from_dataset", "dataset[0]", k)
              for k, value in enumerate(first))
    wire = _wire(dataset, "from_dataset", "dataset")
    bounds = v.offsets(sizes)
    blocks = per_block(len(sizes), lambda i: _read_dataset_rows(
        wire, int(bounds[i]), int(bounds[i + 1]), x0.shape, x0.dtype,
        y0.shape, y0.dtype))
    return tuple(DsTensor._from_blocks(
        [b[k] for b in blocks], sizes, item.shape, _torch_dtype(item.dtype))
        for k, item in enumerate((x0, y0)))


def _check(dataset, caller, name):
    """``(number of items, item 0)`` of a map-style Dataset of pairs;
    errors name what is wrong before any task runs."""
    kind = type(dataset).__name__
    if isinstance(dataset, torch.utils.data.IterableDataset):
        raise TypeError(
            f"{caller}: '{name}' is an IterableDataset ({kind}), which has "
            f"no length and cannot be split into blocks of rows. Pass a "
            f"map-style Dataset (len() and dataset[i]).")
    try:
        n_rows = len(dataset)
    except TypeError:
        raise TypeError(
            f"{caller}: '{name}' ({kind}) has no len(): a map-style "
            f"Dataset defines __len__ and __getitem__.") from None
    if n_rows < 1:
        raise ValueError(f"{caller}: '{name}' ({kind}) is empty.")
    item = dataset[0]
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        what = (f"a {type(item).__name__} of {len(item)} elements"
                if isinstance(item, (tuple, list))
                else f"a {type(item).__name__}")
        raise TypeError(
            f"{caller}: the items of '{name}' ({kind}) must be (x, y) "
            f"pairs; {name}[0] is {what}.")
    return n_rows, item


def item_array(value, caller, name, position):
    """One element of an item as a numpy array (a copy of a tensor)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, numbers.Number, np.generic)):
        array = np.asarray(value)
        if array.dtype.kind in "biuf":
            return array
    raise TypeError(
        f"{caller}: {'xy'[position]} of {name} must be a tensor, a numeric "
        f"array or a number. Got {type(value).__name__} {value!r:.60}.")


def _wire(dataset, caller, name):
    """The Dataset as the tasks get it (by value when defined in the
    user's script); raises when it does not pickle."""
    wire = by_value(dataset)
    try:
        pickle.dumps(wire)
    except Exception as exc:  # noqa: BLE001 - any pickling error
        raise TypeError(
            f"{caller}: '{name}' ({type(dataset).__name__}) must pickle, "
            f"since each block's task reads its rows from a copy: "
            f"{type(exc).__name__}: {exc}. Keep paths rather than open "
            f"files in it (open them in __getitem__).") from exc
    return wire
