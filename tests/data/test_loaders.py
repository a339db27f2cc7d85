"""load_hdf5, load_zarr and load_shards: equal to the file read in one
process, on every backend; the master reads metadata only; a fit on what
they load trains the model the arrays train; and their errors."""

import os
import pickle
import shutil
import sys
import threading
import uuid

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

import dislib_nn as dnn
from dislib_nn import runtime
from dislib_nn.exceptions import (DataFileError, DtypeError,
                                  InvalidParameterError,
                                  MissingDependencyError, ShapeError)
from tests._ahead import THREAD_PREFIX
from tests.training._models import Classifier

# Both are in the test extra; without them the loaders cannot be tested.
h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

ARRAYS = [
    np.arange(101, dtype=np.float32),
    np.random.default_rng(0).random((101, 3, 2)),            # float64
    np.arange(101 * 5, dtype=np.int64).reshape(101, 5) - 200,
    np.arange(101 * 2).reshape(101, 2) % 3 == 0,               # bool
]
ARRAY_IDS = ["float32", "float64-3d", "int64", "bool"]
BLOCKS = [({"block_size": 40}, (40, 40, 21)),
          ({"n_blocks": 3}, (34, 34, 33)),
          ({"block_size": 101}, (101,)),
          ({"block_size": (50, 1, 50)}, (50, 1, 50))]


def _hdf5(tmp_path, array, name="x", **kwargs):
    """``array`` as dataset ``name`` of ``tmp_path``/data.h5 (added to
    the file when it exists).

    Written in a new scratch file, then copied. HDF5 locks a file while
    it writes it, and a process started meanwhile from another thread
    (the suite starts some in the background) holds a copy of that
    descriptor until it closes it, so the lock can outlive ``close``:
    the next open of the file then fails with "unable to lock file".
    A copy is written without a lock.
    """
    path = tmp_path / "data.h5"
    scratch = tmp_path / f".writing-{uuid.uuid4().hex}.h5"
    if path.exists():
        shutil.copyfile(path, scratch)
    with h5py.File(scratch, "a") as f:
        f.create_dataset(name, data=array, **kwargs)
    shutil.copyfile(scratch, path)
    scratch.unlink()
    return path


def _zarr(tmp_path, array, name="x", chunks="auto"):
    path = tmp_path / "data.zarr"
    zarr.open_group(path, mode="a").create_array(name, data=array,
                                                 chunks=chunks)
    return path


def _shards(folder, array, cuts, kinds):
    """``array`` cut at ``cuts`` into files named in order, ``kinds[k]``
    ('npy' or 'pt') the kind of file k."""
    folder.mkdir(exist_ok=True)
    bounds = [0, *cuts, len(array)]
    paths = []
    for k, kind in enumerate(kinds):
        part = array[bounds[k]:bounds[k + 1]]
        path = folder / f"part-{k:03d}.{kind}"
        if kind == "npy":
            np.save(path, part)
        else:
            torch.save(torch.from_numpy(np.ascontiguousarray(part)), path)
        paths.append(path)
    return paths


def _equal(ds, expected):
    assert ds.shape == expected.shape
    assert torch.equal(ds.collect(), torch.from_numpy(expected))


# ------------------------------------------------------------ contents
@pytest.mark.parametrize("array", ARRAYS, ids=ARRAY_IDS)
@pytest.mark.parametrize("kwargs, sizes", BLOCKS)
def test_load_hdf5_equals_h5py(backend, tmp_path, array, kwargs, sizes):
    path = _hdf5(tmp_path, array, name="group/x")
    x = dnn.load_hdf5(path, "group/x", **kwargs)
    assert x.block_sizes == sizes
    with h5py.File(path, "r") as f:
        _equal(x, f["group/x"][:])


@pytest.mark.parametrize("array", ARRAYS, ids=ARRAY_IDS)
@pytest.mark.parametrize("kwargs, sizes", BLOCKS)
def test_load_zarr_equals_zarr(backend, tmp_path, array, kwargs, sizes):
    path = _zarr(tmp_path, array, name="train/x",
                 chunks=(16,) + array.shape[1:])
    x = dnn.load_zarr(path, "train/x", **kwargs)
    assert x.block_sizes == sizes
    _equal(x, zarr.open_array(path, path="train/x", mode="r")[:])


