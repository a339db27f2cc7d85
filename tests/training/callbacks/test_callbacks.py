"""The public callbacks: hooks, built-ins, ``callbacks=`` and its errors.

Each built-in is checked against what a plain computation says: early
stopping against the epoch and model a plain reading of ``history_``
and a fit of that many epochs give, the CSV file against ``history_``,
a learning rate set by a callback against plain PyTorch at those rates.
"""

import csv
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from sklearn.base import clone

import dislib_nn
import dislib_nn.training.callbacks as training_callbacks
from dislib_nn import (AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from dislib_nn.callbacks import (Callback, Checkpoint, CSVLogger,
                                 EarlyStopping, EpochRecord, FitState,
                                 MergeRecord, ProgressBar,
                                 TensorBoardLogger)
from dislib_nn.exceptions import InvalidParameterError, MissingDependencyError
from tests.conftest import use_backend
from tests.training import _models, _reference as ref
from tests.training._paths import ROOT



@pytest.fixture(autouse=True)
def _sequential():
    use_backend("sequential")
    yield
    use_backend("local")


def _data(n=48, n_valid=24):
    rng = np.random.RandomState(0)
    X = rng.randn(n, 4).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.randn(n)).astype(np.float32)
    Xv = rng.randn(n_valid, 4).astype(np.float32)
    yv = rng.randn(n_valid).astype(np.float32)     # noise: it overfits
    return X, y, Xv, yv


def _regressor(**params):
    X, y, Xv, yv = _data()
    params = dict(dict(module=_models.MLP, n_epochs=30, n_workers=2,
                       batch_size=8, lr=0.1, random_state=0,
                       validation_data=(Xv, yv)), **params)
    return SyncEpochAveragingRegressor(**params), X, y


def _losses(history):
    return [(r["epoch"], r["train_loss"], r["valid_loss"]) for r in history]


def _same_weights(a, b):
    ref.assert_same_model(a, b, atol=0, rtol=0)


class Recorder(Callback):
    """Records every hook call."""

    def __init__(self, tag="r"):
        self.tag = tag

    def initialize(self):
        self.calls = []
        return self

    def on_fit_begin(self, state):
        assert isinstance(state, FitState)
        self.calls.append(("fit_begin",))

    def on_epoch_begin(self, state, epoch):
        self.calls.append(("epoch_begin", epoch + 1))

    def on_merge(self, state, merge):
        assert isinstance(merge, MergeRecord)
        self.calls.append(("merge", merge.epoch, merge.index, merge.worker))

    def on_epoch_end(self, state, record, handle):
        assert isinstance(record, EpochRecord)
        self.calls.append(("epoch_end", record.epoch))

    def on_fit_end(self, state):
        self.calls.append(("fit_end",))


# ------------------------------------------------------------ the package
def test_public_import_path_re_exports_the_package():
    assert set(dislib_nn.callbacks.__all__) == set(training_callbacks.__all__)
    for name in training_callbacks.__all__:
        assert getattr(dislib_nn.callbacks, name) is getattr(
            training_callbacks, name)
    from dislib_nn.training.callbacks._lr_scheduler import LRScheduler
    assert dislib_nn.callbacks.LRScheduler is LRScheduler


# ------------------------------------------------------- user callbacks
@pytest.mark.parametrize("backend_name", ["local", "sequential"])
@pytest.mark.parametrize("strategy", ["sync", "async"])
def test_hooks_run_in_order_and_merges_match_history(backend_name,
                                                     strategy):
    use_backend(backend_name)
    X, y, _, _ = _data()
    rec = Recorder()
    cls = (SyncEpochAveragingRegressor if strategy == "sync"
           else AsyncEpochAveragingRegressor)
    extra = {"sync_every": 0.5} if strategy == "sync" else {}
    est = cls(module=_models.MLP, n_epochs=3, n_workers=2, batch_size=8,
              random_state=0, callbacks=[rec], **extra).fit(X, y)
    calls = rec.calls
    assert calls[0] == ("fit_begin",) and calls[-1] == ("fit_end",)
    for record in est.history_:
        e = record["epoch"]
        begin = calls.index(("epoch_begin", e))
        end = calls.index(("epoch_end", e))
        merges = [c for c in calls if c[0] == "merge" and c[1] == e]
        assert begin < end
        assert all(begin < calls.index(m) < end for m in merges)
        if strategy == "sync":
            assert record["n_merges"] == 2
            assert [m[2] for m in merges] == list(range(2))
        else:
            assert [(m[2], m[3]) for m in merges] == [
                (r["index"], r["worker"]) for r in record["merges"]]
    assert [c[1] for c in calls if c[0] == "epoch_end"] == [1, 2, 3]


