"""Modules the training tests use (module level: workers import them)."""

import fcntl
import os
import signal
import time
import typing

import torch
from torch import nn

# The accuracy tests train the demo's CNN (BatchNorm in both conv blocks).
from dislib_nn.demo import DigitsCNN  # noqa: F401

#: How long ``FaultOnCalls(fault="hang")`` sleeps: only bounds a test.
HANG_S = 120


class MLP(nn.Module):
    """Linear - ReLU - Linear; takes the sizes fit infers."""

    def __init__(self, n_features_in=4, n_outputs=1, hidden=8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_features_in, hidden), nn.ReLU(),
                                  nn.Linear(hidden, n_outputs))

    def forward(self, x):
        return self.body(x)


class Classifier(nn.Module):
    """A small classifier with BatchNorm and a bias-free layer."""

    def __init__(self, n_features_in=4, n_classes=3, hidden=16,
                 batch_norm=True):
        super().__init__()
        self.hidden = nn.Linear(n_features_in, hidden, bias=False)
        self.norm = nn.BatchNorm1d(hidden) if batch_norm else nn.Identity()
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.out(torch.relu(self.norm(self.hidden(x))))


class Broken(nn.Module):
    """A module whose forward raises."""

    def __init__(self, n_features_in=4, n_classes=3):
        super().__init__()
        self.fc = nn.Linear(n_features_in, n_classes)

    def forward(self, x):
        raise ValueError("forward exploded on purpose")


class TiedScaled(nn.Module):
    """Two square layers sharing one weight (tied), with a non-persistent
    buffer (a fixed input scale the state dict does not hold) and a
    persistent one."""

    def __init__(self, n_features_in=4, scale=1.0):
        super().__init__()
        self.down = nn.Linear(n_features_in, n_features_in)
        self.up = nn.Linear(n_features_in, n_features_in)
        self.up.weight = self.down.weight
        self.head = nn.Linear(n_features_in, 1)
        self.register_buffer("scale", torch.full((n_features_in,), scale),
                             persistent=False)
        self.register_buffer("shift", torch.zeros(n_features_in))

    def forward(self, x):
        h = torch.relu(self.down(x * self.scale + self.shift))
        return self.head(torch.relu(self.up(h)))


class WithDropout(nn.Module):
    def __init__(self, n_features_in=4, n_outputs=1):
        super().__init__()
        self.fc = nn.Linear(n_features_in, n_outputs)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.fc(self.drop(x))


class Lazy(nn.Module):
    """Lazy layers: shaped by a forward pass at fit."""

    def __init__(self, n_outputs=1):
        super().__init__()
        self.fc = nn.LazyLinear(n_outputs)

    def forward(self, x):
        return self.fc(x)


class TokenBag(nn.Module):
    """Embeddings of integer token ids, averaged over a row, then a
    linear layer: takes int64 inputs only."""

    def __init__(self, n_tokens=40, dim=6, n_outputs=2):
        super().__init__()
        self.emb = nn.Embedding(n_tokens, dim)
        self.out = nn.Linear(dim, n_outputs)

    def forward(self, x):
        return self.out(self.emb(x).mean(dim=1))


class Parity(nn.Module):
    """Reads the parity of an exact integer id (the first column): a
    float32 copy of ids above 2**24 loses it."""

    def __init__(self, n_outputs=2):
        super().__init__()
        self.out = nn.Linear(2, n_outputs)

    def forward(self, x):
        parity = nn.functional.one_hot(x[:, 0] % 2, 2).to(torch.float32)
        return self.out(parity)


class Flags(nn.Module):
    """A linear layer over boolean inputs, which it checks are bool."""

    def __init__(self, n_features_in=4, n_outputs=2):
        super().__init__()
        self.out = nn.Linear(n_features_in, n_outputs)

    def forward(self, x):
        if x.dtype != torch.bool:
            raise TypeError(f"Flags takes bool inputs, got {x.dtype}")
        return self.out(x.to(torch.float32))


class SlowOddReplica(nn.Module):
    """A test hook: an MLP whose forward sleeps in every other task.

    The master builds the module once (the initial weights), then every
    training task builds its own. On the sequential backend tasks run in
    the order they are submitted, epoch by epoch, worker 0 first, so with
    two workers and no validation the n-th build after the first
    belongs to worker ``(n - 1) % 2``: worker 1's forward sleeps
    ``delay`` seconds per batch, as on a slower node.

    With ``bias`` given, the layer starts from weights 0 and that bias,
    so that a test knows the initial model.
    """

    builds = 0

    def __init__(self, n_features_in=4, n_outputs=1, delay=0.002,
                 bias=None):
        super().__init__()
        type(self).builds += 1
        self.slow = type(self).builds > 1 and type(self).builds % 2 == 1
        self.delay = delay
        self.body = nn.Linear(n_features_in, n_outputs)
        if bias is not None:
            with torch.no_grad():
                self.body.weight.zero_()
                self.body.bias.fill_(bias)

    def forward(self, x):
        if self.slow and self.training:
            import time
            time.sleep(self.delay)
        return self.body(x)


