"""Class labels: any values in, int64 class indices for the criterion.

``classes_`` is the sorted array of distinct labels seen in ``fit``;
label ``classes_[i]`` is encoded as ``i``. Labels may be ints, floats,
booleans or strings.
"""

import numpy as np

__all__ = ["encode", "union", "as_label_tensor"]


def encode(y, classes, argument="y"):
    """``y`` as int64 indices into ``classes``.

    Raises
    ------
    ValueError
        If ``y`` holds labels that are not in ``classes``, naming them.
    """
    y = np.asarray(y)
    if y.ndim != 1:
        y = y.reshape(-1)
    if len(y) == 0:
        return np.zeros(0, dtype=np.int64)
    try:
        idx = np.searchsorted(classes, y)
    except TypeError:
        idx = None
    if idx is not None:
        idx = np.clip(idx, 0, len(classes) - 1)
        seen = classes[idx] == y
    if idx is None or not np.all(seen):
        unseen = sorted(set(y.tolist()) - set(classes.tolist()), key=repr)
        shown = ", ".join(repr(v) for v in unseen[:5])
        more = f" and {len(unseen) - 5} more" if len(unseen) > 5 else ""
        raise ValueError(
            f"{argument} holds labels that were not seen in fit: {shown}"
            f"{more}. The classes seen in fit are "
            f"{_show_classes(classes)}.")
    return idx.astype(np.int64)


def union(parts):
    """The sorted distinct labels of several arrays of labels."""
    if not parts:
        return np.zeros(0)
    return np.unique(np.concatenate([np.asarray(p).reshape(-1)
                                     for p in parts]))


def as_label_tensor(classes):
    """``classes`` as a torch tensor, or None when they are not numbers."""
    import torch
    if classes.dtype.kind not in "biuf":
        return None
    return torch.as_tensor(classes)


def _show_classes(classes):
    items = ", ".join(repr(v) for v in classes[:10].tolist())
    if len(classes) > 10:
        items += f", ... ({len(classes)} in all)"
    return "[" + items + "]"
