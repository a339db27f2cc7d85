"""Per-epoch learning rates, computed on the master, applied by workers.

``lr_schedule`` is either a callable ``epoch -> factor`` (the epoch's
learning rate is ``lr * factor(epoch)``, as with ``LambdaLR``; epochs
count from 0), or a torch scheduler class such as
``torch.optim.lr_scheduler.CosineAnnealingLR``, built with the
``lr_schedule__*`` arguments. The master steps it once per epoch and
sends each epoch's rate to every training task, which sets it in its
optimizer: every worker sees the schedule (the paper's code changed
only the master's copy of the optimizer). ``ReduceLROnPlateau`` steps on
the validation loss, or on the training loss without validation.
"""

import torch

__all__ = ["LRSchedule"]

try:
    _SCHEDULER_BASES = (torch.optim.lr_scheduler.LRScheduler,
                        torch.optim.lr_scheduler.ReduceLROnPlateau)
except AttributeError:  # torch < 2.0
    _SCHEDULER_BASES = (torch.optim.lr_scheduler._LRScheduler,
                        torch.optim.lr_scheduler.ReduceLROnPlateau)


def is_scheduler_class(obj):
    return isinstance(obj, type) and issubclass(obj, _SCHEDULER_BASES)


class LRSchedule:
    """The learning rate of each epoch, from epoch 0 on.

    Parameters
    ----------
    lr : float
    schedule : None, callable or torch scheduler class
    kwargs : dict
        The ``lr_schedule__*`` arguments.
    history : list of dict
        Epochs already run (``warm_start``, ``partial_fit``): a
        ``ReduceLROnPlateau`` is replayed over their losses, so it resumes
        where it stopped (other schedulers depend on the epoch only).
    """

    def __init__(self, lr, schedule, kwargs, history=()):
        self.lr = lr
        self.schedule = schedule
        self.kwargs = dict(kwargs)
        self._scheduler = None
        self._optimizer = None
        self._steps = 0
        if is_scheduler_class(schedule):
            param = torch.zeros(1, requires_grad=True)
            self._optimizer = torch.optim.SGD([param], lr=lr)
            try:
                self._scheduler = schedule(self._optimizer, **self.kwargs)
            except TypeError as exc:
                raise TypeError(
                    f"lr_schedule {schedule.__name__} could not be built "
                    f"with {self.kwargs!r}: {exc}") from exc
            for record in history:
                self.observe(record)
        elif self.kwargs:
            raise TypeError(
                f"lr_schedule__ arguments ({', '.join(sorted(self.kwargs))})"
                f" were given, but lr_schedule is not a torch scheduler "
                f"class. Got {schedule!r}.")

    @property
    def needs_metric(self):
        """Whether an epoch's rate depends on the losses of those before."""
        return isinstance(self._scheduler,
                          torch.optim.lr_scheduler.ReduceLROnPlateau)

    def lr_at(self, epoch):
        """The learning rate of ``epoch`` (0-based, counted across fits).

        With ``ReduceLROnPlateau`` it is the rate after the epochs
        observed so far: observe epoch ``e - 1`` before asking for ``e``.
        """
        if self.schedule is None:
            return float(self.lr)
        if self._scheduler is None:
            return float(self.lr) * float(self.schedule(epoch))
        if not self.needs_metric:
            if epoch < self._steps:
                raise ValueError(f"learning rates are asked for in order; "
                                 f"epoch {epoch} is past.")
            while self._steps < epoch:
                # No gradients: a no-op that keeps torch from warning
                # about the scheduler stepping before the optimizer.
                self._optimizer.step()
                self._scheduler.step()
                self._steps += 1
        return float(self._optimizer.param_groups[0]["lr"])

    def observe(self, record):
        """Feed an epoch's history record to ``ReduceLROnPlateau``."""
        if not self.needs_metric:
            return
        metric = record.get("valid_loss")
        if metric is None:
            metric = record["train_loss"]
        self._scheduler.step(metric)
