"""Per-step learning rates, applied inside the training task.

A :class:`StepSchedule` is the picklable record a training task gets
(in :attr:`EpochSettings.step_schedule
<dislib_nn.training.tasks._torch_loop.EpochSettings>`): which schedule
to follow, and the global optimizer step the task's first step is. The
task attaches it to its optimizer (:meth:`StepSchedule.attach`), which
sets the rate of that first step, and steps it after every optimizer
step, so the schedule goes on where the previous task (another worker's
share, the previous epoch, the previous fit) left it.

The schedule is either

* a torch scheduler class (``torch.optim.lr_scheduler.OneCycleLR``,
  ``LinearLR``, ...) with its keyword arguments: built on the task's
  optimizer, whose learning rate is the epoch's, so the scheduler's base
  rate is the epoch's rate; it is stepped from step 0 up to the task's
  first step before training (a few microseconds a step), so that
  recursive schedulers give exactly the rates of one scheduler stepped
  since the start; or
* a callable ``step -> factor``: the rate of global step ``s`` is the
  epoch's rate times ``factor(s)``, as with ``LambdaLR``, computed in
  closed form.

The master decides the clock (:meth:`FitSetup.settings
<dislib_nn.training.strategies._interface.FitSetup.settings>`); this module
only follows it. It imports nothing from the runtime but
:func:`~dislib_nn.runtime.by_value`, so that a callable or class defined
in the user's ``__main__`` reaches the workers by value, as the
components do (:mod:`dislib_nn.training._components`).
"""

import warnings

import torch

from dislib_nn.runtime import by_value

__all__ = ["StepSchedule", "TOTALS", "total_argument", "check_policy",
           "build_scheduler"]

# The schedulers whose length in steps fit fills in when the user did not
# give it: n_epochs times the optimizer steps per epoch.
TOTALS = (("OneCycleLR", "total_steps"), ("CosineAnnealingLR", "T_max"))

_NO_STEP = (torch.optim.lr_scheduler.ReduceLROnPlateau,)


def _scheduler_bases():
    base = getattr(torch.optim.lr_scheduler, "LRScheduler", None) or \
        torch.optim.lr_scheduler._LRScheduler
    return (base,) + _NO_STEP


def total_argument(policy, kwargs):
    """The name of ``policy``'s length argument that fit fills in, or
    None (not such a scheduler, or the user gave its length)."""
    if not isinstance(policy, type):
        return None
    for class_name, arg in TOTALS:
        cls = getattr(torch.optim.lr_scheduler, class_name, None)
        if cls is None or not issubclass(policy, cls) or arg in kwargs:
            continue
        if class_name == "OneCycleLR" and "epochs" in kwargs and \
                "steps_per_epoch" in kwargs:
            return None         # the length, given another way
        return arg
    return None


def check_policy(policy, kwargs, caller):
    """Raise for a policy that cannot be a per-step schedule.

    ``policy`` must be a torch scheduler class other than
    ``ReduceLROnPlateau`` (which steps on a metric, not on a count), or a
    callable ``step -> factor``; keyword arguments go with a class only.
    ``caller`` names the argument in messages.
    """
    if isinstance(policy, type) and issubclass(policy, _scheduler_bases()):
        if issubclass(policy, _NO_STEP):
            raise ValueError(
                f"{caller} cannot step {policy.__name__} per batch: it "
                f"steps on a validation metric, which exists once per "
                f"epoch. Use it per epoch (step_every='epoch').")
        return
    if isinstance(policy, type) or not callable(policy):
        raise TypeError(
            f"{caller} takes a torch.optim.lr_scheduler class or a "
            f"callable step -> factor. Got {policy!r}.")
    if kwargs:
        raise TypeError(
            f"{caller} got scheduler arguments "
            f"({', '.join(sorted(kwargs))}), but its policy is a callable "
            f"step -> factor, which takes none. Got {policy!r}.")


