"""Per-block tasks around training: labels, checks, splits, predictions.

Each task reads one block (or a block of X and the matching block of y)
and returns a small result or a new block, so the master handles only
futures and scalars: it never collects X.
"""

import numpy as np
import torch

from dislib_nn.runtime import COLLECTION_IN, Depth, Type, shared_empty, \
    task
from dislib_nn.training import _labels
from dislib_nn.training.merge import _shards
from dislib_nn.training.tasks._device import resolve_device, size_threads
from dislib_nn.training.tasks._torch_loop import forward_batches, \
    loss_of_batches

__all__ = []


@task(returns=1)
def _unique_labels(y_block):
    """The distinct values of a block of labels, as a numpy array."""
    return np.unique(_numpy(y_block))


@task(returns=1)
def _encode_labels(y_block, classes, argument):
    """Labels as int64 class indices; unseen labels raise ValueError."""
    return torch.from_numpy(_labels.encode(_numpy(y_block), classes,
                                           argument))


@task(returns=1)
def _all_finite(block):
    """Whether a block holds no NaN and no infinity."""
    t = torch.as_tensor(block)
    if t.is_floating_point() or t.is_complex():
        return bool(torch.isfinite(t).all())
    return True


@task(returns=4)
def _split_block(x_block, y_block, n_valid, seed):
    """Move ``n_valid`` random rows of a block to a validation block."""
    n = len(x_block)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    valid, train = order[:n_valid].sort().values, order[n_valid:].sort().values
    return x_block[train], y_block[train], x_block[valid], y_block[valid]


@task(returns=1, blocks={Type: COLLECTION_IN, Depth: 1})
def _pack_block(layout, blocks):
    """One block of each input packed into one block of byte rows
    (:class:`._packed.PackedLayout`)."""
    return layout.pack([torch.as_tensor(b) for b in blocks], shared_empty)


@task(returns=1)
def _predict_block(components, state, x_block, output, what, batch_size,
                   device, classes):
    """Predictions for one block: labels, probabilities or raw outputs."""
    module, dev = _model(components, state, device)
    raw = forward_batches(module, torch.as_tensor(x_block), batch_size, dev,
                          output)
    if what == "proba":
        return torch.softmax(raw.to(torch.float32), dim=1)
    if what == "labels":
        return classes[raw.argmax(dim=1)]
    return raw


@task(returns=1)
def _score_block(components, state, x_block, y_block, output, with_loss,
                 batch_size, device, classes, wants=()):
    """Sufficient statistics for accuracy or R² (and the mean loss).

    ``state`` (a state dict, or None to use the module in ``components``
    as it is) is loaded into the module. ``classes`` is None when
    ``y_block`` already holds class indices; otherwise the labels are
    encoded here and unseen ones raise ValueError. ``wants``: the
    statistics a score needs beyond the counts (:mod:`.._scoring`).
    """
    return _block_stats(components, state, x_block, y_block, output,
                        with_loss, batch_size, device, classes, wants)


@task(returns=1, shards={Type: COLLECTION_IN, Depth: 1})
def _score_block_shards(components, shards, x_block, y_block, output,
                        with_loss, batch_size, device, classes, wants=()):
    """``_score_block`` of a model held as its shards
    (``merge="sharded"``), joined here: where the next round's training
    fetched them already."""
    return _block_stats(components, _shards.model_from(shards), x_block,
                        y_block, output, with_loss, batch_size, device,
                        classes, wants)


def _block_stats(components, state, x_block, y_block, output, with_loss,
                 batch_size, device, classes, wants):
    module, dev = _model(components, state, device)
    y = torch.as_tensor(y_block) if classes is None else torch.from_numpy(
        _labels.encode(_numpy(y_block), classes, "y"))
    raw = forward_batches(module, torch.as_tensor(x_block), batch_size, dev,
                          output)
    y = output.targets.score_target(output, y.to(output.y_dtype()))
    loss_sum = None
    if with_loss and len(y):
        criterion = components.build_criterion()
        if output.loss_input == "all":      # on all the forward returns
            loss_sum = loss_of_batches(module, torch.as_tensor(x_block), y,
                                       batch_size, dev, output, criterion)
        else:
            with torch.no_grad():
                loss_sum = float(criterion(raw, y)) * len(y)
    return output.targets.block_stats(raw, y, loss_sum, wants)


def _model(components, state, device):
    size_threads()
    dev = resolve_device(device)
    module = components.build_module(state)
    return module.to(dev), dev


def _numpy(block):
    if torch.is_tensor(block):
        return block.detach().cpu().numpy()
    return np.asarray(block)
