"""Plots of a fitted estimator's training history (needs matplotlib).

matplotlib is an optional dependency: ``pip install matplotlib``, or
``pip install -e ".[plot]"`` in a checkout.
It is imported when a plot is drawn, never when dislib_nn is imported.
"""

import numbers

from dislib_nn.exceptions import (InvalidParameterError,
                                  MissingDependencyError, NotFittedError)

__all__ = ["plot_history"]

# The key of the per-merge records that asynchronous estimators add to
# an epoch's record: a list of dicts with "worker", "index" (the order in
# which merges ran), "staleness" and "weight" (any may be missing).
MERGES_KEY = "merges"


def plot_history(estimator, ax=None):
    """Draw training loss, validation loss and score per epoch.

    The losses share the left axis; the validation score (accuracy for
    classifiers, R² for regressors) has its own axis on the right. When
    the history holds per-merge records (asynchronous estimators), each
    merge is drawn as a tick along the bottom of the plot, spread over
    its epoch in the order the merges ran, coloured by staleness and
    sized by weight.

    Parameters
    ----------
    estimator : fitted estimator or list of dict
        An estimator with ``history_`` (any of dislib_nn's), or such a
        history itself.
    ax : matplotlib Axes, default=None
        Where to draw; a new figure when None.

    Returns
    -------
    ax : matplotlib Axes
        The axes of the losses. The score's axes, when drawn, is
        ``ax.figure.axes`` after it (a twin of ``ax``).

    Raises
    ------
    MissingDependencyError
        When matplotlib is not installed.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import dislib_nn as dnn
    >>> history = [{"epoch": 1, "train_loss": 0.9, "valid_loss": 1.0,
    ...             "valid_score": 0.6},
    ...            {"epoch": 2, "train_loss": 0.5, "valid_loss": 0.7,
    ...             "valid_score": 0.8}]
    >>> ax = dnn.plot_history(history)
    >>> [line.get_label() for line in ax.get_lines()]
    ['train_loss', 'valid_loss']
    """
    history, score_name = _history(estimator)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    handles = []
    for key, style in (("train_loss", "-o"), ("valid_loss", "-s")):
        epochs, values = _series(history, key)
        if epochs:
            handles += ax.plot(epochs, values, style, markersize=3,
                               label=key)
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    ax.xaxis.set_major_locator(_integer_locator())
    epochs, scores = _series(history, "valid_score")
    if epochs:
        twin = ax.twinx()
        handles += twin.plot(epochs, scores, "-^", markersize=3,
                             color="tab:green", label="valid_score")
        twin.set_ylabel(f"validation score ({score_name})")
    merges = _merge_events(history)
    if merges:
        handles.append(_draw_merges(ax, merges))
    if handles:
        ax.legend(handles=handles, labels=[h.get_label() for h in handles],
                  loc="best", fontsize="small")
    return ax


def _history(estimator):
    """The list of epoch records, and the name of the score."""
    from sklearn.base import is_classifier
    if isinstance(estimator, (list, tuple)):
        history, name = list(estimator), "score"
    elif hasattr(estimator, "get_params"):
        history = getattr(estimator, "history_", None)
        if history is None:
            raise NotFittedError(
                f"This {type(estimator).__name__} instance is not fitted "
                f"yet: plot_history needs its history_. Call 'fit' first.")
        name = "accuracy" if is_classifier(estimator) else "R²"
    else:
        raise InvalidParameterError(
            f"The 'estimator' parameter of plot_history must be a fitted "
            f"dislib_nn estimator or a list of epoch records (dicts). Got "
            f"{type(estimator).__name__} instead.")
    for record in history:
        if not isinstance(record, dict) or "epoch" not in record:
            raise InvalidParameterError(
                f"plot_history needs epoch records: dicts with an 'epoch' "
                f"key, as in an estimator's history_. Got {record!r}.")
    return history, name


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise MissingDependencyError(
            "plot_history needs matplotlib, which is not installed: "
            "pip install matplotlib (or, in a checkout of dislib_nn, "
            "pip install -e \".[plot]\").") from error
    return plt


def _integer_locator():
    from matplotlib.ticker import MaxNLocator
    return MaxNLocator(integer=True)


def _series(history, key):
    """Epochs and values of ``key``, where the records have a number."""
    pairs = [(r["epoch"], float(r[key])) for r in history
             if isinstance(r.get(key), numbers.Real)]
    return [e for e, _ in pairs], [v for _, v in pairs]


def _merge_events(history):
    """(x, staleness, weight) per merge; x spreads merges over the epoch."""
    events = []
    for record in history:
        merges = record.get(MERGES_KEY)
        if not isinstance(merges, (list, tuple)) or not merges:
            continue
        merges = [m if isinstance(m, dict) else {} for m in merges]
        order = sorted(range(len(merges)), key=lambda k: (
            _number(merges[k].get("index"), k), k))
        for k, i in enumerate(order):
            merge = merges[i]
            x = record["epoch"] - 1 + (k + 1) / len(merges)
            events.append((x, _number(merge.get("staleness"), 0.0),
                           _number(merge.get("weight"), 1.0)))
    return events


def _number(value, default):
    return float(value) if isinstance(value, numbers.Real) else default


def _draw_merges(ax, events):
    xs = [x for x, _, _ in events]
    staleness = [s for _, s, _ in events]
    weights = [w for _, _, w in events]
    biggest = max(weights) or 1.0
    sizes = [20 + 80 * w / biggest for w in weights]
    # x in epochs, y in axes fractions: a strip along the bottom.
    return ax.scatter(xs, [0.03] * len(xs), s=sizes, c=staleness,
                      cmap="viridis_r", marker="|",
                      transform=ax.get_xaxis_transform(), clip_on=False,
                      label="merge (colour: staleness, size: weight)")
