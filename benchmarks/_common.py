"""What the benchmarks share: workloads, contenders and the load monitor.

Every benchmark imports from here (and from ``_machine.py`` for its
header), never from another benchmark, so that each one's workload is
defined once and a benchmark can change its own report freely.

- Workloads: the MLP (issue 4's 128-512-512-10) on ``make_classification``
  data, the small CNN on synthetic images, and :class:`Workload`, the
  recipe (module, optimizer, batch) a contender trains.
- Contenders: :func:`plain_pytorch` (the single-process minibatch loop),
  :func:`large_batch` (what DDP computes with P ranks, in one process),
  the DDP set-up (:func:`ddp_join`, :func:`ddp_rows`, :func:`ddp_train`)
  and the slowed-down MLP of the asynchronous benchmarks.
- :class:`LoadMonitor` and :func:`wait_for_quiet`: the CPU that other
  processes use while a benchmark runs.

The seeds of the library's training tasks come from dislib_nn's own seed
streams (``dislib_nn.training._seeds``), not from a copy of them.

Not a test; never imported by the package.
"""

import copy
import dataclasses
import math
import os
import random
import socket
import threading
import time

import numpy as np
import torch
from torch import nn


# ------------------------------------------------------------ workloads
class MLP(nn.Module):
    """128-512-512-10 by default (issue 4's model)."""

    def __init__(self, n_features=128, hidden=512, n_classes=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_features, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    """Three conv blocks (16-32-64 channels) and a linear head."""

    def __init__(self, n_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(2))
        self.head = nn.Linear(64 * 4, n_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


@dataclasses.dataclass(frozen=True)
class Workload:
    """What a contender trains: a module, an optimizer, a batch size.

    Plain data (classes by reference), so that it travels to the
    processes of the DDP contender.
    """

    module: type
    module_kwargs: dict
    optimizer: type
    optimizer_kwargs: dict          # ``lr`` included
    batch_size: int

    def new_model(self, seed):
        """The module, its weights drawn after ``torch.manual_seed(seed)``."""
        torch.manual_seed(seed)
        return self.module(**self.module_kwargs)

    def new_optimizer(self, model):
        return self.optimizer(model.parameters(), **self.optimizer_kwargs)


def mlp_workload(n_features=128, hidden=512, lr=0.05, momentum=0.9,
                 batch_size=64):
    """The MLP trained by SGD with momentum (issue 4's defaults)."""
    return Workload(MLP, {"n_features": n_features, "hidden": hidden,
                          "n_classes": 10},
                    torch.optim.SGD, {"lr": lr, "momentum": momentum},
                    batch_size)


def cnn_workload():
    """The CNN trained by Adam, lr 1e-3, batch 64."""
    return Workload(CNN, {}, torch.optim.Adam, {"lr": 1e-3}, 64)


def add_mlp_arguments(parser):
    """The MLP workload's command-line options, issue 4's defaults."""
    parser.add_argument("--n-samples", type=int, default=60_000)
    parser.add_argument("--test-size", type=int, default=10_000)
    parser.add_argument("--n-features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--workers", type=int, default=2)


def classification_split(n_samples, n_features, test_size, seed):
    """``make_classification`` (10 classes, 32 informative features, 2
    clusters per class), a stratified split, standardised by the
    training rows: ``X_train, X_test, y_train, y_test``."""
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split
    X, y = make_classification(
        n_samples=n_samples, n_features=n_features, n_informative=32,
        n_redundant=0, n_classes=10, n_clusters_per_class=2,
        random_state=seed)
    X_train, X_test, y_train, y_test = train_test_split(
        X.astype(np.float32), y.astype(np.int64), test_size=test_size,
        random_state=seed, stratify=y)
    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    return (X_train - mean) / std, (X_test - mean) / std, y_train, y_test


def classification_rows(n_train, n_test, seed):
    """The same generator, 128 features, standardised over all rows, the
    first ``n_train`` rows for training: ``X_train, X_test, y_train,
    y_test``."""
    from sklearn.datasets import make_classification
    X, y = make_classification(
        n_samples=n_train + n_test, n_features=128, n_informative=32,
        n_redundant=0, n_classes=10, n_clusters_per_class=2,
        random_state=seed)
    X = ((X - X.mean(0)) / X.std(0)).astype(np.float32)
    y = y.astype(np.int64)
    return X[:n_train], X[n_train:], y[:n_train], y[n_train:]


def pattern_images(n_train, n_test, seed):
    """Synthetic 3x32x32 images shaped like CIFAR/CINIC: each class has
    its own smooth random colour pattern, and each image is its class
    pattern, randomly shifted and scaled, plus noise (accuracy means
    something and is not 100 %): ``X_train, X_test, y_train, y_test``."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    # Smooth class patterns: 4x4 random colours upsampled to 32x32.
    coarse = rng.standard_normal((10, 3, 4, 4)).astype(np.float32)
    patterns = torch.nn.functional.interpolate(
        torch.from_numpy(coarse), size=(32, 32), mode="bicubic",
        align_corners=False).numpy()
    y = rng.integers(0, 10, n)
    X = np.empty((n, 3, 32, 32), dtype=np.float32)
    for i in range(n):
        image = np.roll(patterns[y[i]], rng.integers(-8, 9, 2), axis=(1, 2))
        X[i] = rng.uniform(0.4, 1.2) * image
    X += rng.standard_normal(X.shape).astype(np.float32) * 2.0
    y = y.astype(np.int64)
    return X[:n_train], X[n_train:], y[:n_train], y[n_train:]


def accuracy(model, X, y, chunk=None):
    """Test accuracy of ``model`` on numpy ``X, y`` (eval mode), in
    chunks of ``chunk`` rows when given."""
    model.eval()
    step = chunk or max(len(X), 1)
    with torch.no_grad():
        pred = torch.cat([model(torch.as_tensor(X[i:i + step])).argmax(1)
                          for i in range(0, len(X), step)]).numpy()
    return float((pred == y).mean())


def state_bytes(state):
    """Bytes of a state dict's tensors."""
    return sum(t.numel() * t.element_size() for t in state.values())


# ----------------------------------------------------------- contenders
def train_epoch(model, opt, X, y, order, batch_size, before_step=None):
    """One pass over ``X[order]``; returns (samples, loss sum).

    ``before_step()``, when given, runs before every optimizer step (a
    per-step learning-rate schedule).
    """
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    loss_sum = 0.0
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        if before_step is not None:
            before_step()
        opt.zero_grad()
        loss = loss_fn(model(X[idx]), y[idx])
        loss.backward()
        opt.step()
        loss_sum += loss.item() * len(idx)
    return len(order), loss_sum


def plain_pytorch(model, opt, X_train, y_train, n_epochs, batch_size, seed,
                  warmup_epochs=0, after_epoch=None):
    """The single-process contender: a plain PyTorch minibatch loop.

    Trains ``model`` in place on numpy ``X_train, y_train``, the rows
    reshuffled every epoch by a generator seeded with ``seed``.
    ``warmup_epochs`` ramps every group's rate linearly, step by step,
    from lr / steps to lr over that many epochs. Returns ``(spans,
    results)``: the ``(t0, t1)`` of each epoch's training and what
    ``after_epoch(model)`` returned after it (outside the spans).
    """
    X, y = torch.from_numpy(X_train), torch.from_numpy(y_train)
    generator = torch.Generator().manual_seed(seed)
    base_lrs = [group["lr"] for group in opt.param_groups]
    ramp = warmup_epochs * -(-len(X) // batch_size)
    step = [0]

    def warm_up():
        factor = min(1.0, (step[0] + 1) / ramp)
        for group, lr in zip(opt.param_groups, base_lrs):
            group["lr"] = lr * factor
        step[0] += 1

    spans, results = [], []
    for _ in range(n_epochs):
        t0 = time.perf_counter()
        order = torch.randperm(len(X), generator=generator)
        train_epoch(model, opt, X, y, order, batch_size,
                    warm_up if warmup_epochs else None)
        spans.append((t0, time.perf_counter()))
        if after_epoch is not None:
            results.append(after_epoch(model))
    return spans, results


def large_batch(init, X_train, y_train, n_replicas, scale, batch_size, lr,
                momentum, n_epochs, seed, after_epoch=None):
    """What DDP computes with ``n_replicas`` ranks of ``batch_size`` rows,
    in one process: a copy of ``init`` trained with the global batch,
    the rate scaled by P (``scale="lin"``) or sqrt(P) (``"sqrt"``) after
    one epoch of linear warm-up. Returns :func:`plain_pytorch`'s
    ``results``."""
    model = copy.deepcopy(init)
    factor = n_replicas if scale == "lin" else math.sqrt(n_replicas)
    opt = torch.optim.SGD(model.parameters(), lr=lr * factor,
                          momentum=momentum)
    _, results = plain_pytorch(model, opt, X_train, y_train, n_epochs,
                               batch_size * n_replicas, seed,
                               warmup_epochs=1, after_epoch=after_epoch)
    return results


def free_loopback_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_join(rank, world, port):
    """Join a gloo process group on 127.0.0.1 with one torch thread."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return dist


def ddp_rows(n, rank, world, seed, epoch):
    """The rows of ``rank`` for one epoch, by DistributedSampler's scheme:
    the same global permutation on every rank, each rank takes every
    world-th index; equal counts per rank."""
    per_rank = -(-n // world)
    gen = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(n, generator=gen)
    order = torch.cat([order, order[:per_rank * world - n]])
    return order[rank::world]


def ddp_train(rank, world, port, workload, data, n_epochs, seed, queue,
              evaluate_every_epoch=False, eval_chunk=None):
    """The DDP contender's rank (``torch.multiprocessing.spawn``'s target).

    DistributedDataParallel over gloo, gradients all-reduced after every
    batch of ``workload.batch_size`` rows per rank. Rank 0 puts on
    ``queue`` the epochs' ``spans`` (between barriers), ``startup_s``,
    the test accuracy after every epoch (``epoch_acc``, when
    ``evaluate_every_epoch``, outside the spans) and at the end
    (``acc``; :func:`accuracy` with ``eval_chunk``), the gradient's bytes
    and the all-reduces of an epoch.
    """
    from torch.nn.parallel import DistributedDataParallel
    t0 = time.perf_counter()
    dist = ddp_join(rank, world, port)
    X_train, X_test, y_train, y_test = data
    X, y = torch.from_numpy(X_train), torch.from_numpy(y_train)
    model = DistributedDataParallel(workload.new_model(seed))
    opt = workload.new_optimizer(model)
    batch = workload.batch_size
    dist.barrier()
    startup = time.perf_counter() - t0
    spans, epoch_acc, steps = [], [], 0
    for epoch in range(n_epochs):
        dist.barrier()
        t0 = time.perf_counter()
        mine = ddp_rows(len(X), rank, world, seed, epoch)
        train_epoch(model, opt, X, y, mine, batch)
        dist.barrier()
        spans.append((t0, time.perf_counter()))
        steps = -(-len(mine) // batch)
        if rank == 0 and evaluate_every_epoch:
            epoch_acc.append(accuracy(model.module, X_test, y_test,
                                      eval_chunk))
    if rank == 0:
        grad_bytes = sum(p.numel() * p.element_size()
                         for p in model.module.parameters()
                         if p.requires_grad)
        queue.put({"spans": spans, "startup_s": startup,
                   "epoch_acc": epoch_acc,
                   "acc": accuracy(model.module, X_test, y_test,
                                   eval_chunk),
                   "grad_bytes": grad_bytes, "steps": steps})
    dist.destroy_process_group()


def run_ddp(workload, data, n_workers, n_epochs, seed,
            evaluate_every_epoch=False, eval_chunk=None):
    """Spawn :func:`ddp_train` on ``n_workers`` processes; rank 0's
    report, with ``spawn_s``, the wall time of the whole run."""
    import torch.multiprocessing as mp
    queue = mp.get_context("spawn").SimpleQueue()
    t0 = time.perf_counter()
    mp.spawn(ddp_train, nprocs=n_workers, join=True,
             args=(n_workers, free_loopback_port(), workload, data,
                   n_epochs, seed, queue, evaluate_every_epoch, eval_chunk))
    result = queue.get()
    result["spawn_s"] = time.perf_counter() - t0
    return result


# ------------------------------------ the asynchronous benchmarks' hook
class HookedMLP(MLP):
    """The MLP, with a slow-down hook in its forward.

    The forward sleeps, per batch, a factor times the compute time of the
    batch before it, so a task takes ``1 + factor`` times its compute
    time. ``mode`` is "none", "jitter" (factor uniform in [0, 1), drawn
    from the task's seed) or "slow" (factor 1 in the tasks whose seed is
    in ``slow_seeds``: see :func:`worker_seeds`). A training task seeds
    torch with its own seed before building the module, so
    ``torch.initial_seed()`` names the task.
    """

    def __init__(self, n_features=128, hidden=512, n_classes=10,
                 mode="none", slow_seeds=()):
        super().__init__(n_features, hidden, n_classes)
        self.mode = mode
        self.slow_seeds = frozenset(slow_seeds)
        self._factor = None
        self._mark = None

    def forward(self, x):
        if self.training and self.mode != "none":
            now = time.perf_counter()
            if self._factor is None:
                seed = torch.initial_seed()
                self._factor = random.Random(seed).random() \
                    if self.mode == "jitter" else \
                    float(seed in self.slow_seeds)
            if self._mark is not None and self._factor:
                time.sleep(self._factor * (now - self._mark))
            self._mark = time.perf_counter()
        return super().forward(x)


def worker_seeds(random_state, n_epochs, worker):
    """The seeds of one worker's training tasks in a fit with an int
    ``random_state``: the library's own draw of the base seed and its
    training streams (``dislib_nn.training._seeds``)."""
    from dislib_nn.training import _seeds
    return _seeds.train_seeds(_seeds.draw_base(random_state), n_epochs,
                              worker)


def hooked_estimator(kind, mode, args, n_epochs, seed, **extra):
    """A sync or async classifier of the MLP workload (``args``: the
    options of :func:`add_mlp_arguments`) with :class:`HookedMLP`; in
    ``mode="slow"`` worker 1's tasks are the slow ones."""
    import dislib_nn as dnn
    cls = dnn.AsyncEpochAveragingClassifier if kind == "async" \
        else dnn.SyncEpochAveragingClassifier
    slow = worker_seeds(seed, n_epochs, 1) if mode == "slow" else ()
    return cls(module=HookedMLP, module__n_features=args.n_features,
               module__hidden=args.hidden, module__mode=mode,
               module__slow_seeds=slow, optimizer=torch.optim.SGD,
               lr=args.lr, optimizer__momentum=args.momentum,
               n_epochs=n_epochs, batch_size=args.batch_size,
               n_workers=args.workers, random_state=seed, **extra)


# --------------------------------------------------------- load monitor
def _busy_jiffies():
    """(busy, total) CPU ticks of the machine since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    # user nice system idle iowait irq softirq steal (guest time is
    # already inside user and nice); steal is time the host gave others.
    total = sum(fields)
    return total - fields[3] - fields[4], total


def busy_cores(seconds=1.0):
    """Cores' worth of CPU the whole machine used over ``seconds``."""
    try:
        b0, t0 = _busy_jiffies()
        time.sleep(seconds)
        b1, t1 = _busy_jiffies()
    except (OSError, ValueError, IndexError):
        return float("nan")
    return (b1 - b0) / max(t1 - t0, 1) * (os.cpu_count() or 1)


def wait_for_quiet(max_wait, threshold=0.25):
    """Wait (at most ``max_wait`` s) until others leave the CPUs alone.

    Between configurations none of ours runs, so what the machine is
    busy with belongs to someone else. Returns the last load seen.
    """
    deadline = time.perf_counter() + max_wait
    load = busy_cores()
    while load > threshold and time.perf_counter() < deadline:
        load = busy_cores()
    return load


def _tree_jiffies(root):
    """CPU ticks of ``root`` and its descendants (reaped ones included)."""
    procs = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        # ppid, then utime, stime, cutime, cstime (fields 4, 14-17).
        procs[int(entry)] = (int(rest[1]), sum(map(int, rest[11:15])))
    children = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += procs.get(pid, (0, 0))[1]
        stack.extend(children.get(pid, ()))
    return total


class LoadMonitor:
    """Samples, in a thread, the CPU used by others than this process tree.

    ``foreign(t0, t1)`` is the cores' worth of CPU that processes outside
    this benchmark's tree (and the host, as steal time) used between two
    ``time.perf_counter()`` readings, which on Linux are comparable
    across processes.
    """

    def __init__(self, interval=0.5):
        self.interval = interval
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="load-monitor")

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _sample(self):
        try:
            busy, total = _busy_jiffies()
            mine = _tree_jiffies(os.getpid())
        except (OSError, ValueError, IndexError):
            return
        self.samples.append((time.perf_counter(), busy, total, mine))

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def foreign(self, t0, t1):
        samples = list(self.samples)
        before = [s for s in samples if s[0] <= t0]
        after = [s for s in samples if s[0] >= t1]
        if not before or not after:
            return float("nan")
        _, b0, n0, m0 = before[-1]
        _, b1, n1, m1 = after[0]
        others = max((b1 - b0) - (m1 - m0), 0)
        return others / max(n1 - n0, 1) * (os.cpu_count() or 1)
