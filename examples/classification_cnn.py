"""A CNN on scikit-learn's digits: each strategy beside plain PyTorch.

The 8x8 digits become a 4-D ds-tensor (images of 1 x 8 x 8), split into
training and test sets by tasks. Each of dislib_nn's strategies trains
the same CNN from the same initial weights, and so does a plain
single-process PyTorch loop with the same optimizer, epochs and batch
size. The test accuracy after every epoch of each is printed and
plotted (``classification_cnn.png``, when matplotlib is installed), beside
``dnn.plot_history`` of one of them, in the folder ``--out`` (created if
missing; by default ``dislib_nn_examples`` in the system's temporary
folder, so that a run from a checkout leaves nothing in it).

    python examples/classification_cnn.py            # about 50 s on 2 cores
    python examples/classification_cnn.py --tiny     # a smoke run
    runcompss --lang=python --pythonpath=$PWD/examples \
        examples/classification_cnn.py               # unchanged, on COMPSs

``--tiny`` (or ``DISLIB_NN_EXAMPLE_TINY=1``) trains for 2 epochs.
``--checkpoint-dir DIR`` checkpoints each strategy's fit after every
merged epoch, in a folder of its own under DIR, and resumes from there:
run the same command again after a crash, a time limit or a requeued
SLURM job (``examples/slurm/enqueue_4x4_gpus.sh``) and it goes on from
the last epoch written, with the model an uninterrupted run would have.
"""

import argparse
import copy
import os
import re
import tempfile
import time

import numpy as np
import torch
from torch import nn

import dislib_nn as dnn
# The demo's CNN (python -m dislib_nn.demo): two conv blocks with
# BatchNorm, then a linear layer, for 1 x 8 x 8 images.
from dislib_nn.demo import DigitsCNN


# The contenders: a name, an estimator class and its own parameters.
# Each strategy of dislib_nn is one line here.
STRATEGIES = {
    "sync, global shuffle": (dnn.SyncEpochAveragingClassifier,
                             {"shuffle": "global"}),
    "sync, local shuffle": (dnn.SyncEpochAveragingClassifier,
                            {"shuffle": "local"}),
    "async": (dnn.AsyncEpochAveragingClassifier, {}),
}


def plain_pytorch(init, X, y, X_test, y_test, epochs, batch_size, lr, seed):
    """One process, rows reshuffled every epoch; test accuracy per epoch."""
    model = copy.deepcopy(init)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    x, t = torch.from_numpy(X), torch.from_numpy(y)
    generator = torch.Generator().manual_seed(seed)
    scores = []
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            if len(idx) < 2:           # BatchNorm needs two rows
                continue
            opt.zero_grad()
            loss_fn(model(x[idx]), t[idx]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(torch.from_numpy(X_test)).argmax(1).numpy()
        scores.append(float((pred == y_test).mean()))
    return scores


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        default=os.environ.get("DISLIB_NN_EXAMPLE_TINY")
                        == "1")
    parser.add_argument("--out", default=None,
                        help="folder for the plot, created if missing "
                             "(default: dislib_nn_examples in the "
                             "system's temporary folder)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--checkpoint-dir", default=None,
                        help="checkpoint every strategy's fit in a folder "
                             "of its own here, and resume from it")
    args = parser.parse_args(argv)
    out = output_folder(args.out)
    epochs = args.epochs or (2 if args.tiny else 12)
    lr, batch_size, seed = 3e-3, 32, 0

    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32).reshape(-1, 1, 8, 8)
    x = dnn.from_array(X, n_blocks=2 * args.workers)     # a 4-D ds-tensor
    t = dnn.from_array(y.astype(np.int64), n_blocks=2 * args.workers)
    x_train, x_test, t_train, t_test = dnn.train_test_split(
        x, t, test_size=0.25, random_state=seed)
    print(f"digits as a ds-tensor {x.shape}; train blocks "
          f"{x_train.block_sizes}, test blocks {x_test.block_sizes}")

    torch.manual_seed(seed)
    init = DigitsCNN()
    startup = start_up(dnn.SyncEpochAveragingClassifier, init, X[:64],
                       y[:64], args.workers)
    curves, times, fitted = {}, {}, {}
    for name, (estimator, params) in STRATEGIES.items():
        clf = estimator(module=init, optimizer=torch.optim.Adam, lr=lr,
                        n_epochs=epochs, batch_size=batch_size,
                        n_workers=args.workers, random_state=seed,
                        validation_data=(x_test, t_test), verbose=1,
                        checkpoint_dir=checkpoints(args.checkpoint_dir,
                                                   name), **params)
        print(f"--- {name}")
        start = time.perf_counter()
        clf.fit(x_train, t_train, resume=args.checkpoint_dir is not None)
        times[name] = time.perf_counter() - start
        curves[name] = [r["valid_score"] for r in clf.history_]
        fitted[name] = clf

    # The reference sees the same rows, collected to the master.
    X_tr, X_te = x_train.collect().numpy(), x_test.collect().numpy()
    y_tr, y_te = t_train.collect().numpy(), t_test.collect().numpy()
    # One torch thread, as each worker of dislib_nn uses: on a loaded
    # machine two threads in one process can be ten times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.perf_counter()
    curves["plain PyTorch"] = plain_pytorch(init, X_tr, y_tr, X_te, y_te,
                                            epochs, batch_size, lr, seed)
    times["plain PyTorch"] = time.perf_counter() - start
    torch.set_num_threads(threads)

    print(f"\n{'':<24}{'test accuracy':>14}{'fit time':>10}")
    for name, scores in curves.items():
        print(f"{name:<24}{scores[-1]:>14.4f}{times[name]:>9.1f}s")
    print(f"(fit times leave out the start-up: {startup:.1f}s)")
    plot(curves, fitted, os.path.join(out, "classification_cnn.png"))
    return curves


def start_up(estimator, init, X, y, workers):
    """Start the workers before any fit is timed: a one-epoch fit on a
    few rows starts the worker pool, and makes each worker import what
    torch needs at its first optimizer step (seconds, once per process),
    which would otherwise count in the first strategy's fit time."""
    start = time.perf_counter()
    estimator(module=init, n_epochs=1, n_workers=workers).fit(X, y)
    elapsed = time.perf_counter() - start
    print(f"start-up (worker pool, first-use imports): {elapsed:.1f}s, "
          f"not in the fit times")
    return elapsed


def checkpoints(folder, name):
    """The checkpoint folder of strategy ``name`` under ``folder``."""
    if folder is None:
        return None
    return os.path.join(folder, re.sub(r"[^a-z0-9]+", "-", name.lower()))


def output_folder(out):
    """``--out``, or a folder in the system's temporary one; created."""
    folder = out or os.path.join(tempfile.gettempdir(), "dislib_nn_examples")
    os.makedirs(folder, exist_ok=True)
    return folder


def plot(curves, fitted, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: matplotlib is not installed; pip install "
              "matplotlib, or pip install -e \".[plot]\" in a checkout)")
        return
    fig, (ax, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, scores in curves.items():
        ax.plot(range(1, len(scores) + 1), scores, "-o", markersize=3,
                label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy")
    ax.set_title("CNN on digits: epoch averaging and plain PyTorch")
    ax.legend()
    name, clf = next(iter(fitted.items()))
    dnn.plot_history(clf, ax=right)     # losses and score of one of them
    right.set_title(f"history_ of {name}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
