"""A saved or pickled estimator needs no importable module class.

A script defines its module class in ``__main__``, fits, saves and
pickles; another script, which does not define the class, loads both
and predicts what the first printed. A class from a module the loading
side cannot import gets an error naming the class and the module. Weights
tagged for a GPU load on the CPU.
"""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from dislib_nn import SyncEpochAveragingClassifier
from tests.conftest import use_backend
from tests.training._models import Classifier
from tests.training._paths import ROOT


_PREAMBLE = """
import json
import pickle
import sys

import joblib
import numpy as np
import torch

from dislib_nn import SyncEpochAveragingClassifier, runtime

runtime.set_backend("sequential")
folder = sys.argv[1]
"""

# The saving script: its module class lives in __main__.
_SAVE = _PREAMBLE + """

class CNN(torch.nn.Module):
    def __init__(self, n_classes=2, channels=3):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, channels, 3, padding=1)
        self.out = torch.nn.Linear(channels * 16, n_classes)

    def forward(self, x):
        return self.out(torch.relu(self.conv(x)).flatten(1))


rng = np.random.RandomState(0)
X = rng.randn(40, 1, 4, 4).astype("float32")
y = (X[:, 0, 0, 0] > 0).astype(np.int64)
clf = SyncEpochAveragingClassifier(
    module=CNN, module__channels=3, n_epochs=2, batch_size=8, n_workers=2,
    random_state=0).fit(X, y)
clf.save(folder + "/clf.pt")
with open(folder + "/clf.pkl", "wb") as f:
    pickle.dump(clf, f)
joblib.dump(clf, folder + "/clf.joblib")
np.save(folder + "/X.npy", X)
np.save(folder + "/y.npy", y)
print(json.dumps(clf.predict_proba(X).tolist()))
"""

# The loading script: no CNN anywhere.
_LOAD = _PREAMBLE + """
X = np.load(folder + "/X.npy")
y = np.load(folder + "/y.npy")
with open(folder + "/clf.pkl", "rb") as f:
    copies = {"pickle": pickle.load(f)}
copies["joblib"] = joblib.load(folder + "/clf.joblib")
# The class is in the file by value: it runs only when trusted.
try:
    SyncEpochAveragingClassifier().load(folder + "/clf.pt")
except ValueError as exc:
    refused = str(exc)
copies["save"] = SyncEpochAveragingClassifier().load(folder + "/clf.pt",
                                                     trusted=True)
out = {name: est.predict_proba(X).tolist() for name, est in copies.items()}
# Each copy trains on: its class reaches the training tasks by value.
for name, est in copies.items():
    before = est.module_.conv.weight.detach().clone()
    est.partial_fit(X, y)
    out[name + "_trained_on"] = bool(
        not torch.equal(before, est.module_.conv.weight))
out["refused"] = refused
print(json.dumps(out))
"""

# A module class from a module that only the saving side can import.
_MODELS = """
import torch


class Net(torch.nn.Module):
    def __init__(self, n_features_in=4, n_classes=2):
        super().__init__()
        self.out = torch.nn.Linear(n_features_in, n_classes)

    def forward(self, x):
        return self.out(x)
"""

_SAVE_IMPORTED = _PREAMBLE + """
sys.path.insert(0, folder + "/models")
from mymodels import Net

rng = np.random.RandomState(0)
X = rng.randn(20, 4).astype("float32")
y = (X[:, 0] > 0).astype(np.int64)
clf = SyncEpochAveragingClassifier(module=Net, n_epochs=1, n_workers=2,
                                   random_state=0).fit(X, y)
clf.save(folder + "/clf.pt")
with open(folder + "/clf.pkl", "wb") as f:
    pickle.dump(clf, f)
print(json.dumps("saved"))
"""

_LOAD_IMPORTED = _PREAMBLE + """
errors = {}
try:
    SyncEpochAveragingClassifier().load(folder + "/clf.pt")
except ValueError as exc:       # importing 'mymodels' would run it
    errors["untrusted"] = str(exc)
try:
    SyncEpochAveragingClassifier().load(folder + "/clf.pt", trusted=True)
except ImportError as exc:
    errors["save"] = str(exc)
try:
    with open(folder + "/clf.pkl", "rb") as f:
        pickle.load(f)
except ImportError as exc:
    errors["pickle"] = str(exc)
print(json.dumps(errors))
"""


def _run(tmp_path, name, code):
    script = tmp_path / name
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("DISLIB_NN_BACKEND", None)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)],
                          capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_main_module_class_loads_where_it_is_not_defined(
        fresh_python, tmp_path):
    expected = _run(tmp_path, "save_cnn.py", _SAVE)
    got = _run(tmp_path, "load_cnn.py", _LOAD)
    for name in ("pickle", "joblib", "save"):
        np.testing.assert_allclose(got[name], expected, rtol=1e-6)
        assert got[name + "_trained_on"]
    assert "wants to run code stored by value (__main__.CNN)" in \
        got["refused"]