def test_load_zarr_of_a_store_that_is_an_array(backend, tmp_path):
    path = tmp_path / "x.zarr"
    array = np.arange(60, dtype=np.float32).reshape(20, 3)
    zarr.create_array(store=path, data=array, chunks=(7, 3))
    _equal(dnn.load_zarr(str(path), n_blocks=2), array)


def test_non_native_byte_order_is_read_as_native(backend, tmp_path):
    array = np.arange(30, dtype=">f4").reshape(10, 3)
    x = dnn.load_hdf5(_hdf5(tmp_path, array), "x", n_blocks=2)
    z = zarr.create_array(store=tmp_path / "be.zarr", data=array,
                          zarr_format=2)
    assert z.dtype == np.dtype(">f4")
    y = dnn.load_zarr(tmp_path / "be.zarr", n_blocks=2)
    for ds in (x, y):
        assert ds.dtype == torch.float32
        _equal(ds, array.astype("<f4"))


@pytest.mark.parametrize("array", ARRAYS, ids=ARRAY_IDS)
@pytest.mark.parametrize("per_block, sizes", [
    (1, (30, 1, 50, 20)), (2, (31, 70)), (3, (81, 20)), (4, (101,))])
def test_load_shards_of_a_folder_of_npy_and_pt(backend, tmp_path, array,
                                               per_block, sizes):
    _shards(tmp_path / "shards", array, [30, 31, 81],
            ["npy", "pt", "pt", "npy"])
    (tmp_path / "shards" / "notes.txt").write_text("left out")
    x = dnn.load_shards(tmp_path / "shards", shards_per_block=per_block)
    assert x.block_sizes == sizes
    _equal(x, array)


def test_load_shards_of_a_list_keeps_its_order(backend, tmp_path):
    array = np.arange(40, dtype=np.float32).reshape(10, 4)
    paths = _shards(tmp_path / "s", array, [4, 7], ["pt", "npy", "pt"])
    x = dnn.load_shards([str(p) for p in reversed(paths)])
    assert x.block_sizes == (3, 3, 4)
    _equal(x, np.concatenate([array[7:], array[4:7], array[:4]]))


def test_pt_shards_of_views_and_parameters(backend, tmp_path):
    # torch.save keeps a view's whole storage, and a Parameter its grad
    # flag: the block holds the tensor's values only.
    whole = torch.arange(24.0).reshape(4, 6)
    torch.save(whole.t()[1:5], tmp_path / "a.pt")           # a strided view
    torch.save(torch.nn.Parameter(torch.ones(2, 4)), tmp_path / "b.pt")
    x = dnn.load_shards(tmp_path, shards_per_block=2)
    assert x.block_sizes == (6,)
    _equal(x, np.concatenate([whole.t()[1:5].numpy(), np.ones((2, 4),
                                                               "f4")]))


def test_load_npy_files_reads_npy_only(tmp_path):
    path = _shards(tmp_path / "s", np.zeros((4, 2)), [2], ["npy", "pt"])
    with pytest.raises(DataFileError, match=r"load_npy_files reads .npy "
                       r"files \(numpy.save\). Got 'paths\[1\]' = "
                       r"'.*part-001.pt'"):
        dnn.load_npy_files(path)


