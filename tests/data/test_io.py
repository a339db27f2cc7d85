"""load_npy and load_npy_files: equal to numpy.load, and their errors."""

import os

import numpy as np
import pytest
import torch

import dislib_nn as dnn
from dislib_nn.exceptions import (DataFileError, DtypeError,
                                  InvalidParameterError, ShapeError)


def _save(tmp_path, name, array):
    path = tmp_path / name
    np.save(path, array)
    return path


@pytest.mark.parametrize("array", [
    np.arange(101, dtype=np.float32),
    np.random.default_rng(0).random((101, 3, 2)),
    np.arange(101 * 4, dtype=np.int16).reshape(101, 4),
    np.asfortranarray(np.arange(101 * 5, dtype=np.int64).reshape(101, 5)),
    np.arange(101) % 2 == 0,
])
@pytest.mark.parametrize("kwargs, sizes", [
    ({"block_size": 40}, (40, 40, 21)), ({"n_blocks": 3}, (34, 34, 33)),
    ({"block_size": 101}, (101,)),
])
def test_load_npy_equals_np_load(backend, tmp_path, array, kwargs, sizes):
    path = _save(tmp_path, "x.npy", array)
    x = dnn.load_npy(path, **kwargs)
    assert x.block_sizes == sizes
    assert x.shape == array.shape
    assert torch.equal(x.collect(), torch.from_numpy(np.load(path)))


def test_load_npy_accepts_str_paths_and_relative_paths(backend, tmp_path,
                                                       monkeypatch):
    path = _save(tmp_path, "x.npy", np.arange(10.))
    assert dnn.load_npy(str(path), block_size=3).shape == (10,)
    monkeypatch.chdir(tmp_path)
    x = dnn.load_npy("x.npy", block_size=3)
    monkeypatch.chdir(os.path.dirname(__file__))   # workers use the path
    assert torch.equal(x.collect(), torch.arange(10.).double())


def test_load_npy_files_one_block_per_file(backend, tmp_path):
    parts = [np.full((n, 2, 2), i, dtype=np.float32)
             for i, n in enumerate([3, 5, 1])]
    paths = [_save(tmp_path, f"part{i}.npy", p) for i, p in enumerate(parts)]
    x = dnn.load_npy_files(paths)
    assert x.block_sizes == (3, 5, 1) and x.sample_shape == (2, 2)
    assert torch.equal(x.collect(), torch.from_numpy(np.concatenate(parts)))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"load_npy: 'path' = "
                       r"'.*nothere.npy' does not exist"):
        dnn.load_npy(tmp_path / "nothere.npy")
    good = _save(tmp_path, "a.npy", np.zeros(3))
    with pytest.raises(FileNotFoundError, match=r"'paths\[1\]' = "
                       r"'.*gone.npy' does not exist"):
        dnn.load_npy_files([good, tmp_path / "gone.npy"])


def test_not_a_npy_file(tmp_path):
    csv = tmp_path / "x.csv"
    csv.write_text("1,2\n3,4\n")
    with pytest.raises(DataFileError, match=r"load_npy reads .npy files "
                       r"\(numpy.save\). Got 'path' = '.*x.csv'"):
        dnn.load_npy(csv)
    npz = tmp_path / "x.npz"
    np.savez(npz, a=np.zeros(3))
    with pytest.raises(DataFileError, match="An .npz archive holds several"):
        dnn.load_npy(npz)
    fake = tmp_path / "fake.npy"
    fake.write_bytes(b"not numpy at all")
    with pytest.raises(DataFileError, match=r"'path' = '.*fake.npy' is not "
                       r"a valid .npy file"):
        dnn.load_npy(fake)


@pytest.mark.parametrize("array, error, match", [
    (np.zeros((0, 3)), ShapeError,
     r"load_npy needs data with at least one row. 'path' = '.*' holds an "
     r"array of shape \(0, 3\)"),
    (np.array(5.0), ShapeError, r"shape \(\)"),
    (np.array([{"a": 1}, None], dtype=object), DtypeError,
     r"load_npy needs numeric data, but 'path' has dtype object"),
    (np.array(["ab", "c"]), DtypeError, r"dtype <U2 \(strings\)"),
])
def test_bad_contents(tmp_path, array, error, match):
    path = tmp_path / "x.npy"
    np.save(path, array, allow_pickle=True)
    with pytest.raises(error, match=match):
        dnn.load_npy(path)


def test_load_npy_block_errors(tmp_path):
    path = _save(tmp_path, "x.npy", np.zeros(5))
    with pytest.raises(InvalidParameterError, match=r"'block_size' "
                       r"parameter of load_npy must be an int in the range "
                       r"\[1, 5\]"):
        dnn.load_npy(path, block_size=6)
    with pytest.raises(InvalidParameterError, match="not both"):
        dnn.load_npy(path, block_size=1, n_blocks=1)
    with pytest.raises(InvalidParameterError, match="must be a path. Got 3"):
        dnn.load_npy(3)


def test_load_npy_files_errors(tmp_path):
    a = _save(tmp_path, "a.npy", np.zeros((4, 3), dtype=np.float32))
    b = _save(tmp_path, "b.npy", np.zeros((2, 5), dtype=np.float32))
    c = _save(tmp_path, "c.npy", np.zeros((2, 3), dtype=np.float64))
    with pytest.raises(ShapeError, match=r"samples of one shape: .*a.npy "
                       r"has samples of shape \(3,\) but paths\[1\] = "
                       r".*b.npy has \(5,\)"):
        dnn.load_npy_files([a, b])
    with pytest.raises(ShapeError, match=r"files of one dtype: .*a.npy "
                       r"holds torch.float32 but paths\[1\] = .*c.npy holds "
                       r"torch.float64"):
        dnn.load_npy_files([a, c])
    with pytest.raises(ShapeError, match="needs at least one file"):
        dnn.load_npy_files([])
    with pytest.raises(InvalidParameterError, match="must be a list of .npy "
                       "paths.*load_npy reads one file"):
        dnn.load_npy_files(str(a))
    empty = _save(tmp_path, "e.npy", np.zeros((0, 3), dtype=np.float32))
    with pytest.raises(ShapeError, match=r"'paths\[1\]' = .*e.npy' holds "
                       r"an array of shape \(0, 3\)"):
        dnn.load_npy_files([a, empty])
