"""A file that is loaded runs no code.

Doctored files, each of which would touch a marker file if anything in
it ran, are refused by ``load`` and by ``fit(resume=True)`` with an
error naming what the file wanted to run; the marker never appears.
``trusted=True`` is what runs a class saved by value.
"""

import collections
import datetime
import pathlib
import pickle

import numpy as np
import pytest
import torch

from dislib_nn import SyncEpochAveragingClassifier, callbacks
from dislib_nn.exceptions import UnsafeFileError
from tests.training._models import Classifier


pytestmark = pytest.mark.usefixtures("sequential")


def _data():
    rng = np.random.RandomState(0)
    X = rng.randn(40, 4).astype("float32")
    return X, np.where(X[:, 0] > 0, "yes", "no")


def _fit(**params):
    return SyncEpochAveragingClassifier(
        module=Classifier, module__hidden=6, n_epochs=2, n_workers=2,
        random_state=np.random.RandomState(3), **params).fit(*_data())


class Touch:
    """Unpickled, it creates the file at ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.path),)


def _doctored(tmp_path, change):
    """A file save() wrote, then changed by ``change(content)``."""
    path = tmp_path / "model.pt"
    _fit().save(path)
    content = torch.load(path, weights_only=True)
    change(content)
    torch.save(content, path)
    return path


def test_a_saved_model_loads_and_predicts_with_no_parameters(tmp_path):
    est = _fit(callbacks=[callbacks.EarlyStopping(patience=2)],
               lr_schedule=torch.optim.lr_scheduler.StepLR,
               lr_schedule__step_size=1,
               outer_optimizer=torch.optim.SGD, outer_optimizer__lr=0.7)
    est.save(tmp_path / "model.pt")
    loaded = SyncEpochAveragingClassifier().load(tmp_path / "model.pt")
    X, _ = _data()
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
    assert list(loaded.classes_) == ["no", "yes"]
    assert loaded.get_params()["lr_schedule"] is \
        torch.optim.lr_scheduler.StepLR
    assert isinstance(loaded.random_state, np.random.RandomState)
    assert loaded.history_ == est.history_
    # It trains on from what it carried.
    loaded.partial_fit(*_data())
    assert loaded.n_epochs_ == 3


def test_a_class_saved_by_value_loads_only_when_trusted(tmp_path):
    class Local(torch.nn.Module):       # not importable: saved by value
        def __init__(self, n_features_in=4, n_classes=2):
            super().__init__()
            self.fc = torch.nn.Linear(n_features_in, n_classes)

        def forward(self, x):
            return self.fc(x)

    est = SyncEpochAveragingClassifier(module=Local, n_epochs=1,
                                       n_workers=2).fit(*_data())
    est.save(tmp_path / "model.pt")
    with pytest.raises(UnsafeFileError, match=(
            r"wants to run code stored by value \(.*Local\)\. A loaded "
            r"file runs no code unless you say so: if you trust the file, "
            r"load it with trusted=True")):
        SyncEpochAveragingClassifier().load(tmp_path / "model.pt")
    loaded = SyncEpochAveragingClassifier().load(tmp_path / "model.pt",
                                                trusted=True)
    X, _ = _data()
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
    with pytest.raises(TypeError, match=r"load\(\)'s trusted must be True "
                                        r"or False. Got 'False' instead."):
        SyncEpochAveragingClassifier().load(tmp_path / "model.pt",
                                            trusted="False")
    # Given the class, the parameters are not read: no trust needed.
    mine = SyncEpochAveragingClassifier(module=Local).load(
        tmp_path / "model.pt")
    np.testing.assert_array_equal(mine.predict(X), est.predict(X))


def _everywhere(tmp_path, name, marker):
    """A doctored entry in the parameters, then in the attributes."""
    def in_params(content):
        content["params"]["module"] = DOCTORED[name](marker)

    def in_fitted(content):
        content["fitted"]["history_"] = [DOCTORED[name](marker)]
    return [_doctored(tmp_path, in_params), _doctored(tmp_path, in_fitted)]


TAG = "__dislib_nn__"
DOCTORED = {
    # A pickle that runs code when unpickled, inside the file itself.
    "reduce": lambda marker: Touch(marker),
    # Code by value in the file's blob, which the entry points to.
    "by_value": lambda marker: {TAG: "code", "index": 0, "what": "x"},
    # A name that resolves to something that runs a command when built.
    "subprocess": lambda marker: {TAG: "ref", "name": "subprocess:Popen"},
    "os_system": lambda marker: {TAG: "ref", "name": "os:system"},
    # A module that importing would run.
    "not_imported": lambda marker: {TAG: "ref",
                                    "name": "antigravity:geohash"},
    # An instance of a class that is not a model or a callback.
    "object": lambda marker: {TAG: "object", "class": "subprocess:Popen",
                              "state": {"args": ["touch", str(marker)]}},
}
REFUSED = {
    "reduce": r"holds objects that only unpickling can rebuild",
    "by_value": r"wants to run code stored by value \(x\)",
    "subprocess": r"wants to run subprocess.Popen, which is not an "
                  r"nn.Module, optimizer, scheduler, Callback or Strategy class",
    "os_system": r"wants to run os.system, which is not",
    "not_imported": r"wants to run antigravity.geohash, whose module "
                    r"'antigravity' is not imported here \(importing it "
                    r"would run its code\)\. A loaded file runs no code "
                    r"unless you say so: import antigravity before "
                    r"loading, or, if you trust the file",
    "object": r"wants to run subprocess.Popen",
}


@pytest.mark.parametrize("name", list(DOCTORED))
def test_a_doctored_file_is_refused_and_nothing_runs(tmp_path, name):
    marker = tmp_path / "ran"

    def blob(content):
        content["code"] = pickle.dumps([Touch(marker)])
    for path in _everywhere(tmp_path, name, marker):
        if name == "by_value":
            content = torch.load(path, weights_only=False)
            blob(content)
            torch.save(content, path)
        est = SyncEpochAveragingClassifier()
        with pytest.raises(UnsafeFileError, match=REFUSED[name]):
            est.load(path)
        assert not marker.exists()
        assert not hasattr(est, "module_") and est.module is None


def test_a_file_of_the_pickled_format_loads_only_when_trusted(tmp_path):
    marker = tmp_path / "ran"

    def older(content):
        content["version"] = 2
        content["params"] = {"pickle": pickle.dumps(Touch(marker)),
                             "references": {}}
    path = _doctored(tmp_path, older)
    with pytest.raises(UnsafeFileError, match=(
            r"written by an earlier dislib_nn \(format version 2\), whose "
            r"parameters are pickles")):
        SyncEpochAveragingClassifier().load(path)
    assert not marker.exists()


def test_a_doctored_checkpoint_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    _fit(checkpoint_dir=tmp_path)
    path = tmp_path / "checkpoint.pt"
    content = torch.load(path, weights_only=True)
    content["history_"].append(Touch(marker))
    torch.save(content, path)
    est = SyncEpochAveragingClassifier(
        module=Classifier, module__hidden=6, n_epochs=3, n_workers=2,
        random_state=np.random.RandomState(3), checkpoint_dir=tmp_path)
    with pytest.raises(UnsafeFileError, match=(
            rf"{path} holds objects that only unpickling can rebuild: not "
            rf"a checkpoint dislib_nn wrote, or one changed since")):
        est.fit(*_data(), resume=True)
    assert not marker.exists()


class Timer(callbacks.Callback):
    """A callback whose state holds what a checkpoint cannot."""

    def __init__(self, value):
        self.value = value

    def state_dict(self):
        return {"started": self.value}


@pytest.mark.parametrize("value, shown", [
    (datetime.datetime(2026, 1, 2), r"datetime.datetime "
                                    r"datetime.datetime\(2026, 1, 2, 0, 0\)"),
    (np.float64(0.5), r"numpy.float64 np.float64\(0.5\)"),
])
def test_callback_state_a_checkpoint_cannot_hold_is_named_when_written(
        tmp_path, value, shown):
    with pytest.raises(TypeError, match=(
            rf"Callback 'timer''s state_dict\(\) holds {shown} at "
            rf"\['started'\]: a checkpoint holds only tensors, numbers")):
        _fit(checkpoint_dir=tmp_path,
             callbacks=[("timer", Timer(value))])


def test_data_round_trips_through_the_file_format():
    from dislib_nn.training import _plain
    value = {"a": np.arange(6, dtype=">i4").reshape(2, 3),
             "b": np.array(["x", "yy"]), "c": np.array([1, "a"], object),
             "d": (1, 2.5, None), "e": {3, 4}, "f": np.float32(1.5),
             "g": collections.OrderedDict(z=1), 5: [torch.ones(2)],
             "h": np.random.RandomState(1), TAG: "kept"}
    encoder = _plain.Encoder()
    data = encoder.encode(value)
    _plain.check_plain(data, "the encoded value")
    assert encoder.code() is None
    back = _plain.Decoder(None, False, "test").decode(data)
    assert back.keys() == value.keys()
    np.testing.assert_array_equal(back["a"], value["a"])
    assert back["a"].dtype == value["a"].dtype
    assert back["b"].dtype == value["b"].dtype and list(back["b"]) == [
        "x", "yy"]
    assert list(back["c"]) == [1, "a"] and back["c"].dtype == object
    assert back["d"] == (1, 2.5, None) and back["e"] == {3, 4}
    assert type(back["f"]) is np.float32 and back["f"] == 1.5
    assert type(back["g"]) is collections.OrderedDict
    assert torch.equal(back[5][0], torch.ones(2))
    assert back["h"].randint(1000) == np.random.RandomState(1).randint(1000)
    assert back[TAG] == "kept"