class StopAt(Callback):
    needs_current_epoch = True

    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_end(self, state, record, handle):
        if record.epoch == self.epoch:
            state.stop = True


def test_a_callback_stops_the_fit_where_it_says():
    est, X, y = _regressor(callbacks=[StopAt(2)], validation_data=None)
    est.fit(X, y)
    short, _, _ = _regressor(n_epochs=2, validation_data=None)
    short.fit(X, y)
    assert est.n_epochs_ == 2
    assert [r["train_loss"] for r in est.history_] == \
        [r["train_loss"] for r in short.history_]
    _same_weights(est.module_, short.module_)


class Halving(Callback):
    def on_epoch_begin(self, state, epoch):
        state.lr = state.lr * 0.5 ** epoch


def test_a_callback_sets_each_epochs_learning_rate():
    X, y, _, _ = _data()
    torch.manual_seed(0)
    init = _models.MLP(n_features_in=4, n_outputs=1)
    est = SyncEpochAveragingRegressor(
        module=init, n_workers=1, shuffle="none", n_epochs=3, batch_size=8,
        lr=0.1, callbacks=[Halving()]).fit(X, y)
    lrs = [0.1, 0.05, 0.025]
    assert [r["lr"] for r in est.history_] == pytest.approx(lrs)
    expected = ref.single_process(
        init, torch.from_numpy(X), torch.from_numpy(y)[:, None],
        torch.nn.MSELoss(), epochs=3, batch_size=8, lr=0.1, lrs=lrs)
    ref.assert_same_model(est.module_, expected, atol=2e-5, rtol=1e-4)


def test_callback_state_is_reset_for_each_fit_and_not_shared_by_clones():
    rec = Recorder()
    est, X, y = _regressor(n_epochs=2, callbacks=[rec],
                           validation_data=None)
    est.fit(X, y)
    est.fit(X, y)
    assert len([c for c in rec.calls if c[0] == "epoch_end"]) == 2
    twin = clone(est)
    assert twin.callbacks[0] is not rec
    assert twin.callbacks[0].get_params() == rec.get_params()


SCRIPT = textwrap.dedent("""
    import json
    import sys

    import numpy as np
    import torch

    from dislib_nn import SyncEpochAveragingRegressor
    from dislib_nn.callbacks import Callback


    class Counter(Callback):
        # Defined in the script's __main__: it runs on the master.
        def initialize(self):
            self.epochs, self.merges = [], 0
            return self

        def on_merge(self, state, merge):
            self.merges += 1

        def on_epoch_end(self, state, record, handle):
            self.epochs.append(record.epoch)


    class Net(torch.nn.Module):
        def __init__(self, n_features_in=4, n_outputs=1):
            super().__init__()
            self.lin = torch.nn.Linear(n_features_in, n_outputs)

        def forward(self, x):
            return self.lin(x)


    if __name__ == "__main__":
        rng = np.random.RandomState(0)
        X = rng.randn(32, 4).astype("float32")
        counter = Counter()
        est = SyncEpochAveragingRegressor(
            module=Net, n_epochs=2, n_workers=2, batch_size=8,
            sync_every=0.5, random_state=0, callbacks=[counter])
        est.fit(X, X[:, 0])
        print(json.dumps({"epochs": counter.epochs,
                          "merges": counter.merges,
                          "n_merges": [r["n_merges"]
                                       for r in est.history_]}))
""")


def test_a_callback_defined_in_a_scripts_main_works_on_local(
        fresh_python, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT, DISLIB_NN_BACKEND="local",
               DISLIB_NN_WORKERS="2")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["epochs"] == [1, 2]
    assert got["merges"] == sum(got["n_merges"]) == 4


# ------------------------------------------------------- early stopping
def _expected_stop(history, monitor, mode, patience, min_delta=0.0):
    """Where a plain reading of ``history_`` stops: (stop, best) epochs."""
    best = best_epoch = None
    bad = 0
    for r in history:
        value = r[monitor]
        better = best is None or (value < best - min_delta if mode == "min"
                                  else value > best + min_delta)
        if better:
            best, best_epoch, bad = value, r["epoch"], 0
        else:
            bad += 1
            if bad >= patience:
                return r["epoch"], best_epoch
    return history[-1]["epoch"], best_epoch


