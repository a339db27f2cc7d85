"""Federated training on non-IID clients: accuracy against label skew.

Each of 4 clients keeps its own rows for the whole run (``shuffle=
"none"``: data never leaves its owner, only weights travel). The
clients' rows are drawn by :func:`dislib_nn.partition` from scikit-
learn's digits with Dirichlet label skew: the smaller ``alpha``, the
fewer classes each client sees. For several alphas, and for IID clients,
each strategy trains the same MLP from the same initial weights; the
test accuracy per alpha is printed and plotted (``federated_non_iid.png``,
when matplotlib is installed) with the clients' label mix at the
smallest alpha.

    python examples/federated_non_iid.py            # about 80 s on 2 cores
    python examples/federated_non_iid.py --tiny     # a smoke run

``--tiny`` (or ``DISLIB_NN_EXAMPLE_TINY=1``) trains for 2 epochs on two
alphas.
"""

import argparse
import os

import numpy as np
import torch
from torch import nn

import dislib_nn as dnn


class MLP(nn.Module):
    def __init__(self, n_features_in=64, n_classes=10, hidden=128):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_features_in, hidden),
                                  nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.body(x)


# The contenders: a name, an estimator class and its own parameters.
# Each strategy of dislib_nn is one line here.
STRATEGIES = {
    "sync": (dnn.SyncEpochAveragingClassifier, {}),
    "sync, outer momentum 0.5": (dnn.SyncEpochAveragingClassifier,
                                 {"outer_momentum": 0.5}),
    "async": (dnn.AsyncEpochAveragingClassifier, {}),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        default=os.environ.get("DISLIB_NN_EXAMPLE_TINY")
                        == "1")
    parser.add_argument("--out", default=".", help="folder for the plot")
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args(argv)
    epochs = 2 if args.tiny else 15
    alphas = [0.1, 1.0] if args.tiny else [0.05, 0.1, 0.3, 1.0, 10.0]
    seed = 0

    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        (X / 16).astype(np.float32), y, test_size=0.25, stratify=y,
        random_state=seed)
    x, t = dnn.from_array(X_train), dnn.from_array(y_train)
    torch.manual_seed(seed)
    init = MLP()

    results, mixes = {}, {}
    for alpha in [None] + alphas:
        # One block per client; partition moves rows with tasks.
        x_clients, t_clients = dnn.partition(x, t, args.clients,
                                             alpha=alpha, random_state=seed)
        labels = t_clients.collect().numpy()
        bounds = np.cumsum((0,) + t_clients.block_sizes)
        mixes[alpha] = np.array([np.bincount(labels[a:b], minlength=10)
                                 for a, b in zip(bounds[:-1], bounds[1:])])
        for name, (estimator, params) in STRATEGIES.items():
            clf = estimator(module=init, optimizer=torch.optim.Adam,
                            lr=3e-3, n_epochs=epochs, batch_size=32,
                            n_workers=args.clients, shuffle="none",
                            random_state=seed, **params)
            clf.fit(x_clients, t_clients)
            results[name, alpha] = clf.score(X_test, y_test)
            label = "IID" if alpha is None else f"alpha={alpha}"
            print(f"{label:<12} {name:<26} rows per client "
                  f"{t_clients.block_sizes}  classes per client "
                  f"{[int((m > 0).sum()) for m in mixes[alpha]]}  test "
                  f"accuracy {results[name, alpha]:.4f}", flush=True)
    plot(results, mixes, alphas, os.path.join(args.out,
                                              "federated_non_iid.png"))
    return results


def plot(results, mixes, alphas, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: pip install dislib-nn[plot] for matplotlib)")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for k, name in enumerate(STRATEGIES):
        color = f"C{k}"
        left.plot(alphas, [results[name, a] for a in alphas], "-o",
                  color=color, label=f"{name}, Dirichlet alpha")
        left.axhline(results[name, None], color=color, linestyle="--",
                     label=f"{name}, IID")
    left.set_xscale("log")
    left.set_xlabel("alpha (smaller: more label skew)")
    left.set_ylabel("test accuracy")
    left.legend(fontsize="small")
    mix = mixes[alphas[0]]
    bottom = np.zeros(len(mix))
    for c in range(mix.shape[1]):
        right.bar(range(len(mix)), mix[:, c], bottom=bottom, label=str(c))
        bottom += mix[:, c]
    right.set_xlabel("client")
    right.set_ylabel("rows")
    right.set_title(f"label mix per client, alpha={alphas[0]}")
    right.legend(title="class", fontsize="x-small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
