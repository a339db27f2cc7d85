"""Scores computed block by block and combined: accuracy, R², mean loss.

Each block yields a small dict of sufficient statistics (counts, sums,
and per-output mean and sum of squared deviations); :func:`combine`
merges them in any order (Chan et al.'s parallel variance update), and
:func:`accuracy`, :func:`r2` and :func:`mean_loss` read a score off the
result. R² follows :func:`sklearn.metrics.r2_score` with its defaults
(uniform average over outputs; a constant target scores 1.0 when
predicted exactly and 0.0 otherwise). A score that no such statistics
give (:mod:`._scoring`'s exact path) asks each block for its
``"outputs"``: the module's output rows and the targets, which
:func:`combine_all` concatenates in block order.
"""

import numpy as np
import torch

__all__ = ["class_stats", "regression_stats", "outputs_of", "combine",
           "combine_all", "accuracy", "r2", "mean_loss"]


def class_stats(output, y, loss_sum=None, wants=()):
    """Sufficient statistics of one block of class scores.

    ``output`` holds class scores (n, n_classes), ``y`` encoded labels
    (n,); ``loss_sum`` is the criterion summed over the block's rows, when
    it was computed. ``wants`` may ask for the block's ``"confusion"``
    matrix (rows: true class) and its ``"log_loss"`` (the summed negative
    log probabilities, in float64) and its ``"outputs"`` (the rows of
    ``output`` and ``y``, :func:`outputs_of`), for the scores of
    :mod:`._scoring`.
    """
    n = int(len(y))
    predicted = output.argmax(dim=1)
    correct = int((predicted == y).sum()) if n else 0
    stats = {"n": n, "loss_sum": loss_sum, "correct": correct}
    k = int(output.shape[1]) if output.ndim == 2 else 0
    if "confusion" in wants:
        stats["confusion"] = torch.bincount(
            y.to(torch.int64) * k + predicted.to(torch.int64),
            minlength=k * k).reshape(k, k).numpy()
    if "log_loss" in wants:
        # scikit-learn's log_loss clips probabilities at float64's eps.
        log_p = torch.log_softmax(output.detach().cpu().to(torch.float64),
                                  dim=1)
        picked = log_p.gather(1, y.to(torch.int64).reshape(-1, 1))
        stats["log_loss_sum"] = float(-picked.clamp(
            min=float(np.log(np.finfo(np.float64).eps))).sum())
    if "outputs" in wants:
        stats.update(outputs_of(output, y))
    return stats


def regression_stats(output, y, loss_sum=None, wants=()):
    """Sufficient statistics of one block of regression outputs.

    ``output`` and ``y`` are (n,) or (n, k), shaped alike; ``wants`` may
    ask for ``"abs"``, the summed absolute errors per output, and
    ``"outputs"`` (:func:`outputs_of`).
    """
    n = int(len(y))
    yt = _columns(y)
    pred = _columns(output)
    mean = yt.mean(axis=0) if n else np.zeros(yt.shape[1])
    stats = {"n": n, "loss_sum": loss_sum,
             "sse": ((yt - pred) ** 2).sum(axis=0), "mean": mean,
             "m2": ((yt - mean) ** 2).sum(axis=0)}
    if "abs" in wants:
        stats["abs_sum"] = np.abs(yt - pred).sum(axis=0)
    if "outputs" in wants:
        stats.update(outputs_of(output, y))
    return stats


def outputs_of(output, y):
    """A block's ``"outputs"``: the module's output rows as numpy, in
    their dtype (bfloat16, which numpy lacks, as float32: exactly), so
    that the master decodes them as ``predict`` decodes its own; and the
    targets (class indices for a classifier)."""
    return {"outputs": _rows(output), "targets": _rows(y)}


def combine(a, b):
    """The statistics of two blocks together (the rows of ``"outputs"``
    of ``a`` first)."""
    n = a["n"] + b["n"]
    out = {"n": n, "loss_sum": _add_optional(a["loss_sum"], b["loss_sum"])}
    for key in _GATHERED:
        if key in a:
            out[key] = _concatenate([a, b], key)
    for key in _SUMMED:
        if key in a:
            out[key] = a[key] + b[key]
    if "correct" in a:
        out["correct"] = a["correct"] + b["correct"]
        return out
    out["sse"] = a["sse"] + b["sse"]
    if a["n"] == 0 or b["n"] == 0:
        src = b if a["n"] == 0 else a
        out["mean"], out["m2"] = src["mean"], src["m2"]
        return out
    delta = b["mean"] - a["mean"]
    out["mean"] = a["mean"] + delta * b["n"] / n
    out["m2"] = a["m2"] + b["m2"] + delta ** 2 * a["n"] * b["n"] / n
    return out


#: The statistics that add up as they are.
_SUMMED = ("confusion", "log_loss_sum", "abs_sum")
#: The rows that are concatenated, in block order.
_GATHERED = ("outputs", "targets")


def combine_all(stats):
    """The statistics of blocks together, in the order given (which
    orders the rows of ``"outputs"``: concatenated once, at the end)."""
    gathered = {key: _concatenate(stats, key) for key in _GATHERED
                if key in stats[0]}
    stats = [{k: v for k, v in s.items() if k not in _GATHERED}
             for s in stats]
    total = stats[0]
    for s in stats[1:]:
        total = combine(total, s)
    return dict(total, **gathered)


def accuracy(stats):
    return stats["correct"] / stats["n"] if stats["n"] else float("nan")


def r2(stats):
    num, den = stats["sse"], stats["m2"]
    scores = np.ones_like(num, dtype=np.float64)
    nonzero = den != 0
    scores[nonzero] = 1.0 - num[nonzero] / den[nonzero]
    scores[(~nonzero) & (num != 0)] = 0.0
    return float(scores.mean())


def mean_loss(stats):
    if stats["loss_sum"] is None or stats["n"] == 0:
        return None
    return stats["loss_sum"] / stats["n"]


def _columns(t):
    a = t.detach().cpu().to(torch.float64).numpy() if torch.is_tensor(t) \
        else np.asarray(t, dtype=np.float64)
    return a.reshape(len(a), -1)


def _rows(t):
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.to(torch.float32)
    return t.numpy()


def _concatenate(stats, key):
    """The rows of ``key`` of blocks that hold any (an empty block's
    output has no columns)."""
    parts = [s[key] for s in stats if s["n"]]
    return np.concatenate(parts) if parts else stats[0][key]


def _add_optional(a, b):
    if a is None or b is None:
        return None
    return a + b