@pytest.mark.parametrize("monitor, mode", [("valid_loss", "min"),
                                           ("valid_score", "max")])
@pytest.mark.parametrize("restore_best", [True, False])
def test_early_stopping_stops_where_history_says(monitor, mode,
                                                 restore_best):
    stop = EarlyStopping(monitor=monitor, mode=mode, patience=3,
                         restore_best=restore_best)
    est, X, y = _regressor(callbacks=[stop])
    est.fit(X, y)
    stop_epoch, best_epoch = _expected_stop(est.history_, monitor, mode, 3)
    assert stop_epoch < 30                  # it did stop early
    assert est.n_epochs_ == stop_epoch
    assert (stop.best_epoch_, stop.bad_epochs_) == (best_epoch, 3)
    keep, _, _ = _regressor(n_epochs=best_epoch if restore_best
                            else stop_epoch)
    keep.fit(X, y)
    _same_weights(est.module_, keep.module_)


def test_early_stopping_parameter_is_the_default_callback():
    by_param, X, y = _regressor(early_stopping=True, patience=3)
    by_param.fit(X, y)
    by_callback, _, _ = _regressor(callbacks=[EarlyStopping(patience=3)])
    by_callback.fit(X, y)
    assert _losses(by_param.history_) == _losses(by_callback.history_)
    _same_weights(by_param.module_, by_callback.module_)


def test_early_stopping_min_delta_counts_small_gains_as_none():
    stop = EarlyStopping(patience=2, min_delta=0.05)
    est, X, y = _regressor(callbacks=[stop])
    est.fit(X, y)
    stop_epoch, best_epoch = _expected_stop(est.history_, "valid_loss",
                                            "min", 2, min_delta=0.05)
    assert (est.n_epochs_, stop.best_epoch_) == (stop_epoch, best_epoch)


@pytest.mark.parametrize("backend_name", ["local", "sequential"])
def test_early_stopping_state_survives_a_resume(tmp_path, backend_name):
    use_backend(backend_name)
    whole, X, y = _regressor(early_stopping=True, patience=3)
    whole.fit(X, y)
    stop_epoch, best_epoch = _expected_stop(whole.history_, "valid_loss",
                                            "min", 3)
    # Checkpointed up to the epoch before the stop: best epoch passed,
    # bad epochs counted; a fresh early stopping would go on longer.
    first = stop_epoch - 1
    assert best_epoch < first
    part, _, _ = _regressor(early_stopping=True, patience=3,
                            n_epochs=first, checkpoint_dir=tmp_path)
    part.fit(X, y)
    resumed, _, _ = _regressor(early_stopping=True, patience=3,
                               checkpoint_dir=tmp_path)
    resumed.fit(X, y, resume=True)
    assert resumed.n_epochs_ == whole.n_epochs_ == stop_epoch
    assert [r["valid_loss"] for r in resumed.history_] == \
        [r["valid_loss"] for r in whole.history_]
    _same_weights(resumed.module_, whole.module_)


# ----------------------------------------------------------- checkpoints
def test_checkpoint_every_keep_last_and_keep_best(tmp_path):
    cb = Checkpoint(tmp_path, every=2, keep_last=2, keep_best="valid_loss")
    est, X, y = _regressor(n_epochs=5, callbacks=[cb])
    est.fit(X, y)
    files = sorted(os.listdir(tmp_path))
    # The lock that keeps one fit per folder, and the checkpoints.
    assert files == [".dislib_nn.lock", "checkpoint-best.pt",
                     "checkpoint-epoch0004.pt", "checkpoint-epoch0005.pt",
                     "checkpoint.pt"]

    def epochs_in(name):
        return torch.load(tmp_path / name, weights_only=True)["n_epochs_"]
    assert epochs_in("checkpoint.pt") == 5          # the fit's last epoch
    written = [2, 4, 5]
    losses = {r["epoch"]: r["valid_loss"] for r in est.history_}
    assert epochs_in("checkpoint-best.pt") == min(written,
                                                  key=losses.get)
    # A Checkpoint callback is where fit(resume=True) resumes from.
    longer, _, _ = _regressor(n_epochs=6, callbacks=[
        Checkpoint(tmp_path, every=2, keep_last=2,
                   keep_best="valid_loss")])
    longer.fit(X, y, resume=True)
    whole, _, _ = _regressor(n_epochs=6)
    whole.fit(X, y)
    assert longer.n_epochs_ == 6
    _same_weights(longer.module_, whole.module_)


