"""A user's script: data in an HDF5 file, a Zarr store and a folder of
``.npy`` and ``.pt`` shards, loaded with load_hdf5, load_zarr and
load_shards, and a model fitted on each.

Run with plain ``python`` (local backend) and under the emulated
``runcompss``: both print the same JSON report (per loader the block
sizes, a hash of the gathered blocks and the fitted model's predictions)
when the blocks are read by tasks on the workers, h5py and zarr imported
there, under COMPSs's rules. ``data()`` is the numpy reference the test
hashes itself.
"""

import hashlib
import json
import os
import sys
import tempfile

import h5py
import numpy as np
import torch
import zarr
from torch import nn

import dislib_nn as dnn
from dislib_nn import runtime

ROWS = 90


class Net(nn.Module):
    def __init__(self, n_features_in=6, n_classes=3):
        super().__init__()
        self.lin = nn.Linear(n_features_in, n_classes)

    def forward(self, x):
        return self.lin(x)


def data():
    """The samples and labels every file holds (float32 and int64), and
    an int16 tensor of images (3-d samples) beside them."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    images = rng.integers(-300, 300, (ROWS, 2, 3, 4)).astype(np.int16)
    return {"x": x, "y": y, "images": images}


def digest(arrays):
    """sha256 of arrays' dtypes, shapes and bytes, in order."""
    hasher = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        hasher.update(f"{array.dtype.str}{array.shape}".encode())
        hasher.update(array.tobytes())
    return hasher.hexdigest()


def write(folder, arrays):
    """The three layouts; returns their paths."""
    h5 = os.path.join(folder, "data.h5")
    with h5py.File(h5, "w") as f:
        for name, array in arrays.items():
            f.create_dataset(f"train/{name}", data=array,
                             chunks=(15,) + array.shape[1:])
    store = os.path.join(folder, "data.zarr")
    group = zarr.open_group(store, mode="w")
    for name, array in arrays.items():
        group.create_array(f"train/{name}", data=array,
                           chunks=(15,) + array.shape[1:])
    shards = {}
    for name, array in arrays.items():
        shards[name] = os.path.join(folder, f"shards-{name}")
        os.mkdir(shards[name])
        # Four files, two a block: blocks of 45 rows, as from_array's.
        for k, (start, stop) in enumerate([(0, 20), (20, 45), (45, 70),
                                           (70, ROWS)]):
            path = os.path.join(shards[name], f"part-{k:02d}")
            part = np.ascontiguousarray(array[start:stop])
            if k % 2:
                torch.save(torch.from_numpy(part), path + ".pt")
            else:
                np.save(path + ".npy", part)
    return h5, store, shards


def fit(x, y):
    est = dnn.SyncEpochAveragingClassifier(
        module=Net, n_workers=2, n_epochs=3, batch_size=8, lr=0.5,
        random_state=0).fit(x, y)
    return est.predict(data()["x"]).tolist()


def main(folder):
    arrays = data()
    h5, store, shards = write(folder, arrays)
    loaders = {
        "hdf5": lambda name: dnn.load_hdf5(h5, f"train/{name}", n_blocks=2),
        "zarr": lambda name: dnn.load_zarr(store, f"train/{name}",
                                           n_blocks=2),
        "shards": lambda name: dnn.load_shards(shards[name],
                                               shards_per_block=2),
    }
    report = {"backend": runtime.backend_name(),
              "arrays": fit(arrays["x"], arrays["y"])}
    for loader, load in loaders.items():
        loaded = {name: load(name) for name in arrays}
        report[loader] = {
            "blocks": [list(loaded[name].block_sizes) for name in arrays],
            "sha256": digest(loaded[name].collect().numpy()
                             for name in arrays),
            "predict": fit(loaded["x"], loaded["y"]),
        }
    return report


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(main(folder)))
    sys.stdout.flush()