@pytest.mark.parametrize("load", ["hdf5", "zarr"])
def test_default_blocks_start_on_chunk_boundaries(backend, tmp_path, load):
    array = np.arange(203, dtype=np.int64)
    if load == "hdf5":
        x = dnn.load_hdf5(_hdf5(tmp_path, array, chunks=(20,)), "x")
    else:
        x = dnn.load_zarr(_zarr(tmp_path, array, chunks=(20,)), "x")
    workers = runtime.n_workers()
    assert x.n_blocks == workers
    starts = np.cumsum((0,) + x.block_sizes[:-1])
    assert all(start % 20 == 0 for start in starts)
    # Whole chunks but the last, at most one chunk apart: 11 chunks.
    chunks = [-(-size // 20) for size in x.block_sizes]
    assert sum(chunks) == 11 and max(chunks) - min(chunks) <= 1
    _equal(x, array)


def test_default_blocks_split_chunks_when_too_few(backend, tmp_path):
    # One chunk and two workers: a block per worker comes first.
    array = np.arange(50, dtype=np.float32)
    x = dnn.load_zarr(_zarr(tmp_path, array, chunks=(64,)), "x")
    assert x.block_sizes == ((50,) if runtime.n_workers() == 1
                             else (25, 25))
    _equal(x, array)


# ------------------------------------------- what the master reads
def _bytes_read():
    """What this process's threads have read (``rchar``), but the
    suite's own background runs' threads (tests/_ahead.py), which read
    the output pipes of the scripts that run beside the tests. A thread
    that has ended is no longer counted: this test's reads are in the
    main thread and the local pool's long-lived ones."""
    skip = {t.native_id for t in threading.enumerate()
            if t.name.startswith(THREAD_PREFIX)}
    total = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) in skip:
            continue
        try:
            with open(f"/proc/self/task/{tid}/io") as f:
                total += int(next(line for line in f
                                  if line.startswith("rchar")).split()[1])
        except FileNotFoundError:       # the thread has ended
            continue
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/io"),
                    reason="reads /proc/self/io (Linux)")
def test_the_master_reads_metadata_only(local, tmp_path):
    # On the local backend tasks run in worker processes: whatever this
    # process reads (every thread, through any file) is the master's.
    array = np.random.default_rng(0).random((1 << 14, 128)).astype("f4")
    h5, store = _hdf5(tmp_path, array), _zarr(tmp_path, array)
    shards = _shards(tmp_path / "s", array, [4096, 8192, 12288],
                     ["npy", "pt", "npy", "pt"])
    loads = {"hdf5": lambda: dnn.load_hdf5(h5, "x"),
             "zarr": lambda: dnn.load_zarr(store, "x"),
             "shards": lambda: dnn.load_shards(shards)}
    dnn.zeros((2, 2)).collect()                 # the pool is up
    for name, load in loads.items():
        before = _bytes_read()
        x = load()
        runtime.barrier()                       # every block read
        read = _bytes_read() - before           # of 8 MiB
        assert read < 256 * 1024, (name, read)
        _equal(x, array)


# ----------------------------------------------------------------- fit
def _digits():
    X, y = load_digits(return_X_y=True)
    return (X / 16).astype(np.float32), y.astype(np.int64)


@pytest.mark.parametrize("load", ["hdf5", "zarr", "shards"])
def test_a_fit_on_loaded_data_equals_the_fit_on_arrays(backend, tmp_path,
                                                       load):
    X, y = _digits()
    if load == "hdf5":
        path = _hdf5(tmp_path, X)
        _hdf5(tmp_path, y, name="y")
        x_ds = dnn.load_hdf5(path, "x", n_blocks=2)
        y_ds = dnn.load_hdf5(path, "y", n_blocks=2)
    elif load == "zarr":
        path = _zarr(tmp_path, X)
        _zarr(tmp_path, y, name="y")
        x_ds = dnn.load_zarr(path, "x", n_blocks=2)
        y_ds = dnn.load_zarr(path, "y", n_blocks=2)
    else:
        cut = [899]                             # np.array_split's cut
        x_ds = dnn.load_shards(_shards(tmp_path / "x", X, cut,
                                       ["npy", "pt"]))
        y_ds = dnn.load_shards(_shards(tmp_path / "y", y, cut,
                                       ["pt", "npy"]))
    assert x_ds.block_sizes == dnn.from_array(X, n_blocks=2).block_sizes

    def fit(X, y):
        return dnn.SyncEpochAveragingClassifier(
            module=Classifier, module__hidden=16, module__batch_norm=False,
            n_workers=2, n_epochs=2,
            batch_size=32, lr=0.1, random_state=0).fit(X, y)
    loaded, arrays = fit(x_ds, y_ds), fit(X, y)
    for key, value in arrays.module_.state_dict().items():
        assert torch.equal(loaded.module_.state_dict()[key], value), key
    np.testing.assert_array_equal(loaded.predict(X), arrays.predict(X))
    np.testing.assert_array_equal(loaded.predict(x_ds), arrays.predict(X))


