"""X as several inputs: a dict (keyword arguments) or a tuple
(positional ones) of arrays or DsTensors with equal rows.

Fits are compared with plain PyTorch trained the same way on the same
tensors (float32 features, int64 ids): the same weights to float32
rounding, on every backend; shuffles must keep a sample's inputs
together, which a fit of the same rows as one array shows.
"""

import copy
import os

import numpy as np
import pytest
import torch

from dislib_nn import SyncEpochAveragingClassifier, data
from dislib_nn.exceptions import ShapeError
from tests.training import _models, _reference as ref

ATOL = 2e-5


def _data(n=96, seed=0):
    rng = np.random.default_rng(seed)
    x_num = rng.normal(size=(n, 4))
    x_cat = rng.integers(0, 10, size=n)
    y = ((x_cat > 4) ^ (x_num[:, 0] > 1)).astype(np.int64)
    return x_num, x_cat, y


def _init():
    torch.manual_seed(0)
    return _models.NumAndIds()


def _est(init, **kwargs):
    params = dict(module=init, n_workers=2, shuffle="none", n_epochs=3,
                  batch_size=8, lr=0.1)
    params.update(kwargs)
    return SyncEpochAveragingClassifier(**params)


def _as_one_array(x_num, x_cat):
    return np.hstack([x_num, x_cat[:, None]]).astype(np.float64)


def _expected(init, x_num, x_cat, y):
    """Plain PyTorch: the two inputs as the module receives them."""
    x = torch.from_numpy(_as_one_array(x_num.astype(np.float32), x_cat))
    parts = ref.split_like_blocks(x, torch.from_numpy(y), 2)
    model = ref.epoch_averaging(_models.Columns(copy.deepcopy(init)), parts,
                                torch.nn.CrossEntropyLoss(), epochs=3,
                                batch_size=8, lr=0.1)
    return model.inner


def _labels(model, x_num, x_cat):
    with torch.no_grad():
        out = model.eval()(torch.from_numpy(x_num.astype(np.float32)),
                           torch.from_numpy(x_cat))
    return out.argmax(1).numpy()


def test_a_dict_of_inputs_trains_like_plain_pytorch(backend):
    x_num, x_cat, y = _data()
    init = _init()
    X = {"x_num": x_num, "x_cat": x_cat}
    est = _est(init).fit(X, y)
    expected = _expected(init, x_num, x_cat, y)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    labels = _labels(expected, x_num, x_cat)
    np.testing.assert_array_equal(est.predict(X), labels)
    # As DsTensors (one of them, or both), by tasks: the same labels.
    for X_ds in ({"x_num": data.from_array(x_num, n_blocks=3),
                  "x_cat": x_cat},
                 {"x_num": data.from_array(x_num, n_blocks=3),
                  "x_cat": data.from_array(x_cat, n_blocks=3)}):
        np.testing.assert_array_equal(
            est.predict(X_ds).collect().numpy(), labels)
        assert est.score(X_ds, data.from_array(y, n_blocks=3)) == \
            pytest.approx(float(np.mean(labels == y)))
    assert est.score(X, y) == pytest.approx(float(np.mean(labels == y)))


def test_a_tuple_of_inputs_goes_by_position(sequential):
    x_num, x_cat, y = _data()
    init = _init()
    est = _est(init).fit((x_num, x_cat), y)
    expected = _expected(init, x_num, x_cat, y)
    ref.assert_same_model(est.module_, expected, atol=ATOL, rtol=1e-4)
    np.testing.assert_array_equal(est.predict((x_num, x_cat)),
                                  _labels(expected, x_num, x_cat))


def test_inputs_of_ds_tensors_train_as_the_arrays_do(local):
    x_num, x_cat, y = _data()
    init = _init()
    arrays = _est(init).fit({"x_num": x_num, "x_cat": x_cat}, y)
    tensors = _est(init).fit(
        {"x_num": data.from_array(x_num, n_blocks=2),
         "x_cat": data.from_array(x_cat, n_blocks=2)},
        data.from_array(y, n_blocks=2))
    for key, value in arrays.module_.state_dict().items():
        torch.testing.assert_close(tensors.module_.state_dict()[key], value,
                                   atol=0, rtol=0)


@pytest.mark.parametrize("shuffle", ["global", "local"])
def test_shuffles_keep_a_samples_inputs_together(backend, shuffle):
    # The same rows as one array (ids as a float column, exact below
    # 2**24) and a module that splits the columns: the same model.
    x_num, x_cat, y = _data()
    init = _init()
    several = _est(init, shuffle=shuffle, random_state=3,
                   validation_fraction=0.2).fit(
        {"x_num": x_num.astype(np.float32), "x_cat": x_cat}, y)
    one = _est(_models.Columns(copy.deepcopy(init)), shuffle=shuffle,
               random_state=3, validation_fraction=0.2).fit(
        _as_one_array(x_num.astype(np.float32), x_cat).astype(np.float32),
        y)
    ref.assert_same_model(several.module_, one.module_.inner, atol=1e-6,
                          rtol=1e-5)
    assert [h["valid_score"] for h in several.history_] == \
        [h["valid_score"] for h in one.history_]