# --------------------------------------------------------------- loggers
def _cell(value):
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.loads(json.dumps(value))
    return value


def _parsed(row, record):
    out = {}
    for key, value in record.items():
        cell = row[key]
        if value is None:
            out[key] = None if cell == "" else cell
        elif isinstance(value, bool):
            out[key] = cell == "True"
        elif isinstance(value, (int, float)):
            out[key] = type(value)(cell)
        else:
            out[key] = json.loads(cell)
    return out


def test_csv_logger_rows_equal_history_across_fits(tmp_path):
    path = tmp_path / "history.csv"
    est, X, y = _regressor(n_epochs=2, callbacks=[CSVLogger(path)],
                           warm_start=True)
    est.fit(X, y)
    est.partial_fit(X, y)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(est.history_) == 3
    for row, record in zip(rows, est.history_):
        assert list(row) == list(record)
        assert _parsed(row, record) == {k: _cell(v)
                                        for k, v in record.items()}


def test_progress_bar_shows_epochs_and_merges():
    pytest.importorskip("tqdm", reason="ProgressBar needs tqdm")
    stream = io.StringIO()
    est, X, y = _regressor(n_epochs=3, sync_every=0.5,
                           callbacks=[ProgressBar(stream=stream)])
    est.fit(X, y)
    text = stream.getvalue()
    merges = sum(r["n_merges"] for r in est.history_)
    assert "3/3" in text and f"merges={merges}" in text