# -------------------------------------------------------------- errors
def test_missing_files_and_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"load_hdf5: 'path' = "
                       r"'.*nothere.h5' does not exist or is not a file"):
        dnn.load_hdf5(tmp_path / "nothere.h5", "x")
    with pytest.raises(FileNotFoundError, match=r"load_zarr: 'path' = "
                       r"'.*nothere.zarr' does not exist or is not a "
                       r"folder \(a Zarr store\)"):
        dnn.load_zarr(tmp_path / "nothere.zarr")
    with pytest.raises(InvalidParameterError, match=r"'paths_or_folder' "
                       r"parameter of load_shards must be a folder or a "
                       r"list of .npy and .pt files. Got '.*nothere', not "
                       r"a folder"):
        dnn.load_shards(str(tmp_path / "nothere"))
    good = _shards(tmp_path / "s", np.zeros(3), [], ["pt"])[0]
    with pytest.raises(FileNotFoundError, match=r"load_shards: "
                       r"'paths_or_folder\[1\]' = '.*gone.pt' does not "
                       r"exist"):
        dnn.load_shards([good, tmp_path / "gone.pt"])
    with pytest.raises(InvalidParameterError, match=r"Got '.*part-000.pt',"
                       r" a file: list it, \[path\]"):
        dnn.load_shards(str(good))


def test_files_of_another_format(tmp_path):
    text = tmp_path / "x.txt"
    text.write_text("not data")
    with pytest.raises(DataFileError, match=r"load_hdf5: 'path' = "
                       r"'.*x.txt' is not an HDF5 file"):
        dnn.load_hdf5(text, "x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFileError, match=r"load_zarr: 'path' = "
                       r"'.*empty' is not a Zarr store"):
        dnn.load_zarr(tmp_path / "empty")
    with pytest.raises(DataFileError, match=r"load_shards reads .npy "
                       r"\(numpy.save\) and .pt \(torch.save\) files. Got "
                       r"'paths_or_folder\[0\]' = '.*x.txt'"):
        dnn.load_shards([text])
    with pytest.raises(ShapeError, match=r"'paths_or_folder' = '.*empty' "
                       r"holds no .npy or .pt files"):
        dnn.load_shards(tmp_path / "empty")


def test_hdf5_dataset_not_a_dataset(tmp_path):
    path = _hdf5(tmp_path, np.zeros(3), name="a/b")
    _hdf5(tmp_path, np.zeros(3), name="c")
    with pytest.raises(InvalidParameterError, match=r"load_hdf5: 'dataset' "
                       r"= 'nope' is not in '.*data.h5'; its datasets: "
                       r"'a/b', 'c'\.$"):
        dnn.load_hdf5(path, "nope")
    with pytest.raises(InvalidParameterError, match=r"'dataset' = 'a' "
                       r"names a group of '.*data.h5', not a dataset; its "
                       r"datasets: 'a/b', 'c'"):
        dnn.load_hdf5(path, "a")
    with pytest.raises(InvalidParameterError, match=r"The 'dataset' "
                       r"parameter of load_hdf5 must be a str.*Got 3"):
        dnn.load_hdf5(path, 3)


def test_hdf5_lists_ten_datasets_at_most(tmp_path):
    for k in range(12):
        path = _hdf5(tmp_path, np.zeros(2), name=f"d{k:02d}")
    with pytest.raises(InvalidParameterError, match=r"its datasets: 'd00', "
                       r"'d01', .*'d09' and more\.$"):
        dnn.load_hdf5(path, "x")


