"""One epoch of minibatch training, and batched inference: plain PyTorch.

This is what a training task runs once its arguments have arrived; it
knows nothing about the runtime, so it can be read (and debugged) as an
ordinary PyTorch loop. :func:`run_train_task` wraps it with what a task
owes the runtime: choosing the device, sizing torch threads under
COMPSs, seeding, and returning CPU tensors.
"""

import os

import torch

from dislib_nn import runtime

__all__ = ["EpochSettings", "resolve_device", "size_threads",
           "run_train_task", "train_one_epoch", "forward_batches",
           "OutputAdapter", "to_cpu"]

_ELEMENTWISE_LOSSES = (torch.nn.MSELoss, torch.nn.L1Loss,
                       torch.nn.SmoothL1Loss, torch.nn.HuberLoss)


class EpochSettings:
    """What a training task needs to know besides the model and the data.

    Parameters
    ----------
    lr : float
        The learning rate of this epoch (the schedule is applied by the
        master and reaches every worker's optimizer through this value).
    batch_size : int
    seed : int
        Seeds dropout and the order of rows (same seed, same result).
    shuffle_rows : bool
        Visit the worker's rows in a new random order.
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"``...
    optimizer_state : {"keep", "reset", "average"}
    output : OutputAdapter
    """

    def __init__(self, lr, batch_size, seed, shuffle_rows, device,
                 optimizer_state, output):
        self.lr = lr
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle_rows = shuffle_rows
        self.device = device
        self.optimizer_state = optimizer_state
        self.output = output


class OutputAdapter:
    """Checks the module's output against the targets, and shapes it.

    Parameters
    ----------
    kind : {"classifier", "regressor"}
    n_classes : int or None
        For classifiers: how many columns the output must have.
    flat_target : bool
        For regressors: y was 1-D, so an output of shape (n, 1) is read as
        (n,) (a column would broadcast against a 1-D target in the loss).
    x_dtype : torch.dtype
        The dtype inputs are cast to (the module's floating dtype).
    """

    def __init__(self, kind, n_classes, flat_target, x_dtype):
        self.kind = kind
        self.n_classes = n_classes
        self.flat_target = flat_target
        self.x_dtype = x_dtype

    def y_dtype(self):
        return torch.int64 if self.kind == "classifier" else self.x_dtype

    def __call__(self, output, criterion=None, target=None):
        if not torch.is_tensor(output):
            raise TypeError(
                f"the module's forward must return a tensor. It returned "
                f"a {type(output).__name__}.")
        if self.kind == "classifier":
            # predict and predict_proba read one score per class, whatever
            # the loss: check it at the first batch, not after training.
            if output.ndim != 2 or output.shape[1] != self.n_classes:
                raise ValueError(
                    f"the module's output has shape {tuple(output.shape)}, "
                    f"but a classifier needs one column per class: shape "
                    f"({output.shape[0]}, {self.n_classes}) for the "
                    f"{self.n_classes} classes of y. Give the module "
                    f"{self.n_classes} outputs (a module class whose "
                    f"__init__ takes n_classes gets it filled in by fit).")
            return output
        if self.flat_target and output.ndim == 2 and output.shape[1] == 1:
            output = output[:, 0]
        if (target is not None and isinstance(criterion, _ELEMENTWISE_LOSSES)
                and output.shape != target.shape):
            raise ValueError(
                f"the module's output has shape {tuple(output.shape)} but "
                f"the targets have shape {tuple(target.shape)}; "
                f"{type(criterion).__name__} would broadcast them against "
                f"each other. Make the module return one value per target "
                f"column ({tuple(target.shape)[1:] or 'a 1-D output'}).")
        return output


def resolve_device(device):
    """The ``torch.device`` a task runs on.

    ``"auto"`` takes a GPU the runtime gave the task: under COMPSs only a
    task whose constraint was given GPUs uses one (the first of those),
    whatever the node has; the local backends do not assign GPUs, so
    there it is the first visible one. ``"cuda:k"`` under COMPSs is the
    k-th GPU given to the task.
    """
    if isinstance(device, torch.device):
        device = str(device)
    given = runtime.task_cuda_devices()
    if device == "auto":
        if given is None:
            return torch.device("cuda" if torch.cuda.is_available()
                                else "cpu")
        return torch.device("cuda", given[0]) if given else \
            torch.device("cpu")
    resolved = torch.device(device)
    if resolved.type != "cuda":
        return resolved
    if given is not None:
        k = resolved.index or 0
        if k >= len(given):
            raise RuntimeError(
                f"device={device!r} was asked for, but the runtime gave "
                f"this task {len(given)} GPU(s). Ask for GPUs with "
                f"ComputingUnitsGPUs (see docs/hpc.md), or use "
                f"device='auto' to run where the task is placed.")
        return torch.device("cuda", given[k])
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
        raise RuntimeError(
            f"device={device!r} was asked for, but this task sees no CUDA "
            f"GPU (CUDA_VISIBLE_DEVICES={visible}, torch built with CUDA: "
            f"{torch.version.cuda is not None}). Use device='auto' to "
            f"fall back to the CPU.")
    return resolved