class StepSchedule:
    """A per-step schedule and the global step a task starts at.

    Parameters
    ----------
    policy : torch scheduler class or callable
        See the module docstring.
    kwargs : dict, default=None
        The scheduler's keyword arguments (a class only), its length
        included once fit has filled it in (:meth:`with_total`).
    first_step : int, default=0
        The global optimizer step of the task's first optimizer step.

    Attributes
    ----------
    cap : int or None
        The last step a ``OneCycleLR`` may be stepped to (it raises past
        its length): the steps after it keep its final rate.
    """

    def __init__(self, policy, kwargs=None, first_step=0):
        self.policy = policy
        self.kwargs = dict(kwargs or {})
        self.first_step = int(first_step)
        self.cap = _cap(policy, self.kwargs)

    def __reduce__(self):
        # A policy from the user's script or notebook travels by value.
        return (StepSchedule, (by_value(self.policy), self.kwargs,
                               self.first_step))

    def __repr__(self):
        return (f"StepSchedule({_name(self.policy)}, {self.kwargs!r}, "
                f"first_step={self.first_step})")

    def with_total(self, n_steps):
        """This schedule with its length set to ``n_steps`` where the
        user did not give it (see :data:`TOTALS`)."""
        kwargs = dict(self.kwargs)
        arg = total_argument(self.policy, kwargs)
        if arg is not None:
            kwargs[arg] = max(1, int(n_steps))
        return StepSchedule(self.policy, kwargs, self.first_step)

    def starting_at(self, first_step):
        """This schedule for a task whose first step is ``first_step``."""
        return StepSchedule(self.policy, self.kwargs, first_step)

    def attach(self, optimizer):
        """Set the rate of the first step in ``optimizer``; return the
        object whose ``step()`` the task calls after each optimizer step.

        The optimizer's current learning rates are the base rates.
        """
        if isinstance(self.policy, type):
            return _TorchStepper(self, optimizer)
        return _FactorStepper(self, optimizer)


class _FactorStepper:
    """``lr = base * factor(step)``: LambdaLR in closed form."""

    def __init__(self, schedule, optimizer):
        self.factor = schedule.policy
        self.groups = optimizer.param_groups
        self.base = [group["lr"] for group in self.groups]
        self.step_index = schedule.first_step
        self._apply()

    def _apply(self):
        factor = float(self.factor(self.step_index))
        for group, base in zip(self.groups, self.base):
            group["lr"] = base * factor

    def step(self):
        self.step_index += 1
        self._apply()


class _TorchStepper:
    """A torch scheduler on the task's optimizer, fast-forwarded."""

    def __init__(self, schedule, optimizer):
        for group in optimizer.param_groups:
            # Left by an earlier task's scheduler in the optimizer state:
            # the base rate is this epoch's.
            group.pop("initial_lr", None)
        self.cap = schedule.cap
        self.scheduler = build_scheduler(schedule.policy, optimizer,
                                         schedule.kwargs)
        target = schedule.first_step
        if self.cap is not None:
            target = min(target, self.cap)
        with warnings.catch_warnings():
            # Stepping before any optimizer step is the point here.
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(target):
                self.scheduler.step()

    def step(self):
        if self.cap is None or self.scheduler.last_epoch < self.cap:
            self.scheduler.step()


def build_scheduler(policy, optimizer, kwargs):
    """``policy(optimizer, **kwargs)``; a TypeError naming the class."""
    try:
        return policy(optimizer, **kwargs)
    except TypeError as exc:
        raise TypeError(
            f"{_name(policy)} could not be built with {kwargs!r}: "
            f"{exc}") from exc


def _cap(policy, kwargs):
    """The last step a OneCycleLR of ``kwargs`` may be stepped to."""
    cls = torch.optim.lr_scheduler.OneCycleLR
    if not (isinstance(policy, type) and issubclass(policy, cls)):
        return None
    if kwargs.get("total_steps") is not None:
        return int(kwargs["total_steps"])
    if "epochs" in kwargs and "steps_per_epoch" in kwargs:
        return int(kwargs["epochs"]) * int(kwargs["steps_per_epoch"])
    return None


def _name(obj):
    return getattr(obj, "__qualname__", None) or type(obj).__name__
