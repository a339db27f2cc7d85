"""plot_history: what it draws, and its error without matplotlib."""

import sys

import numpy as np
import pytest
from torch import nn

import dislib_nn as dnn
from dislib_nn.exceptions import (InvalidParameterError,
                                  MissingDependencyError, NotFittedError)

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def _lines(ax):
    """{label: (x, y)} of every line on ax and its twins."""
    out = {}
    for axes in ax.figure.axes:
        for line in axes.get_lines():
            out[line.get_label()] = (list(line.get_xdata()),
                                     list(line.get_ydata()))
    return out


def _fitted(backend):
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    clf = dnn.SyncEpochAveragingClassifier(
        module=nn.Linear, module__in_features=4, module__out_features=3,
        n_epochs=3, lr=0.05, batch_size=16, n_workers=2,
        validation_fraction=0.2, random_state=0)
    return clf.fit(X.astype(np.float32), y)


def test_plot_history_draws_each_series_of_a_fitted_estimator(backend,
                                                               tmp_path):
    import matplotlib.pyplot as plt
    clf = _fitted(backend)
    ax = dnn.plot_history(clf)
    path = tmp_path / "history.png"
    ax.figure.savefig(path)
    lines = _lines(ax)
    epochs = [r["epoch"] for r in clf.history_]
    assert epochs == [1, 2, 3]
    for key in ("train_loss", "valid_loss", "valid_score"):
        assert lines[key] == (epochs, [r[key] for r in clf.history_])
    assert ax.get_xlabel() == "epoch"
    assert ax.figure.axes[1].get_ylabel() == "validation score (accuracy)"
    assert len(ax.collections) == 0      # no merge events in sync history
    assert path.stat().st_size > 0
    plt.close(ax.figure)


def test_plot_history_draws_on_the_given_axes_and_skips_missing_values():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    history = [{"epoch": 1, "train_loss": 2.0, "valid_loss": None,
                "valid_score": None},
               {"epoch": 2, "train_loss": 1.0, "valid_loss": None,
                "valid_score": None}]
    assert dnn.plot_history(history, ax=ax) is ax
    assert _lines(ax) == {"train_loss": ([1, 2], [2.0, 1.0])}
    assert len(fig.axes) == 1            # no score axis without scores
    plt.close(fig)


def test_plot_history_draws_one_event_per_merge_record(tmp_path):
    import matplotlib.pyplot as plt
    history = [
        {"epoch": 1, "train_loss": 1.0, "valid_loss": None,
         "valid_score": None,
         "merges": [{"worker": 0, "staleness": 0, "weight": 0.5},
                    {"worker": 1, "staleness": 1, "weight": 0.25}]},
        {"epoch": 2, "train_loss": 0.5, "valid_loss": None,
         "valid_score": None,
         "merges": [{"worker": 1, "staleness": 0, "weight": 0.5, "index": 3},
                    {"worker": 0, "staleness": 2, "weight": 0.1, "index": 2},
                    {"worker": 1, "index": 4}]},
    ]
    ax = dnn.plot_history(history)
    ax.figure.savefig(tmp_path / "merges.png")
    (events,) = ax.collections
    xs = [x for x, _ in events.get_offsets()]
    assert np.allclose(xs, [0.5, 1.0, 1 + 1 / 3, 1 + 2 / 3, 2.0])
    # in the order merges ran ("index"); colour by staleness (missing: 0),
    # size grows with weight (missing: 1)
    assert list(events.get_array()) == [0, 1, 2, 0, 0]
    sizes = list(events.get_sizes())
    assert sizes[4] > sizes[0] == sizes[3] > sizes[1] > sizes[2]
    assert "merge" in events.get_label()
    plt.close(ax.figure)


def test_plot_history_draws_the_merges_of_an_async_fit(backend):
    import matplotlib.pyplot as plt
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    clf = dnn.AsyncEpochAveragingClassifier(
        module=nn.Linear, module__in_features=4, module__out_features=3,
        n_epochs=3, lr=0.05, batch_size=16, n_workers=2, random_state=0)
    clf.fit(X.astype(np.float32), y)
    merges = [sorted(r["merges"], key=lambda m: m["index"])
              for r in clf.history_]
    assert all(len(m) == 2 for m in merges)
    ax = dnn.plot_history(clf)
    (events,) = ax.collections
    assert list(events.get_array()) == [m["staleness"] for ms in merges
                                        for m in ms]
    assert np.allclose([x for x, _ in events.get_offsets()],
                       [0.5, 1, 1.5, 2, 2.5, 3])
    plt.close(ax.figure)


def test_plot_history_says_how_to_install_matplotlib_when_missing(
        monkeypatch):
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    history = [{"epoch": 1, "train_loss": 1.0}]
    with pytest.raises(MissingDependencyError,
                       match=r"needs matplotlib.*pip install matplotlib "
                             r"\(or, in a checkout of dislib_nn, pip "
                             r"install -e \"\.\[plot\]\"\)"):
        dnn.plot_history(history)
    with pytest.raises(ImportError, match="matplotlib"):
        dnn.plot_history(history)


def test_plot_history_before_fit():
    clf = dnn.SyncEpochAveragingClassifier(module=nn.Linear)
    with pytest.raises(NotFittedError, match="plot_history needs its "
                                             "history_. Call 'fit' first"):
        dnn.plot_history(clf)


@pytest.mark.parametrize("bad, match", [
    ("history", "must be a fitted dislib_nn estimator or a list of epoch "
                "records \\(dicts\\). Got str instead"),
    ([{"loss": 1.0}], r"dicts with an 'epoch' key.*Got \{'loss': 1.0\}"),
])
def test_plot_history_rejects_what_is_not_a_history(bad, match):
    with pytest.raises(InvalidParameterError, match=match):
        dnn.plot_history(bad)
