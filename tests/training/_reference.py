"""Plain single-process PyTorch: what the estimators are compared with.

Written independently of dislib_nn's code: ordinary minibatch loops, and
epoch averaging done by hand on state dicts.
"""

import copy

import numpy as np
import torch


def train(model, optimizer, criterion, x, y, batch_size, lr):
    for group in optimizer.param_groups:
        group["lr"] = lr
    model.train()
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()


def single_process(module, x, y, criterion, epochs, batch_size, lr,
                   optimizer=torch.optim.SGD, lrs=None, **opt_kwargs):
    """Plain PyTorch training on all the data, rows in order."""
    model = copy.deepcopy(module)
    opt = optimizer(model.parameters(), lr=lr, **opt_kwargs)
    for epoch in range(epochs):
        train(model, opt, criterion, x, y, batch_size,
              lr if lrs is None else lrs[epoch])
    return model


def average(states, weights):
    out = {}
    total = float(sum(weights))
    for key in states[0]:
        values = [s[key] for s in states]
        if values[0].is_floating_point():
            out[key] = sum(w * v for w, v in zip(weights, values)) / total
        else:
            out[key] = torch.stack(values).max(dim=0).values
    return out


def epoch_averaging(module, parts, criterion, epochs, batch_size, lr,
                    optimizer=torch.optim.SGD, optimizer_state="keep",
                    sync_every=1, outer_lr=1.0, outer_momentum=0.0,
                    lrs=None, merge_delay=0, **opt_kwargs):
    """Replicas trained on fixed parts, averaged by hand.

    ``parts`` is a list of (x, y) per worker; rows in order. With
    ``merge_delay=1`` a replica goes on from its own weights after a
    merge, and at the merge after that adds (that merge - its weights at
    that merge); the last merge of the fit is applied at once.
    """
    pending = None
    global_model = copy.deepcopy(module)
    replicas = [copy.deepcopy(module) for _ in parts]
    opts = [optimizer(r.parameters(), lr=lr, **opt_kwargs)
            for r in replicas]
    weights = [len(x) for x, _ in parts]
    velocity = None
    param_names = [n for n, _ in module.named_parameters()]
    for epoch in range(epochs):
        for i, (r, (x, y)) in enumerate(zip(replicas, parts)):
            if optimizer_state == "reset":
                opts[i] = optimizer(r.parameters(), lr=lr, **opt_kwargs)
            train(r, opts[i], criterion, x, y, batch_size,
                  lr if lrs is None else lrs[epoch])
        if (epoch + 1) % sync_every and epoch != epochs - 1:
            continue
        avg = average([r.state_dict() for r in replicas], weights)
        previous = global_model.state_dict()
        if outer_lr != 1.0 or outer_momentum != 0.0:
            new_velocity = {}
            for name in param_names:
                delta = avg[name] - previous[name]
                v = delta if velocity is None else \
                    outer_momentum * velocity[name] + delta
                avg[name] = previous[name] + outer_lr * v
                new_velocity[name] = v
            velocity = new_velocity
        global_model.load_state_dict(avg)
        if merge_delay and epoch != epochs - 1:
            own = [copy.deepcopy(r.state_dict()) for r in replicas]
            if pending is not None:
                merged_before, own_before = pending
                for r, mine, before in zip(replicas, own, own_before):
                    r.load_state_dict({
                        k: v + merged_before[k] - before[k]
                        if v.is_floating_point() else v
                        for k, v in mine.items()})
            pending = (copy.deepcopy(avg), own)
            continue
        if optimizer_state == "average":
            opt_avg = _average_optimizers(opts, weights)
        for i, r in enumerate(replicas):
            r.load_state_dict(avg)
            if optimizer_state == "average":
                opts[i].load_state_dict(copy.deepcopy(opt_avg))
    return global_model


def outer_step(optimizer, params, names, merged):
    """An outer optimizer's step on the merged state, by hand: each of
    ``params`` (the global model's, in ``names`` order) takes the
    gradient ``param - merged[name]``; ``merged`` then holds the
    stepped parameters (in place)."""
    for name, param in zip(names, params):
        param.grad = param.detach() - merged[name]
    optimizer.step()
    for name, param in zip(names, params):
        merged[name] = param.detach().clone()


def _average_optimizers(opts, weights):
    dicts = [o.state_dict() for o in opts]
    out = copy.deepcopy(dicts[0])
    for index in out["state"]:
        for name in out["state"][index]:
            values = [d["state"][index][name] for d in dicts]
            out["state"][index][name] = average(
                [{"v": v} for v in values], weights)["v"]
    return out


def split_like_blocks(x, y, n):
    """np.array_split's split: the first blocks get the extra rows."""
    sizes = [len(p) for p in np.array_split(np.arange(len(x)), n)]
    bounds = np.cumsum([0] + sizes)
    return [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def assert_same_model(model, expected, atol, rtol):
    """Same state dict entries, equal to ``atol`` / ``rtol``."""
    got, want = model.state_dict(), expected.state_dict()
    assert list(got) == list(want)
    for key in got:
        torch.testing.assert_close(got[key], want[key], atol=atol,
                                   rtol=rtol, msg=key)


def regression_rows(n, features=4):
    """``n`` rows of a noisy linear regression, float32, targets / 100."""
    from sklearn.datasets import make_regression
    X, y = make_regression(n_samples=n, n_features=features, noise=1.0,
                           random_state=0)
    return X.astype(np.float32), (y / 100).astype(np.float32)


def small_mlp():
    """The 4-8-1 MLP of the exact tests, seeded."""
    from tests.training import _models
    torch.manual_seed(0)
    return _models.MLP(n_features_in=4, n_outputs=1, hidden=8)