def _next_call(counter):
    """Count one training forward in the file ``counter``; its number.

    The lock makes append-then-size one step. Without it (a buffered
    ``tell()`` counts from the size seen at open), two workers opening
    the file at once got the same number, and the fault meant for one
    call number could be skipped (a flaky "DID NOT RAISE" in CI).
    """
    with open(counter, "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(b".")
        f.flush()
        return os.fstat(f.fileno()).st_size


class NaNOnCalls(nn.Module):
    """An MLP whose training forward returns NaN on chosen calls.

    Calls are counted across processes in the file ``counter`` (one byte
    per training forward): calls ``first`` to ``last`` (1-based) diverge.
    """

    def __init__(self, n_features_in=4, n_outputs=1, counter="", first=0,
                 last=0):
        super().__init__()
        self.fc = nn.Linear(n_features_in, n_outputs)
        self.counter, self.first, self.last = counter, first, last

    def forward(self, x):
        out = self.fc(x)
        if self.training and self.counter:
            if self.first <= _next_call(self.counter) <= self.last:
                return out * float("nan")
        return out


class FaultOnCalls(nn.Module):
    """A linear model whose training forward fails on chosen calls.

    Calls are counted as in :class:`NaNOnCalls`. On calls ``first`` to
    ``last`` it raises ``RuntimeError`` (``fault="raise"``), kills its
    own process with SIGKILL (``fault="kill"``: local backend only) or
    hangs (``fault="hang"``: sleeps for minutes, which only a time-out
    ends sooner).
    """

    def __init__(self, n_features_in=4, n_outputs=1, counter="", first=0,
                 last=0, fault="raise"):
        super().__init__()
        self.fc = nn.Linear(n_features_in, n_outputs)
        self.counter, self.first, self.last = counter, first, last
        self.fault = fault

    def forward(self, x):
        if self.training and self.counter:
            call = _next_call(self.counter)
            if self.first <= call <= self.last:
                if self.fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if self.fault == "hang":
                    time.sleep(HANG_S)
                    return self.fc(x)
                raise RuntimeError(f"injected fault on call {call}")
        return self.fc(x)


class TwoHeads(nn.Module):
    """Class scores and an auxiliary head, returned as a tuple, a dict
    (auxiliary first, so that its first value is not the scores) or a
    named tuple."""

    def __init__(self, n_features_in=4, n_classes=3, returns="tuple"):
        super().__init__()
        self.returns = returns
        self.body = nn.Linear(n_features_in, 8)
        self.logits = nn.Linear(8, n_classes)
        self.aux = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.body(x))
        logits, aux = self.logits(h), self.aux(h)
        if self.returns == "dict":
            return {"aux": aux, "logits": logits}
        if self.returns == "named":
            return Heads(aux, logits)
        return logits, aux


class Heads(typing.NamedTuple):
    aux: torch.Tensor
    logits: torch.Tensor


class HeadsLoss(nn.Module):
    """Cross-entropy on the scores plus a penalty on the auxiliary head:
    a criterion of all a :class:`TwoHeads` returns."""

    def forward(self, output, y):
        return (nn.functional.cross_entropy(output["logits"], y)
                + 0.1 * output["aux"].pow(2).mean())


class NumAndIds(nn.Module):
    """Numeric features and category ids, two inputs by keyword (or by
    position); the ids go through an embedding."""

    def __init__(self, n_num=4, n_ids=10, n_classes=2):
        super().__init__()
        self.emb = nn.Embedding(n_ids, 3)
        self.lin = nn.Linear(n_num + 3, n_classes)

    def forward(self, x_num, x_cat):
        return self.lin(torch.cat([x_num, self.emb(x_cat)], dim=1))


class Columns(nn.Module):
    """``inner`` (a :class:`NumAndIds`) on one float X whose last column
    holds the ids: the one-input twin of a fit on two inputs."""

    def __init__(self, inner, n_num=4):
        super().__init__()
        self.inner = inner
        self.n_num = n_num

    def forward(self, x):
        return self.inner(x[:, :self.n_num].float(),
                          x[:, self.n_num].long())
