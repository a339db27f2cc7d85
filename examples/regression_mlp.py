"""Regression with the paper's MLP, MSE and Adam, beside plain PyTorch.

The regression case of the paper: an MLP with hidden layers of
128-256-512-256-128 units and a sigmoid output, trained with the mean
squared error and Adam at 2e-4 for 32 epochs. The paper's data set
(earthquake ground motion, 8 inputs) is not public; Friedman's
regression problem #1 on 8 inputs (scikit-learn's ``make_friedman1``,
3000 rows, targets scaled to [0, 1] for the sigmoid) stands in. Each
strategy and a plain single-process PyTorch loop (one thread) train from
the same initial weights; the test R² after every epoch is printed and
plotted (``regression_mlp.png``, when matplotlib is installed) in the
folder ``--out`` (created if missing; by default ``dislib_nn_examples``
in the system's temporary folder, so that a run from a checkout leaves
nothing in it).

    python examples/regression_mlp.py            # about 85 s on 2 cores
    python examples/regression_mlp.py --tiny     # a smoke run

``--tiny`` (or ``DISLIB_NN_EXAMPLE_TINY=1``) trains for 8 epochs: enough
for the test suite to compare each strategy's R² with plain PyTorch's
(after 2 epochs the replicas, each with half the steps, are far behind).
"""

import argparse
import copy
import os
import tempfile
import time

import numpy as np
import torch
from torch import nn

import dislib_nn as dnn


class PaperMLP(nn.Module):
    """n_features_in -> 128-256-512-256-128 -> 1, sigmoid output."""

    def __init__(self, n_features_in=10, widths=(128, 256, 512, 256, 128)):
        super().__init__()
        layers, width = [], n_features_in
        for out in widths:
            layers += [nn.Linear(width, out), nn.ReLU()]
            width = out
        layers += [nn.Linear(width, 1), nn.Sigmoid()]
        self.body = nn.Sequential(*layers)

    def forward(self, x):
        return self.body(x)


# The contenders: a name, an estimator class and its own parameters.
# Each strategy of dislib_nn is one line here.
STRATEGIES = {
    "sync": (dnn.SyncEpochAveragingRegressor, {}),
    "async": (dnn.AsyncEpochAveragingRegressor, {}),
}


def r2(pred, target):
    return float(1 - ((pred - target) ** 2).sum()
                 / ((target - target.mean()) ** 2).sum())


def plain_pytorch(init, X, y, X_test, y_test, epochs, batch_size, lr, seed):
    """One process; test R² after every epoch."""
    model = copy.deepcopy(init)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    x, t = torch.from_numpy(X), torch.from_numpy(y)
    generator = torch.Generator().manual_seed(seed)
    scores = []
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad()
            nn.functional.mse_loss(model(x[idx])[:, 0], t[idx]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(torch.from_numpy(X_test))[:, 0].numpy()
        scores.append(r2(pred, y_test))
    return scores


def load(seed, n_samples):
    """Friedman's regression problem #1 on 8 inputs, as the paper's MLP.

    y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + noise; the
    other three inputs are noise. Targets are scaled to [0, 1].
    """
    from sklearn.datasets import make_friedman1
    from sklearn.model_selection import train_test_split
    X, y = make_friedman1(n_samples=n_samples, n_features=8, noise=1.0,
                          random_state=seed)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.25, random_state=seed)
    mean, std = X_train.mean(0), X_train.std(0)
    low, high = y_train.min(), y_train.max()
    return [((X_train - mean) / std).astype(np.float32),
            ((X_test - mean) / std).astype(np.float32),
            ((y_train - low) / (high - low)).astype(np.float32),
            ((y_test - low) / (high - low)).astype(np.float32)]


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
    args = parser.parse_args(argv)
    out = output_folder(args.out)
    # The paper's settings: Adam at 2e-4, 32 epochs (batch size 64 here).
    epochs = args.epochs or (8 if args.tiny else 32)
    lr, batch_size, seed = 2e-4, 64, 0

    X_train, X_test, y_train, y_test = load(seed, 3000)
    torch.manual_seed(seed)
    init = PaperMLP(X_train.shape[1])
    startup = start_up(dnn.SyncEpochAveragingRegressor, init,
                       X_train[:128], y_train[:128], args.workers)
    curves, times, fitted = {}, {}, {}
    for name, (estimator, params) in STRATEGIES.items():
        reg = estimator(module=init, optimizer=torch.optim.Adam, lr=lr,
                        n_epochs=epochs, batch_size=batch_size,
                        n_workers=args.workers, random_state=seed,
                        validation_data=(X_test, y_test), verbose=1,
                        **params)
        print(f"--- {name}")
        start = time.perf_counter()
        reg.fit(X_train, y_train)
        times[name] = time.perf_counter() - start
        curves[name] = [r["valid_score"] for r in reg.history_]
        fitted[name] = reg
    # One torch thread, as each worker of dislib_nn uses: on a loaded
    # machine two threads in one process can be ten times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.perf_counter()
    curves["plain PyTorch"] = plain_pytorch(
        init, X_train, y_train, X_test, y_test, epochs, batch_size, lr, seed)
    times["plain PyTorch"] = time.perf_counter() - start
    torch.set_num_threads(threads)

    print(f"\n{'':<16}{'test R2':>10}{'fit time':>10}")
    for name, scores in curves.items():
        print(f"{name:<16}{scores[-1]:>10.4f}{times[name]:>9.1f}s")
    print(f"(fit times leave out the start-up: {startup:.1f}s)")
    plot(curves, fitted, X_test, y_test,
         os.path.join(out, "regression_mlp.png"))
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


def output_folder(out):
    """``--out``, or a folder in the system's temporary one; created."""
    folder = out or os.path.join(tempfile.gettempdir(), "dislib_nn_examples")
    os.makedirs(folder, exist_ok=True)
    return folder


def plot(curves, fitted, X_test, y_test, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: matplotlib is not installed; pip install "
              "matplotlib, or pip install -e \".[plot]\" in a checkout)")
        return
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4))
    for name, scores in curves.items():
        left.plot(range(1, len(scores) + 1), scores, "-", label=name)
    left.set_xlabel("epoch")
    left.set_ylabel("test R²")
    left.set_ylim(bottom=max(-1.0, left.get_ylim()[0]))
    left.legend()
    name, reg = next(iter(fitted.items()))
    dnn.plot_history(reg, ax=middle)
    middle.set_title(f"history_ of {name}")
    right.scatter(y_test, reg.predict(X_test), s=8)
    right.plot([0, 1], [0, 1], "k--", linewidth=1)
    right.set_xlabel("target (scaled)")
    right.set_ylabel(f"prediction ({name})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
