"""Training from a .npy file larger than the memory the master may use.

The script writes a data set (features and labels, two ``.npy`` files)
several times larger than a memory budget it sets for the master, then
trains from :func:`dislib_nn.load_npy`: each block is read by a task on
a worker, shuffled and trained on by tasks, and scored by tasks. The
master holds the blocks' geometry and futures, never rows. At the end it
prints the master's peak memory above its level before loading (Linux:
``VmHWM``, reset through ``/proc/self/clear_refs``) and exits with an
error if that exceeds the budget. Once the figure is taken, a plain
single-process PyTorch loop trains the same MLP from the same initial
weights on the same training rows (read through a memory map of the
files, one batch at a time), for the test accuracy to compare with.

    python examples/large_dataset_npy.py             # 256 MiB of data, 64 MiB budget
    python examples/large_dataset_npy.py --tiny      # 32 MiB, 16 MiB budget
    python examples/large_dataset_npy.py --rows 4194304 --out /scratch  # 1 GiB

``--tiny`` (or ``DISLIB_NN_EXAMPLE_TINY=1``) writes 131 072 rows and
trains one epoch. The files go to ``--out`` (created if missing, and
kept), or by default to a new folder in the system's temporary folder,
removed at the end; the script prints which. Under COMPSs that folder
must be on a file system the workers see: give ``--out``.
"""

import argparse
import copy
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

import dislib_nn as dnn

N_FEATURES, N_CLASSES = 64, 4


class MLP(nn.Module):
    def __init__(self, n_features_in=N_FEATURES, n_classes=N_CLASSES,
                 hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_features_in, hidden),
                                  nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.body(x)


def write_data(folder, n_rows, seed, chunk=65536):
    """Features and labels as .npy files, written a chunk at a time.

    The label is the arg-max of a fixed linear map of the features, so
    a model can learn it; the master never holds more than one chunk.
    """
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((N_FEATURES, N_CLASSES))
    x_path = os.path.join(folder, "x.npy")
    y_path = os.path.join(folder, "y.npy")
    with open(x_path, "wb") as fx, open(y_path, "wb") as fy:
        _header(fx, np.float32, (n_rows, N_FEATURES))
        _header(fy, np.int64, (n_rows,))
        for start in range(0, n_rows, chunk):
            rows = rng.standard_normal((min(chunk, n_rows - start),
                                        N_FEATURES), dtype=np.float32)
            fx.write(rows.tobytes())
            fy.write((rows @ weights).argmax(axis=1).astype(np.int64)
                     .tobytes())
    return x_path, y_path


def _header(f, dtype, shape):
    np.lib.format.write_array_header_1_0(f, {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
        "fortran_order": False, "shape": shape})