def size_threads():
    """Use as many torch threads as the runtime gave the task (COMPSs)."""
    n = runtime.task_threads()
    if n is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)


def to_cpu(obj):
    """``obj`` with every tensor inside moved to the CPU (and detached)."""
    if torch.is_tensor(obj):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return type(obj)((k, to_cpu(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_cpu(v) for v in obj)
    return obj


def run_train_task(components, state, optim_state, x_blocks, y_blocks,
                   settings):
    """Train one replica for one epoch on its blocks.

    Returns
    -------
    state : dict of CPU tensors
        The replica's full ``state_dict`` after the epoch.
    optim_state : dict or None
        The optimizer's state (CPU tensors), or None when
        ``optimizer_state="reset"``.
    n_samples : int
    loss_sum : float
        The sum over minibatches of the mean loss times the batch length.
    """
    size_threads()
    device = resolve_device(settings.device)
    torch.manual_seed(settings.seed)
    model = components.build_module()
    model.load_state_dict(state)
    model.to(device)
    model.train()
    criterion = components.build_criterion().to(device)
    optimizer = _optimizer(components, model, settings, optim_state)
    x = _concat(x_blocks)
    y = _concat(y_blocks)
    generator = None
    if settings.shuffle_rows:
        generator = torch.Generator().manual_seed(settings.seed)
    n, loss_sum = train_one_epoch(model, optimizer, criterion, x, y,
                                  settings.batch_size, generator, device,
                                  settings.output)
    keep = settings.optimizer_state != "reset"
    return (to_cpu(model.state_dict()),
            to_cpu(optimizer.state_dict()) if keep else None, n, loss_sum)


def train_one_epoch(model, optimizer, criterion, x, y, batch_size,
                    generator, device, output):
    """Minibatch training over ``x`` and ``y``; ``(n_samples, loss_sum)``.

    Rows are visited in order, or in a random order drawn from
    ``generator`` when it is given; the last batch may be short.
    """
    n = len(x)
    order = None if generator is None else torch.randperm(
        n, generator=generator)
    total = torch.zeros((), dtype=torch.float64, device=device)
    x_dtype, y_dtype = output.x_dtype, output.y_dtype()
    for start in range(0, n, batch_size):
        if order is None:
            xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        else:
            idx = order[start:start + batch_size]
            xb, yb = x[idx], y[idx]
        xb = xb.to(device=device, dtype=x_dtype)
        yb = yb.to(device=device, dtype=y_dtype)
        optimizer.zero_grad(set_to_none=True)
        out = output(model(xb), criterion, yb)
        loss = criterion(out, yb)
        loss.backward()
        optimizer.step()
        total += loss.detach().to(torch.float64) * len(xb)
    return n, float(total.item())


def forward_batches(model, x, batch_size, device, output):
    """The module's output on ``x`` in eval mode, batch by batch, on CPU."""
    model.eval()
    outs = []
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            xb = x[start:start + batch_size].to(device=device,
                                                dtype=output.x_dtype)
            outs.append(output(model(xb)).cpu())
    if not outs:
        return torch.empty((0,))
    return torch.cat(outs)


def _optimizer(components, model, settings, optim_state):
    optimizer = components.build_optimizer(model.parameters(), settings.lr)
    if optim_state is not None and settings.optimizer_state != "reset":
        # Per-parameter state (momentum, Adam moments) persists; the
        # hyperparameters always come from the estimator's parameters.
        fresh = [{k: v for k, v in g.items() if k != "params"}
                 for g in optimizer.param_groups]
        optimizer.load_state_dict(optim_state)
        for group, values in zip(optimizer.param_groups, fresh):
            group.update(values)
    for group in optimizer.param_groups:
        group["lr"] = settings.lr
    return optimizer


def _concat(blocks):
    blocks = [b if torch.is_tensor(b) else torch.as_tensor(b)
              for b in blocks]
    if len(blocks) == 1:
        return blocks[0]
    return torch.cat(blocks)