def test_a_class_whose_module_is_missing_is_named(fresh_python, tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mymodels.py").write_text(_MODELS)
    _run(tmp_path, "save_net.py", _SAVE_IMPORTED)
    errors = _run(tmp_path, "load_net.py", _LOAD_IMPORTED)
    assert set(errors) == {"untrusted", "save", "pickle"}
    assert "wants to run mymodels.Net, whose module 'mymodels' is not " \
        "imported here" in errors.pop("untrusted")
    for message in errors.values():
        assert "mymodels.Net (module 'mymodels')" in message
        assert "cannot be imported in this process" in message
        assert "Make 'mymodels' importable where you load" in message
        assert "is not a file written by" not in message


# --------------------------------------------------------------- GPUs
_TAG_AS_CUDA = set()


def _cuda_tagger(storage):
    # Tags the storages of the tensors in _TAG_AS_CUDA as a GPU's, as
    # torch.save does for tensors on a GPU.
    if storage.data_ptr() in _TAG_AS_CUDA:
        return "cuda:0"
    return None


def _no_deserializer(storage, location):
    return None


torch.serialization.register_package(0, _cuda_tagger, _no_deserializer)


@pytest.fixture
def sequential():
    use_backend("sequential")
    yield
    use_backend("local")


def _fitted():
    rng = np.random.RandomState(0)
    X = rng.randn(30, 4).astype("float32")
    y = (X[:, 0] > 0).astype(np.int64)
    return SyncEpochAveragingClassifier(
        module=Classifier, module__hidden=6, n_epochs=1, n_workers=2,
        random_state=0).fit(X, y), X


def test_weights_tagged_for_a_gpu_load_on_the_cpu(sequential, tmp_path):
    est, X = _fitted()
    est.save(tmp_path / "model.pt")
    # The same file, its weights tagged as a GPU's (as a file written on
    # a GPU machine by another tool would be).
    content = torch.load(tmp_path / "model.pt", weights_only=False)
    _TAG_AS_CUDA.update(v.untyped_storage().data_ptr()
                        for v in content["weights"].values())
    try:
        torch.save(content, tmp_path / "cuda.pt")
    finally:
        _TAG_AS_CUDA.clear()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(tmp_path / "cuda.pt", weights_only=False)
    loaded = SyncEpochAveragingClassifier().load(tmp_path / "cuda.pt")
    assert all(v.device.type == "cpu"
               for v in loaded.module_.state_dict().values())
    np.testing.assert_allclose(loaded.predict_proba(X), est.predict_proba(X),
                               rtol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_an_estimator_on_a_gpu_saves_and_pickles_cpu_tensors(
        sequential, tmp_path):
    est, X = _fitted()
    expected = est.predict_proba(X)
    est.module_.cuda()
    est.save(tmp_path / "model.pt")
    with open(tmp_path / "est.pkl", "wb") as f:
        pickle.dump(est, f)
    np.save(tmp_path / "X.npy", X)
    code = """
        import pickle, sys
        import numpy as np
        from dislib_nn import SyncEpochAveragingClassifier
        folder = sys.argv[1]
        X = np.load(folder + "/X.npy")
        with open(folder + "/est.pkl", "rb") as f:
            est = pickle.load(f)
        loaded = SyncEpochAveragingClassifier().load(folder + "/model.pt")
        for copy in (est, loaded):
            assert all(v.device.type == "cpu"
                       for v in copy.module_.state_dict().values())
        print(__import__("json").dumps([est.module_.state_dict()[
            "out.weight"].tolist(), loaded.predict_proba(X).tolist()]))
    """
    script = tmp_path / "cpu_only.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, str(script), str(tmp_path)],
                          capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    weights, proba = json.loads(done.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(
        weights, est.module_.state_dict()["out.weight"].cpu().numpy(),
        rtol=1e-6)
    np.testing.assert_allclose(proba, expected, rtol=1e-6)


# Files of format 1 (before classes went by value): parameters and
# attributes pickled by reference inside the file.
_SAVE_FORMAT_1 = _SAVE.replace('clf.save(folder + "/clf.pt")', '''
state = clf.module_.state_dict()
torch.save({
    "format": "dislib_nn.estimator", "version": 1,
    "estimator": "dislib_nn.training._estimators."
                 "SyncEpochAveragingClassifier",
    "params": clf.get_params(deep=False),
    "fitted": {k: getattr(clf, k) for k in (
        "classes_", "history_", "n_epochs_", "n_workers_", "_inferred",
        "_sample_shape", "_seed", "_output")},
    "weights": {k: v.clone() for k, v in state.items()}},
    folder + "/clf.pt")''')

_LOAD_FORMAT_1 = _PREAMBLE + """
try:
    SyncEpochAveragingClassifier().load(folder + "/clf.pt", trusted=True)
except ImportError as exc:
    print(json.dumps(str(exc)))
"""

_LOAD_FORMAT_1_DEFINED = _PREAMBLE + """


class CNN(torch.nn.Module):
    def __init__(self, n_classes=2, channels=3):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, channels, 3, padding=1)
        self.out = torch.nn.Linear(channels * 16, n_classes)

    def forward(self, x):
        return self.out(torch.relu(self.conv(x)).flatten(1))


X = np.load(folder + "/X.npy")
y = np.load(folder + "/y.npy")
est = SyncEpochAveragingClassifier().load(folder + "/clf.pt", trusted=True)
out = est.predict_proba(X).tolist()
est.partial_fit(X, y)
print(json.dumps(out))
"""


def test_a_file_of_format_1_loads_or_names_the_missing_class(
        fresh_python, tmp_path):
    expected = _run(tmp_path, "save_v1.py", _SAVE_FORMAT_1)
    message = _run(tmp_path, "load_v1.py", _LOAD_FORMAT_1)
    assert "refers to 'CNN' of module '__main__'" in message
    assert "define (or import) 'CNN' in __main__" in message
    got = _run(tmp_path, "load_v1_defined.py", _LOAD_FORMAT_1_DEFINED)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
