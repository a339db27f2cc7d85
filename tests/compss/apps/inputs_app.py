"""A user's script: integer ids for an embedding model, and a torch
Dataset of its own that reads files, both classes in __main__.

Run with plain ``python`` (local backend) and under the emulated
``runcompss``: both print the same JSON report (the weights trained to
the bit, and the predictions), when the module receives int64 ids and
the Dataset's blocks are read by tasks that got it by value.
"""

import hashlib
import json
import os
import sys
import tempfile

import numpy as np
import torch
from torch import nn

from dislib_nn import SyncEpochAveragingClassifier, runtime


class HashedIds(nn.Module):
    def __init__(self, n_buckets=1000, dim=4, n_classes=2):
        super().__init__()
        self.n_buckets = n_buckets
        self.emb = nn.Embedding(n_buckets, dim)
        self.out = nn.Linear(dim, n_classes)

    def forward(self, ids):
        return self.out(self.emb(ids[:, 0] % self.n_buckets))


class IdFiles(torch.utils.data.Dataset):
    """Ids and labels in two .npy files, opened where an item is read."""

    def __init__(self, folder):
        self.folder = folder

    def _load(self, name):
        return np.load(os.path.join(self.folder, name), mmap_mode="r")

    def __len__(self):
        return len(self._load("y.npy"))

    def __getitem__(self, i):
        return (torch.from_numpy(np.array(self._load("ids.npy")[i])),
                int(self._load("y.npy")[i]))


def digest(module):
    hasher = hashlib.sha256()
    for key, value in module.state_dict().items():
        hasher.update(key.encode())
        hasher.update(value.numpy().tobytes())
    return hasher.hexdigest()


def main(folder):
    # 2**24 and 2**24 + 1 are one float32 value: only exact ids tell the
    # two classes apart.
    ids = np.array([[2 ** 24], [2 ** 24 + 1]] * 16)
    y = ids[:, 0] % 2
    np.save(os.path.join(folder, "ids.npy"), ids)
    np.save(os.path.join(folder, "y.npy"), y)
    kwargs = dict(module=HashedIds, n_workers=2, n_epochs=8, batch_size=8,
                  lr=0.5, shuffle="none", random_state=0)
    arrays = SyncEpochAveragingClassifier(**kwargs).fit(ids, y)
    files = SyncEpochAveragingClassifier(**kwargs).fit(IdFiles(folder))
    return {"backend": runtime.backend_name(),
            "arrays": digest(arrays.module_),
            "dataset": digest(files.module_),
            "predict": arrays.predict(ids[:4]).tolist(),
            "predict_dataset": files.predict(IdFiles(folder))[:4].tolist(),
            "score_dataset": files.score(IdFiles(folder))}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(main(folder)))
    sys.stdout.flush()