def test_zarr_component_not_an_array(tmp_path):
    path = _zarr(tmp_path, np.zeros(3), name="a/b")
    _zarr(tmp_path, np.zeros(3), name="c")
    with pytest.raises(InvalidParameterError, match=r"load_zarr: "
                       r"'component' = 'nope' is not in '.*data.zarr'; its "
                       r"arrays: 'a/b', 'c'\.$"):
        dnn.load_zarr(path, "nope")
    with pytest.raises(InvalidParameterError, match=r"'component' = 'a' "
                       r"names a group of '.*data.zarr', not an array"):
        dnn.load_zarr(path, "a")
    with pytest.raises(InvalidParameterError, match=r"load_zarr: 'path' = "
                       r"'.*data.zarr' is a group, not an array: name one "
                       r"of its arrays with 'component'; its arrays: 'a/b'"):
        dnn.load_zarr(path)
    with pytest.raises(InvalidParameterError, match=r"The 'component' "
                       r"parameter of load_zarr must be None or a str"):
        dnn.load_zarr(path, 3)
    array = tmp_path / "array.zarr"
    zarr.create_array(store=array, data=np.zeros(3))
    with pytest.raises(InvalidParameterError, match=r"'component' = 'x' "
                       r"was given, but 'path' = '.*array.zarr' is an "
                       r"array, not a group: leave component=None"):
        dnn.load_zarr(array, "x")
    strings = tmp_path / "strings.zarr"
    zarr.create_array(store=strings, shape=(3,), dtype=str)
    with pytest.raises(DtypeError, match=r"load_zarr needs numeric data, "
                       r"but 'path' has dtype"):
        dnn.load_zarr(strings)


EMPTY = [(np.zeros((0, 3)), r"\(0, 3\)"), (np.array(5.0), r"\(\)")]


@pytest.mark.parametrize("array, shape", EMPTY, ids=["0-row", "0-d"])
def test_no_rows(tmp_path, array, shape):
    with pytest.raises(ShapeError, match=r"load_hdf5 needs data with at "
                       r"least one row. 'dataset' = 'x' holds an array of "
                       rf"shape {shape}"):
        dnn.load_hdf5(_hdf5(tmp_path, array), "x")
    with pytest.raises(ShapeError, match=r"load_zarr needs data with at "
                       r"least one row. 'component' = 'x' holds an array "
                       rf"of shape {shape}"):
        dnn.load_zarr(_zarr(tmp_path, array), "x")
    torch.save(torch.from_numpy(array), tmp_path / "x.pt")
    with pytest.raises(ShapeError, match=r"load_shards needs data with at "
                       r"least one row. 'paths_or_folder\[0\]' = "
                       rf"'.*x.pt' holds a tensor of shape {shape}"):
        dnn.load_shards([tmp_path / "x.pt"])


def test_hdf5_dataset_without_a_shape(tmp_path):
    path = _hdf5(tmp_path, h5py.Empty("f4"))
    with pytest.raises(ShapeError, match=r"'dataset' = 'x' holds an array "
                       r"of shape None"):
        dnn.load_hdf5(path, "x")


@pytest.mark.parametrize("array, kind", [
    (np.array([b"ab", b"c"]), "bytes"),
    (np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]), "records"),
    (np.zeros(3, dtype=np.longdouble), None)])
def test_hdf5_dtypes_torch_cannot_hold(tmp_path, array, kind):
    match = (rf"load_hdf5 needs numeric data, but 'dataset' has dtype .* "
             rf"\(.*{kind}" if kind else
             r"load_hdf5 cannot hold dtype float128 of 'dataset'")
    with pytest.raises(DtypeError, match=match):
        dnn.load_hdf5(_hdf5(tmp_path, array), "x")


def test_zarr_dtypes_torch_cannot_hold(tmp_path):
    path = tmp_path / "data.zarr"
    group = zarr.open_group(path, mode="w")
    group.create_array("s", shape=(3,), dtype=str)
    group.create_array("t", data=np.zeros(3, dtype="datetime64[s]"))
    with pytest.raises(DtypeError, match=r"load_zarr needs numeric data, "
                       r"but 'component' has dtype .*not numeric"):
        dnn.load_zarr(path, "s")
    with pytest.raises(DtypeError, match=r"'component' has dtype "
                       r"datetime64\[s\] \(datetimes\)"):
        dnn.load_zarr(path, "t")