def reset_peak():
    """Reset the kernel's peak-RSS mark of this process; False if not."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_mib(field):
    """``VmRSS`` or ``VmHWM`` of this process, in MiB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise OSError(f"no {field} in /proc/self/status")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        default=os.environ.get("DISLIB_NN_EXAMPLE_TINY")
                        == "1")
    parser.add_argument("--rows", type=int, default=None,
                        help="rows of 64 float32 features (256 bytes each)")
    parser.add_argument("--budget-mib", type=float, default=None,
                        help="memory the master may add while training")
    parser.add_argument("--out", default=None,
                        help="folder for the .npy files, kept (default: a "
                             "new temporary folder, removed at the end)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    n_rows = args.rows or (131072 if args.tiny else 1048576)
    budget = args.budget_mib or (16 if args.tiny else 64)
    epochs = 1 if args.tiny else 2
    seed = 0

    if args.out is None:
        folder = tempfile.mkdtemp(prefix="dislib_nn_npy_")
        kept = "a temporary folder, removed at the end"
    else:
        folder = args.out
        os.makedirs(folder, exist_ok=True)
        kept = "kept"
    try:
        t0 = time.perf_counter()
        x_path, y_path = write_data(folder, n_rows, seed)
        data_mib = (os.path.getsize(x_path) + os.path.getsize(y_path)) / 2**20
        print(f"wrote {n_rows} rows: {data_mib:.0f} MiB in {folder} "
              f"({kept}; {time.perf_counter() - t0:.1f}s); the master's "
              f"budget is {budget:.0f} MiB", flush=True)

        # The worker pool starts with the first task; start it before
        # measuring, so that the figure is about the data.
        torch.manual_seed(seed)
        init = MLP()
        lr, batch_size = 1e-2, 256
        clf = dnn.SyncEpochAveragingClassifier(
            module=init, optimizer=torch.optim.Adam, lr=lr,
            batch_size=batch_size, n_epochs=epochs, n_workers=args.workers,
            random_state=seed, verbose=1)
        warm = np.zeros((8, N_FEATURES), dtype=np.float32)
        clf.set_params(n_epochs=1, verbose=0).fit(warm, np.arange(8) % 4)
        clf.set_params(n_epochs=epochs, verbose=1)

        measured = reset_peak()
        before = memory_mib("VmRSS")
        n_blocks = 4 * args.workers
        x = dnn.load_npy(x_path, n_blocks=n_blocks)
        y = dnn.load_npy(y_path, n_blocks=n_blocks)
        # The rows are drawn independently: the last tenth is the test
        # set (the estimator still shuffles the training rows globally).
        x_train, x_test, y_train, y_test = dnn.train_test_split(
            x, y, test_size=0.1, shuffle=False)
        print(f"training on {x_train.shape}, {x_train.n_blocks} blocks of "
              f"about {x_train.block_sizes[0]} rows", flush=True)
        t0 = time.perf_counter()
        clf.fit(x_train, y_train)
        accuracy = clf.score(x_test, y_test)      # computed by tasks
        elapsed = time.perf_counter() - t0
        peak = memory_mib("VmHWM") - before if measured else float("nan")
        print(f"test accuracy {accuracy:.4f}; {epochs} epochs in "
              f"{elapsed:.1f}s")
        print(f"master memory: {before:.0f} MiB before loading; peak "
              f"{peak:+.1f} MiB above it while {data_mib:.0f} MiB of data "
              f"were loaded, shuffled, trained on and scored (budget "
              f"{budget:.0f} MiB)", flush=True)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)        # one thread, as each worker uses
        reference = plain_pytorch(init, x_path, y_path, len(x_train),
                                  epochs, batch_size, lr, seed)
        torch.set_num_threads(threads)
        print(f"plain PyTorch, one process, same rows: test accuracy "
              f"{reference:.4f}")
    finally:
        if args.out is None:
            shutil.rmtree(folder, ignore_errors=True)
    if not measured:
        print("(peak not measured: /proc/self/clear_refs is not writable)")
    elif peak > budget:
        sys.exit(f"the master's peak memory grew by {peak:.1f} MiB, more "
                 f"than the {budget:.0f} MiB budget")
    return accuracy, peak


def plain_pytorch(init, x_path, y_path, n_train, epochs, batch_size, lr,
                  seed):
    """One process on rows [0, n_train) of the files, read a batch at a
    time through a memory map; test accuracy on the rows after them."""
    X = np.load(x_path, mmap_mode="r")
    y = np.load(y_path, mmap_mode="r")
    model = copy.deepcopy(init)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(seed)
    model.train()
    for _ in range(epochs):
        order = rng.permutation(n_train)
        for start in range(0, n_train, batch_size):
            idx = np.sort(order[start:start + batch_size])
            opt.zero_grad()
            loss_fn(model(torch.from_numpy(X[idx])),
                    torch.from_numpy(y[idx])).backward()
            opt.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(n_train, len(y), 65536):
            rows = slice(start, min(start + 65536, len(y)))
            pred = model(torch.from_numpy(np.array(X[rows]))).argmax(1)
            correct += int((pred.numpy() == y[rows]).sum())
    return correct / (len(y) - n_train)


if __name__ == "__main__":
    main()
