"""A user's script: integer ids for an embedding model, a torch Dataset
of its own that reads files, a module of two inputs (a dict X) and one
of two outputs (a dict, with a loss of both), all classes in __main__.

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


class NumAndIds(nn.Module):
    """Two inputs by keyword: numbers and category ids."""

    def __init__(self, n_classes=2):
        super().__init__()
        self.emb = nn.Embedding(10, 3)
        self.lin = nn.Linear(2 + 3, n_classes)

    def forward(self, x_num, x_cat):
        return self.lin(torch.cat([x_num, self.emb(x_cat)], dim=1))


class WithAux(nn.Module):
    """Scores and an auxiliary head in a dict, the auxiliary first (or a
    tuple, the scores first)."""

    def __init__(self, n_features_in=2, n_classes=2, as_tuple=False):
        super().__init__()
        self.as_tuple = as_tuple
        self.body = nn.Linear(n_features_in, 8)
        self.logits = nn.Linear(8, n_classes)
        self.aux = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.body(x))
        if self.as_tuple:
            return self.logits(h), self.aux(h)
        return {"aux": self.aux(h), "logits": self.logits(h)}


class BothHeads(nn.Module):
    """A criterion of the whole dict WithAux returns."""

    def forward(self, output, y):
        return (nn.functional.cross_entropy(output["logits"], y)
                + 0.1 * output["aux"].pow(2).mean())


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
    # Several inputs (a dict) and several outputs (a dict, its second
    # value predicted, the loss of both), shuffled globally.
    rng = np.random.default_rng(0)
    x_num = rng.normal(size=(64, 2))
    x_cat = rng.integers(0, 10, size=64)
    y2 = (x_cat > 4).astype(np.int64)
    inputs = {"x_num": x_num, "x_cat": x_cat}
    more = dict(n_workers=2, n_epochs=8, batch_size=8, lr=0.5,
                random_state=0)
    several = SyncEpochAveragingClassifier(module=NumAndIds, **more).fit(
        inputs, y2)
    outputs = SyncEpochAveragingClassifier(
        module=WithAux, output="logits", loss_input="all",
        criterion=BothHeads, **more).fit(x_num, y2)
    # The same inputs by position; a tuple output, its first element.
    positional = SyncEpochAveragingClassifier(module=NumAndIds, **more).fit(
        (x_num, x_cat), y2)
    first = SyncEpochAveragingClassifier(
        module=WithAux, module__as_tuple=True, **more).fit(x_num, y2)
    return {"backend": runtime.backend_name(),
            "arrays": digest(arrays.module_),
            "dataset": digest(files.module_),
            "predict": arrays.predict(ids[:4]).tolist(),
            "predict_dataset": files.predict(IdFiles(folder))[:4].tolist(),
            "score_dataset": files.score(IdFiles(folder)),
            "several": digest(several.module_),
            "several_score": several.score(inputs, y2),
            "outputs": digest(outputs.module_),
            "outputs_predict": outputs.predict(x_num[:8]).tolist(),
            "positional": digest(positional.module_),
            "tuple_output": digest(first.module_),
            "tuple_output_predict": first.predict(x_num[:8]).tolist()}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(main(folder)))
    sys.stdout.flush()
