"""Demo: a CNN on scikit-learn's digits, data-parallel, beside plain PyTorch.

Run it with ``python -m dislib_nn.demo``. It trains a small CNN with
BatchNorm on the 8x8 digits with :class:`SyncEpochAveragingClassifier`
on the local backend (one progress line per epoch), then the same
module from the same initial weights with a plain single-process
PyTorch loop with the same optimizer, epochs and batch size (with
torch's default number of threads, and with one), and prints the test
accuracies and times.
"""

import argparse
import copy
import os
import platform
import time

import numpy as np
import torch
from torch import nn


class DigitsCNN(nn.Module):
    """Two conv blocks with BatchNorm, then a linear layer."""

    def __init__(self, n_classes=10, channels=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels),
            nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.BatchNorm2d(2 * channels), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(2 * channels * 4, n_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def load(seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    return train_test_split(X, y, test_size=0.25, stratify=y,
                            random_state=seed)


def plain_pytorch(module, X, y, epochs, batch_size, lr, seed):
    """The reference: one process, rows reshuffled every epoch."""
    model = copy.deepcopy(module)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    x, t = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad()
            loss_fn(model(x[idx]), t[idx]).backward()
            opt.step()
    return model.eval()


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m dislib_nn.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from dislib_nn import SyncEpochAveragingClassifier, runtime

    X_train, X_test, y_train, y_test = load(args.seed)
    torch.manual_seed(args.seed)
    init = DigitsCNN()
    print(f"digits: {len(X_train)} training and {len(X_test)} test images "
          f"of 8x8; {platform.machine()}, {os.cpu_count()} CPUs, torch "
          f"{torch.__version__}")
    print(f"starting the {runtime.backend_name()} backend with "
          f"{args.workers} workers and warming up...", flush=True)
    clf = SyncEpochAveragingClassifier(
        module=init, optimizer=torch.optim.Adam, lr=args.lr,
        n_epochs=args.epochs, batch_size=args.batch_size,
        n_workers=args.workers, random_state=args.seed, verbose=1)
    # Start-up is not timed: the pool, and torch's first-use imports
    # (about 2 s in every process that builds its first optimizer).
    clf.set_params(n_epochs=1, verbose=0).fit(X_train[:64], y_train[:64])
    clf.set_params(n_epochs=args.epochs, verbose=1)
    plain_pytorch(init, X_train[:64], y_train[:64], 1, args.batch_size,
                  args.lr, args.seed)
    start = time.perf_counter()
    clf.fit(X_train, y_train)
    ours_time = time.perf_counter() - start
    ours = clf.score(X_test, y_test)

    references = []
    threads = torch.get_num_threads()
    for n_threads in sorted({threads, 1}, reverse=True):
        torch.set_num_threads(n_threads)
        start = time.perf_counter()
        reference = plain_pytorch(init, X_train, y_train, args.epochs,
                                  args.batch_size, args.lr, args.seed)
        elapsed = time.perf_counter() - start
        with torch.no_grad():
            pred = reference(torch.from_numpy(X_test)).argmax(1).numpy()
        references.append((n_threads, float((pred == y_test).mean()),
                           elapsed))
    torch.set_num_threads(threads)

    print()
    ours_label = f"dislib_nn, {clf.n_workers_} workers, epoch averaging"
    width = max(len(ours_label), 40) + 2
    print(f"{'':<{width}}{'test accuracy':>14}{'time':>9}")
    print(f"{ours_label:<{width}}{ours:>14.4f}{ours_time:>8.2f}s")
    for n_threads, accuracy, elapsed in references:
        plain = (f"plain PyTorch, 1 process, {n_threads} thread"
                 f"{'s' if n_threads > 1 else ''}")
        print(f"{plain:<{width}}{accuracy:>14.4f}{elapsed:>8.2f}s")
    print(f"(same module and initial weights, Adam lr {args.lr}, "
          f"{args.epochs} epochs, batch size {args.batch_size}; start-up "
          f"not timed)")
    print(threads_note(references, clf.n_workers_))
    return ours, references[0][1]


def threads_note(references, n_workers):
    """What the plain PyTorch rows measure: ``references`` holds
    ``(threads, accuracy, seconds)`` per row, most threads first."""
    note = (f"(each of dislib_nn's {n_workers} workers trains with 1 torch "
            f"thread: the 1-thread row is the like-for-like one")
    if len(references) < 2:
        return note + ")"
    (many, _, many_s), (_, _, one_s) = references[0], references[-1]
    if many_s > 1.5 * one_s:
        return note + (
            f"; {many} threads took {many_s / one_s:.1f}x the time of 1: "
            f"they contended for the {os.cpu_count()} CPUs, with each other "
            f"or with other processes, so that row measures the contention, "
            f"not a speed-up of dislib_nn)")
    return note + f"; the {many}-thread row uses the same CPUs at once)"


if __name__ == "__main__":
    main()
