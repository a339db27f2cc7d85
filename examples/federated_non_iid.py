"""Federated training on non-IID clients: accuracy against label skew.

Each of 4 clients keeps its own rows for the whole run (``shuffle=
"none"``: data never leaves its owner, only weights travel). The
clients' rows are drawn by :func:`dislib_nn.partition` from scikit-
learn's digits with Dirichlet label skew: the smaller ``alpha``, the
fewer classes each client sees. For several alphas, and for IID clients,
each strategy trains the same MLP from the same initial weights; the
test accuracy per alpha is printed and plotted (``federated_non_iid.png``,
when matplotlib is installed) with the clients' label mix at the
smallest alpha, in the folder ``--out`` (created if missing; by default
``dislib_nn_examples`` in the system's temporary folder, so that a run
from a checkout leaves nothing in it). A plain single-process PyTorch
loop trained on all the clients' rows together, with the same
optimizer, epochs and batch size, is printed beside them: the accuracy
that IID clients should reach. Under each row, ``ran:`` says what the
fit ran: the merge schedule and learning-rate factor its ``"auto"``
defaults resolved to (``history_[i]["schedule"]``), the asynchronous
strategy's ``max_lag`` among them (with 4 clients of few steps the
defaults pick ``max_lag=0``, merges in a fixed order, so that row
trains much as ``sync`` does), and the row's own parameters.

    python examples/federated_non_iid.py            # about 80 s on 2 cores
    python examples/federated_non_iid.py --tiny     # a smoke run

``--tiny`` (or ``DISLIB_NN_EXAMPLE_TINY=1``) trains for 4 epochs on two
alphas.
"""

import argparse
import copy
import os
import tempfile

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
    parser.add_argument("--out", default=None,
                        help="folder for the plot, created if missing "
                             "(default: dislib_nn_examples in the "
                             "system's temporary folder)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args(argv)
    out = output_folder(args.out)
    epochs = args.epochs or (4 if args.tiny else 15)
    lr, batch_size = 3e-3, 32
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
                            lr=lr, n_epochs=epochs, batch_size=batch_size,
                            n_workers=args.clients, shuffle="none",
                            random_state=seed, **params)
            clf.fit(x_clients, t_clients)
            results[name, alpha] = clf.score(X_test, y_test)
            label = "IID" if alpha is None else f"alpha={alpha}"
            print(f"{label:<12} {name:<26} rows per client "
                  f"{t_clients.block_sizes}  classes per client "
                  f"{[int((m > 0).sum()) for m in mixes[alpha]]}  test "
                  f"accuracy {results[name, alpha]:.4f}", flush=True)
            print(f"{'':<12} ran: {ran(clf, params)}", flush=True)
    # One torch thread, as each worker of dislib_nn uses.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    results["plain PyTorch", None] = plain_pytorch(
        init, X_train, y_train, X_test, y_test, epochs, batch_size, lr, seed)
    torch.set_num_threads(threads)
    print(f"{'all rows':<12} {'plain PyTorch, one process':<26} rows "
          f"{len(y_train)}  test accuracy "
          f"{results['plain PyTorch', None]:.4f}", flush=True)
    plot(results, mixes, alphas, os.path.join(out, "federated_non_iid.png"))
    return results


def ran(clf, params):
    """What a fit really ran: the schedule its "auto" defaults resolved
    to (history_ records it), and the strategy's own parameters."""
    schedule = dict(clf.history_[-1]["schedule"])
    parts = [f"sync_every={schedule.pop('sync_every')}",
             f"lr x{schedule.pop('lr_factor'):g}"]
    adapted = schedule.pop("adapted")
    steps = schedule.pop("steps")
    schedule.pop("warmup")
    parts += [f"{key}={value!r}" for key, value in schedule.items()]
    parts += [f"{key}={value!r}" for key, value in params.items()]
    why = (f"the 'auto' defaults adapted to {steps} steps per client "
           f"and epoch" if adapted else f"{steps} steps per client and "
           f"epoch")
    return f"{', '.join(parts)} ({why})"


def plain_pytorch(init, X, y, X_test, y_test, epochs, batch_size, lr, seed):
    """One process on all the rows, reshuffled every epoch; test accuracy."""
    model = copy.deepcopy(init)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    x, t = torch.from_numpy(X), torch.from_numpy(y)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad()
            loss_fn(model(x[idx]), t[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(X_test)).argmax(1).numpy()
    return float((pred == y_test).mean())


def output_folder(out):
    """``--out``, or a folder in the system's temporary one; created."""
    folder = out or os.path.join(tempfile.gettempdir(), "dislib_nn_examples")
    os.makedirs(folder, exist_ok=True)
    return folder


def plot(results, mixes, alphas, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: matplotlib is not installed; pip install "
              "matplotlib, or pip install -e \".[plot]\" in a checkout)")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for k, name in enumerate(STRATEGIES):
        color = f"C{k}"
        left.plot(alphas, [results[name, a] for a in alphas], "-o",
                  color=color, label=f"{name}, Dirichlet alpha")
        left.axhline(results[name, None], color=color, linestyle="--",
                     label=f"{name}, IID")
    left.axhline(results["plain PyTorch", None], color="k", linestyle=":",
                 label="plain PyTorch, all rows in one process")
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