def test_shards_that_disagree(tmp_path):
    a = _shards(tmp_path / "a", np.zeros((4, 3), np.float32), [], ["npy"])
    b = _shards(tmp_path / "b", np.zeros((2, 5), np.float32), [], ["pt"])
    c = _shards(tmp_path / "c", np.zeros((2, 3), np.float64), [], ["pt"])
    with pytest.raises(ShapeError, match=r"load_shards needs files with "
                       r"samples of one shape: .*a/part-000.npy has "
                       r"samples of shape \(3,\) but paths_or_folder\[1\] "
                       r"= .*b/part-000.pt has \(5,\)"):
        dnn.load_shards(a + b)
    with pytest.raises(ShapeError, match=r"load_shards needs files of one "
                       r"dtype: .*a/part-000.npy holds torch.float32 but "
                       r"paths_or_folder\[1\] = .*c/part-000.pt holds "
                       r"torch.float64"):
        dnn.load_shards(a + c)
    with pytest.raises(ShapeError, match="load_shards needs at least one "
                       "file"):
        dnn.load_shards([])


class Payload:
    """What a .pt file must not hold: an object whose class loading it
    would import (weights_only=True refuses it)."""


@pytest.mark.parametrize("obj, error, match", [
    ({"x": torch.zeros(3)}, DataFileError, r"holds a dict; a .pt shard "
     r"holds one dense tensor"),
    (torch.zeros(3, 3).to_sparse(), DataFileError,
     r"holds a torch.sparse_coo tensor"),
    (Payload(), DataFileError, r"could not be read with torch.load\("
     r"weights_only=True\): UnpicklingError"),
    (torch.zeros(3, dtype=torch.float8_e4m3fn), DtypeError,
     r"load_shards cannot hold dtype torch.float8_e4m3fn of "
     r"'paths_or_folder\[0\]'"),
])
def test_pt_files_that_are_not_one_tensor(tmp_path, obj, error, match):
    path = tmp_path / "x.pt"
    torch.save(obj, path)
    with pytest.raises(error, match=match):
        dnn.load_shards([path])


def test_pt_files_of_the_legacy_format(tmp_path):
    legacy = tmp_path / "legacy.pt"
    torch.save(torch.zeros(3), legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(DataFileError, match=r"'paths_or_folder\[0\]' = "
                       r"'.*legacy.pt' is not a file of torch.save's zip "
                       r"format"):
        dnn.load_shards([legacy])
    pickled = tmp_path / "pickled.pt"
    pickled.write_bytes(pickle.dumps(np.zeros(3)))
    with pytest.raises(DataFileError, match="not a file of torch.save's"):
        dnn.load_shards([pickled])


def test_block_parameters(tmp_path):
    path = _hdf5(tmp_path, np.zeros(5))
    with pytest.raises(InvalidParameterError, match=r"'block_size' "
                       r"parameter of load_hdf5 must be an int in the range "
                       r"\[1, 5\]"):
        dnn.load_hdf5(path, "x", block_size=6)
    with pytest.raises(InvalidParameterError, match=r"load_zarr takes "
                       r"block_size or n_blocks, not both"):
        dnn.load_zarr(_zarr(tmp_path, np.zeros(5)), "x", block_size=1,
                      n_blocks=1)
    paths = _shards(tmp_path / "s", np.zeros(5), [2], ["npy", "pt"])
    for bad in (0, 3, 1.0):
        with pytest.raises(InvalidParameterError, match=r"The "
                           r"'shards_per_block' parameter of load_shards "
                           r"must be an int in the range \[1, 2\] \(the "
                           rf"number of files\). Got {bad!r} instead"):
            dnn.load_shards(paths, shards_per_block=bad)
    with pytest.raises(InvalidParameterError, match=r"The 'path' parameter "
                       r"of load_hdf5 must be a path. Got 3"):
        dnn.load_hdf5(3, "x")


@pytest.mark.parametrize("module, load, extra", [
    ("h5py", lambda p: dnn.load_hdf5(p, "x"), "hdf5"),
    ("zarr", lambda p: dnn.load_zarr(p), "zarr")])
def test_missing_dependency(monkeypatch, tmp_path, module, load, extra):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError, match=(
            rf"needs {module}, which is not installed: pip install "
            rf"{module} \(or, in a checkout of dislib_nn, pip install -e "
            rf"\"\.\[{extra}\]\"\)")):
        load(tmp_path)