def test_progress_bar_without_tqdm_raises_before_any_task(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    est, X, y = _regressor(callbacks=[ProgressBar()])
    with pytest.raises(MissingDependencyError, match="'tqdm' package"):
        est.fit(X, y)
    assert not hasattr(est, "module_")


def test_tensorboard_logger_writes_each_epoch(tmp_path):
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        pytest.skip("TensorBoardLogger needs the 'tensorboard' package, "
                    "which is not installed here")
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    est, X, y = _regressor(n_epochs=2,
                           callbacks=[TensorBoardLogger(tmp_path)])
    est.fit(X, y)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    got = [(e.step, e.value) for e in events.Scalars("train_loss")]
    assert got == [(r["epoch"], pytest.approx(r["train_loss"]))
                   for r in est.history_]


def test_tensorboard_logger_without_tensorboard_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    est, X, y = _regressor(callbacks=[TensorBoardLogger("runs")])
    with pytest.raises(MissingDependencyError, match="'tensorboard'"):
        est.fit(X, y)


# ------------------------------------------------ names and set_params
def test_names_get_params_and_set_params_routing(tmp_path):
    a, b = CSVLogger(tmp_path / "a.csv"), CSVLogger(tmp_path / "b.csv")
    stop = EarlyStopping(patience=3)
    est, X, y = _regressor(n_epochs=2, callbacks=[a, b, ("stop", stop)])
    params = est.get_params()
    assert params["callbacks__CSVLogger_1__path"] == a.path
    assert params["callbacks__CSVLogger_2__path"] == b.path
    assert params["callbacks__stop__patience"] == 3
    assert "callbacks__stop__patience" not in est.get_params(deep=False)
    est.set_params(callbacks__stop__patience=1,
                   callbacks__CSVLogger_2__path=tmp_path / "c.csv")
    twin = clone(est)
    est.fit(X, y)
    assert stop.patience == 1 and est.get_params()[
        "callbacks__stop__patience"] == 1
    assert (tmp_path / "c.csv").exists()
    assert not (tmp_path / "b.csv").exists()
    assert twin.get_params()["callbacks__stop__patience"] == 1


@pytest.mark.parametrize("key, match", [
    ("callbacks__stpo__patience",
     r"no callback is named 'stpo'.*Did you mean "
     r"'callbacks__stop__patience'\?"),
    ("callbacks__stop__patiense",
     r"takes no argument 'patiense'.*Did you mean "
     r"'callbacks__stop__patience'\?"),
    ("callbacks__early_stopping__patience",
     r"'early_stopping' is a default callback, set by early_stopping and "
     r"patience"),
    ("callbacks__stop", r"write callbacks__<name>__<argument>=value"),
    ("callback__stop__patience", r"Did you mean 'callbacks__stop__"),
])
def test_bad_routed_parameters_are_refused(key, match):
    # A callbacks__ key is checked against the callbacks by fit; a key of
    # no prefix at all is refused by set_params at once.
    est, X, y = _regressor(callbacks=[("stop", EarlyStopping())])
    with pytest.raises(InvalidParameterError, match=match):
        est.set_params(**{key: 2})
        est.fit(X, y)
    assert not hasattr(est, "module_")


class NoStore(Callback):
    def __init__(self, path):
        self._path = path


@pytest.mark.parametrize("callbacks, error, match", [
    ("early", InvalidParameterError,
     r"The 'callbacks' parameter of SyncEpochAveragingRegressor must be "
     r"None or a list.*Got 'early' instead"),
    ([EarlyStopping], InvalidParameterError,
     r"callbacks\[0\].*Got the class EarlyStopping: pass "
     r"EarlyStopping\(\.\.\.\) instead"),
    ([object()], InvalidParameterError,
     r"callbacks\[0\].*subclass of dislib_nn.callbacks.Callback. Got "
     r"<object"),
    ([EarlyStopping(), ("a", 3)], InvalidParameterError,
     r"callbacks\[1\].*Got 3 instead"),
    ([("a", 1, 2)], InvalidParameterError,
     r"callbacks\[0\].*\(name, Callback\) pair.*Got \('a', 1, 2\)"),
    ([("a__b", EarlyStopping())], InvalidParameterError,
     r"has the name 'a__b'"),
    ([("x", EarlyStopping()), ("x", CSVLogger("h.csv"))],
     InvalidParameterError, r"names two callbacks 'x'"),
    ([("history", CSVLogger("h.csv"))], InvalidParameterError,
     r"'history', the name of a default callback"),
    ([EarlyStopping(mode="up")], InvalidParameterError,
     r"The 'mode' argument of EarlyStopping must be 'min' or 'max'. Got "
     r"'up' instead"),
    ([EarlyStopping(patience=0)], InvalidParameterError,
     r"'patience' argument of EarlyStopping must be an int in the range "
     r"\[1, inf\). Got 0"),
    ([Checkpoint("d", every=0)], InvalidParameterError,
     r"'every' argument of Checkpoint must be an int.*Got 0"),
    ([NoStore("p")], TypeError,
     r"NoStore.__init__ takes 'path', but the instance has no attribute "
     r"'path'"),
])
def test_bad_callbacks_are_refused_before_any_task(callbacks, error, match):
    est, X, y = _regressor(callbacks=callbacks)
    with pytest.raises(error, match=match):
        est.fit(X, y)
    assert not hasattr(est, "module_")


def test_early_stopping_on_a_key_the_records_lack():
    est, X, y = _regressor(callbacks=[EarlyStopping(monitor="valid_acc")])
    with pytest.raises(ValueError, match=r"monitors 'valid_acc', which the "
                                         r"records of this fit do not have"):
        est.fit(X, y)


def test_classifier_takes_callbacks_too():
    X, y, _, _ = _data()
    rec = Recorder()
    SyncEpochAveragingClassifier(
        module=_models.Classifier, n_epochs=2, n_workers=2, batch_size=8,
        random_state=0, callbacks=[rec]).fit(X, (y > 0).astype(np.int64))
    assert [c[1] for c in rec.calls if c[0] == "epoch_end"] == [1, 2]


def test_an_estimator_with_callbacks_pickles_after_its_fit(tmp_path):
    est, X, y = _regressor(n_epochs=3, callbacks=[
        EarlyStopping(patience=2), CSVLogger(tmp_path / "h.csv"),
        Checkpoint(tmp_path / "ckpt"), Recorder()])
    est.fit(X, y)
    twin = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(twin.predict(X), est.predict(X))
    assert twin.callbacks[0].best_epoch_ == est.callbacks[0].best_epoch_


def test_set_params_reaches_a_schedulers_keyword_arguments():
    from dislib_nn.callbacks import LRScheduler
    est, X, y = _regressor(n_epochs=3, validation_data=None, callbacks=[
        LRScheduler(torch.optim.lr_scheduler.StepLR, step_size=1,
                    gamma=0.5)])
    assert est.get_params()["callbacks__LRScheduler__gamma"] == 0.5
    twin = clone(est).set_params(callbacks__LRScheduler__gamma=0.1)
    twin.fit(X, y)
    assert [r["lr"] for r in twin.history_] == pytest.approx(
        [0.1, 0.01, 0.001])