def test_validation_data_warm_start_and_partial_fit(sequential):
    x_num, x_cat, y = _data()
    init = _init()
    X = {"x_num": x_num, "x_cat": x_cat}
    est = _est(init, n_epochs=1, validation_data=(X, y)).fit(X, y)
    est.partial_fit(X, y)
    est.set_params(warm_start=True).fit(X, y)
    assert len(est.history_) == 3
    labels = est.predict(X)
    assert est.history_[-1]["valid_score"] == pytest.approx(
        float(np.mean(labels == y)))


def test_save_and_load_keep_the_inputs(sequential, tmp_path):
    x_num, x_cat, y = _data()
    X = {"x_num": x_num, "x_cat": x_cat}
    est = _est(_init()).fit(X, y)
    path = os.path.join(tmp_path, "model.pt")
    est.save(path)
    loaded = SyncEpochAveragingClassifier().load(path)
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
    with pytest.raises(ValueError, match=r"fitted on several inputs"):
        loaded.predict(x_num)


def _bad_fits():
    x_num, x_cat, _ = _data()
    return [
        ({"x_num": x_num, "x_cat": x_cat[:50]}, ShapeError,
         r"The inputs of X must have the same number of rows \(one per "
         r"sample\): X\['x_num'\] has 96, X\['x_cat'\] has 50"),
        ({}, ShapeError, r"X is an empty dict"),
        ({"x_num": x_num, 3: x_cat}, TypeError,
         r"keys of X name the forward's keyword arguments, so they must "
         r"be strings. Got 3 \(int\)"),
        ({"x_num": x_num, "x_cat": np.array(["a"] * 96)}, ValueError,
         r"X\['x_cat'\]"),
        ({"x_num": np.full((96, 4), np.nan), "x_cat": x_cat}, ValueError,
         r"Input X\['x_num'\] contains NaN"),
        ({"x_num": data.from_array(x_num, n_blocks=2),
          "x_cat": data.from_array(x_cat, n_blocks=3)}, ShapeError,
         r"must be split into the same blocks: X\['x_num'\] has block "
         r"sizes \(48, 48\) but X\['x_cat'\] has \(32, 32, 32\)"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_bad_inputs_are_named_before_any_task(sequential, case):
    X, error, message = _bad_fits()[case]
    _, _, y = _data()
    est = _est(_init())
    with pytest.raises(error, match=message):
        est.fit(X, y)
    assert not hasattr(est, "module_")


def test_later_inputs_must_be_those_of_fit(sequential):
    x_num, x_cat, y = _data()
    est = _est(_init(), n_epochs=1).fit({"x_num": x_num, "x_cat": x_cat}, y)
    name = "SyncEpochAveragingClassifier"
    with pytest.raises(ValueError, match=(
            rf"X is one array, but {name} was fitted on several inputs, a "
            rf"dict with keys \['x_num', 'x_cat'\]: pass X as a dict")):
        est.predict(x_num)
    with pytest.raises(ValueError, match=(
            r"X holds the inputs a dict with keys \['x_cat', 'x_num'\], "
            rf"but {name} was fitted on a dict with keys \['x_num', "
            r"'x_cat'\]")):
        est.predict({"x_cat": x_cat, "x_num": x_num})
    with pytest.raises(ShapeError, match=(
            r"X\['x_num'\] has samples of shape \(3,\), but")):
        est.predict({"x_num": x_num[:, :3], "x_cat": x_cat})
    with pytest.raises(ValueError, match=(
            r"X\['x_cat'\] has floating-point values \(dtype float64\), "
            r"but .* fitted on integer inputs")):
        est.predict({"x_num": x_num, "x_cat": x_cat.astype(float)})
    with pytest.raises(ValueError, match=r"was fitted on one array X"):
        _est(_models.MLP(n_outputs=2), n_epochs=1).fit(
            x_num, y).predict({"x_num": x_num})
    with pytest.raises(ValueError, match=r"fitted on several inputs"):
        est.partial_fit(x_num, y)


def test_a_forward_that_does_not_take_the_inputs_says_what_it_got(
        sequential):
    x_num, x_cat, y = _data()
    est = _est(_init())
    with pytest.raises(TypeError) as info:
        est.fit({"numbers": x_num, "x_cat": x_cat}, y)
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "of the inputs {'numbers': (4,) float32, 'x_cat': () int64}" \
        in notes


@pytest.mark.parametrize("n", [1, 5])
def test_packed_rows_give_back_each_input_exactly(n):
    # Inputs whose bytes start unaligned (3 bools, then 3 float32, then
    # int64): each comes back bit for bit, for one row and for several.
    from dislib_nn.training.tasks._packed import PackedLayout
    rng = np.random.default_rng(0)
    parts = [rng.random((n, 3)) > 0.5,
             rng.normal(size=(n, 3)).astype(np.float32),
             rng.integers(-2 ** 62, 2 ** 62, size=(n, 2))]
    layout = PackedLayout(["flags", "values", "ids"], True,
                          [(3,), (3,), (2,)],
                          [torch.bool, torch.float32, torch.int64])
    rows = layout.pack(parts)
    assert rows.shape == (n, 3 + 12 + 16) and rows.dtype == torch.uint8
    back = layout.unpack(rows)
    for key, part in zip(["flags", "values", "ids"], parts):
        np.testing.assert_array_equal(back[key].numpy(), part)
    assert [back[k].dtype for k in back] == [torch.bool, torch.float32,
                                             torch.int64]
