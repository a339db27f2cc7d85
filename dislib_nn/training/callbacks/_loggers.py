"""Callbacks that report a fit: a progress bar, a CSV file, TensorBoard.

They run on the master and see what it sees: an epoch, and its merges,
once the epoch's scalars are read. Training tasks run elsewhere (a
COMPSs node, a worker process) and report nothing until they return, so
no callback can show batches or a loss while an epoch runs.
"""

import csv
import importlib
import json
import numbers
import os

from dislib_nn.exceptions import InvalidParameterError, MissingDependencyError
from dislib_nn.training.callbacks._core import Callback

__all__ = ["ProgressBar", "CSVLogger", "TensorBoardLogger", "csv_value"]


class ProgressBar(Callback):
    """A tqdm bar over the fit's epochs, with the merges and losses read.

    The bar advances when an epoch's scalars are read on the master,
    which is when the epoch's tasks have returned: nothing moves while an
    epoch runs (see the module). Needs ``tqdm`` (``pip install tqdm``);
    without it the fit raises
    :class:`~dislib_nn.exceptions.MissingDependencyError` before any task
    runs.

    Parameters
    ----------
    stream : file-like or None, default=None
        Where to draw (tqdm's default, standard error, when None).
    leave : bool, default=True
        Keep the finished bar on screen.

    Examples
    --------
    >>> from dislib_nn.callbacks import ProgressBar
    >>> ProgressBar(leave=False).leave
    False
    """

    changes_training = False

    def __init__(self, stream=None, leave=True):
        self.stream = stream
        self.leave = leave

    def initialize(self):
        _require("tqdm", "tqdm", "ProgressBar")
        self._bar = None
        self._merges = 0
        return self

    def on_fit_begin(self, state):
        self._merges = 0
        self._bar = _require("tqdm", "tqdm", "ProgressBar").tqdm(
            total=state.total, initial=state.first_epoch, unit="epoch",
            desc=type(state.estimator).__name__, file=self.stream,
            leave=self.leave)

    def on_merge(self, state, merge):
        self._merges += 1

    def on_epoch_end(self, state, record, handle):
        shown = {"merges": self._merges,
                 "train_loss": f"{record.train_loss:.4g}"}
        if record.valid_loss is not None:
            shown["valid_loss"] = f"{record.valid_loss:.4g}"
        self._bar.set_postfix(shown, refresh=False)
        self._bar.update(1)
        return False

    def on_fit_end(self, state):
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class CSVLogger(Callback):
    """Write ``history_`` to a CSV file, one row per epoch as it is read.

    The columns are the keys of the records (the first record's, in
    order); a value is written as :func:`csv_value` says (None as an
    empty cell, lists and dicts as JSON). The file is written afresh at
    the start of each fit, with the rows of the epochs ``history_``
    already holds (``warm_start``, ``partial_fit``, a resume), so that it
    always equals ``history_``.

    Parameters
    ----------
    path : str or path-like

    Examples
    --------
    >>> from dislib_nn.callbacks import CSVLogger
    >>> CSVLogger("history.csv").path
    'history.csv'
    """

    changes_training = False

    def __init__(self, path):
        self.path = path

    def initialize(self):
        if not isinstance(self.path, (str, os.PathLike)):
            raise InvalidParameterError(
                f"The 'path' argument of CSVLogger must be a str or a "
                f"path. Got {self.path!r} instead.")
        self._columns = None
        return self

    def on_fit_begin(self, state):
        history = state.estimator.history_
        self._columns = list(history[0]) if history else None
        with open(self.path, "w", newline="") as f:
            if history:
                self._rows(f, history)

    def on_epoch_end(self, state, record, handle):
        row = record.as_history()
        with open(self.path, "a", newline="") as f:
            if self._columns is None:
                self._columns = list(row)
                self._rows(f, [row])
            else:
                csv.writer(f).writerow(
                    csv_value(row.get(k)) for k in self._columns)
        return False

    def _rows(self, f, rows):
        writer = csv.writer(f)
        writer.writerow(self._columns)
        for row in rows:
            writer.writerow(csv_value(row.get(k)) for k in self._columns)


def csv_value(value):
    """A history value as a CSV cell: "" for None, ``repr`` for floats
    (read back exactly with ``float``), JSON for lists and dicts."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (list, dict,
                                                         float)):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value)


class TensorBoardLogger(Callback):
    """Log each epoch's numbers to TensorBoard, at step = the epoch.

    Every number of the record (``train_loss``, ``valid_loss``,
    ``valid_score``, ``lr``, ``dur_s``, ``n_merges``, ...) becomes a
    scalar named ``prefix + key``. Needs ``tensorboard`` (``pip install
    tensorboard``; torch's ``torch.utils.tensorboard`` writes the files);
    without it the fit raises
    :class:`~dislib_nn.exceptions.MissingDependencyError` before any task
    runs.

    Parameters
    ----------
    logdir : str or path-like
    prefix : str, default=""
    """

    changes_training = False

    def __init__(self, logdir, prefix=""):
        self.logdir = logdir
        self.prefix = prefix

    def initialize(self):
        _require("torch.utils.tensorboard", "tensorboard",
                 "TensorBoardLogger")
        self._writer = None
        return self

    def on_fit_begin(self, state):
        module = _require("torch.utils.tensorboard", "tensorboard",
                          "TensorBoardLogger")
        self._writer = module.SummaryWriter(os.fspath(self.logdir))

    def on_epoch_end(self, state, record, handle):
        for key in record.keys():
            value = record[key]
            if isinstance(value, numbers.Real) and not isinstance(
                    value, bool) and value is not None:
                self._writer.add_scalar(self.prefix + key, float(value),
                                        global_step=record.epoch)
        return False

    def on_fit_end(self, state):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _require(module, package, who):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{who} needs the '{package}' package, which is not "
            f"installed: pip install {package} (or the dislib-nn "
            f"'callbacks' extra). ({exc})") from exc
