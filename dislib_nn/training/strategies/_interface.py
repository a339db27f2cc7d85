"""The interface between the estimator base and a training strategy.

A strategy decides *what runs when* in a fit: which tasks train each
replica, when and how replicas merge. The estimator base drives it
through five calls and knows nothing else about it:

``submit_epoch(epoch, lr, last, want_model, want_readable=False)``
    Submit one epoch's tasks (training, merges); wait for nothing.
    Returns an :class:`EpochHandle`: the futures of the epoch's scalars,
    of the model after it when ``want_model`` (for a callback: early
    stopping), and of the model as tasks read it where it lies when
    ``want_readable`` (for validation: a sharded model's shards, which
    no task has to join).
``read(handle, scalars)``
    Turn the epoch's scalars, an :class:`EpochScalars` of values once
    the base has waited for them, into an :class:`EpochReading`. The
    base class reads the training tasks' reports the same way for
    every strategy; a strategy adds the history fields of its merges
    (:meth:`EpochStrategy.merge_fields`).
``final_model()``
    The future (or value) of the model the fit ends with.
``checkpoint_parts()``
    Right after a merged epoch was submitted: the future of one copy of
    the global model and of what :meth:`EpochStrategy.carry` would return
    then (see :mod:`dislib_nn.training.tasks._snapshot` and
    :mod:`dislib_nn.training._resume`).
``carry()``
    What the next ``fit`` (``warm_start``, ``partial_fit``, a resume, a
    loaded file) must start from besides the model: a :class:`Carry`
    of futures or values, fetched with the model in the fit's one
    transfer of weights, then handed back to the next strategy as
    :attr:`FitSetup.carried`. Checkpoints and ``save`` store it as it
    is, so a strategy's own carried state needs no code elsewhere.

What a training task reports is a :class:`~.tasks._report.TrainStats`;
the loop that submits one training task per worker, and the history
fields read from their reports, are :mod:`._replicas`'.

A new strategy is one module with a :class:`EpochStrategy` subclass (its
parameters included) and its tasks; the estimator class names it in
``_strategy_class``.
"""

from typing import NamedTuple

import torch

from dislib_nn.training.tasks._held import held
from dislib_nn.training.tasks._report import TrainStats

__all__ = ["FitSetup", "EpochHandle", "EpochScalars", "EpochReading",
           "EpochStrategy", "Carry", "training_reading", "combine_shares",
           "measured_compute_s"]


class Carry:
    """What a strategy carries from one fit to the next.

    Parameters
    ----------
    optimizer_states : list or None, default=None
        The optimizer states the next fit's workers start from: one per
        worker (``optimizer_state="keep"``), one averaged state
        (``"average"``), or None (``"reset"``, or a new model). The
        estimator shows them as ``optimizer_states_``.
    state : dict, default=None
        The strategy's own carried state, name -> plain data (state
        dicts, tensors, numbers; futures while a fit runs): the outer
        momentum buffer ``"velocity"``, the outer optimizer's state
        ``"outer_optimizer"``... Only the strategy reads it; checkpoints
        and saved files store it whole. Entries that are None are left
        out.
    """

    __slots__ = ("optimizer_states", "state")

    def __init__(self, optimizer_states=None, state=None):
        self.optimizer_states = optimizer_states
        self.state = {k: v for k, v in (state or {}).items()
                      if v is not None}

    def __repr__(self):
        return (f"Carry(optimizer_states={self.optimizer_states!r}, "
                f"state keys={sorted(self.state)})")


class FitSetup:
    """What a strategy needs to run a fit's epochs: a record, built once
    before the fit's first task, whose fields are never reassigned (the
    ``EpochData`` it holds deals each epoch as it comes).

    Parameters
    ----------
    components : Components
    data : EpochData
        The blocks of each worker, epoch by epoch.
    state : dict
        The model's ``state_dict`` the fit starts from.
    carried : Carry
        What the previous fit's :meth:`EpochStrategy.carry` returned (values),
        or an empty :class:`Carry` for a new model.
    params : FitParams
        The estimator's parameters (``batch_size``, ``optimizer_state``,
        ``outer_lr``, the strategy's own in ``own``...) as the fit runs
        them: ``sync_every`` and the strategy's own ``"auto"``
        parameters as the fit's plan chose
        (:mod:`dislib_nn.training._fit_params`,
        :mod:`dislib_nn.training._adaptive`).
    output : OutputAdapter
    param_keys : list of str
        The names of the module's parameters (buffers excluded).
    lifetimes : Lifetimes
        The owner of ``delete_object`` decisions.
    train_task : callable
        The training task for the ``device`` parameter.
    clock : FitClock
        The fit's rounds and steps, epoch by epoch: what each task
        trains (:mod:`._clock`).

    Attributes
    ----------
    task_components : Future
        ``components`` as tasks take it (``components.for_tasks()``: a
        module instance without its weights), a future the runtime
        holds (:mod:`dislib_nn.training.tasks._held`).
    """

    def __init__(self, components, data, state, carried, params, output,
                 param_keys, lifetimes, train_task, clock):
        self.components = components
        # What tasks receive: the recipe without a module instance's
        # weights (each task loads a state), held by the runtime, so
        # that it reaches each worker once, not with every task.
        self.task_components = held(components.for_tasks())
        self.data = data
        self.state = state
        self.carried = carried
        self.params = params
        self.output = output
        self.param_keys = param_keys
        self.lifetimes = lifetimes
        self.train_task = train_task
        self.clock = clock

    @property
    def n_workers(self):
        return self.data.n_workers

    @property
    def state_bytes(self):
        """The bytes of the tensors of the model's state the fit starts
        from."""
        return sum(v.numel() * v.element_size()
                   for v in self.state.values()
                   if isinstance(v, torch.Tensor))

    def initial_optims(self):
        """Each worker's optimizer state at the start of the fit."""
        states = self.carried.optimizer_states or [None]
        return [states[w % len(states)] for w in range(self.n_workers)]


class EpochScalars(NamedTuple):
    """The small results of one epoch that the master waits for.

    A strategy's :meth:`~EpochStrategy.submit_epoch` fills it with
    futures; the epoch loop waits for them all together and hands the
    same record, with the values, to :meth:`~EpochStrategy.read`.

    Attributes
    ----------
    counts : list of list
        ``counts[k][w]``: the rows worker ``w`` trained on in round
        ``k`` of the epoch (one round per share: see
        :func:`combine_shares`).
    stats : list of list
        ``stats[k][w]``: that task's
        :class:`~dislib_nn.training.tasks._report.TrainStats`.
    merges : list
        What the epoch's merges report, in the strategy's own form
        (the asynchronous folds'
        :class:`~dislib_nn.training.tasks._async_merge.MergeReport`, a
        user strategy's ``merge_info``); empty when the strategy reports
        nothing beyond the counts.
    """

    counts: list
    stats: list
    merges: list


class EpochReading(NamedTuple):
    """What the epoch loop makes of one epoch's scalars
    (:meth:`EpochStrategy.read`).

    Attributes
    ----------
    train_loss : float
        The mean training loss over the rows of the replicas that were
        merged (nan when none was).
    end_s : float
        When the epoch's last training task ended (``time.time()`` on
        its worker): the epoch's ``dur_s`` runs from the previous
        epoch's.
    fields : dict
        The epoch's other ``history_`` entries, key -> plain value
        (``diverged``, ``worker_samples``, ``n_merges``, ...), in the
        order ``history_`` shows them.
    """

    train_loss: float
    end_s: float
    fields: dict


class EpochHandle:
    """What :meth:`EpochStrategy.submit_epoch` submitted for one epoch.

    Attributes
    ----------
    epoch : int
    lr : float
    merged : bool
        Whether replicas merged after this epoch.
    scalars : EpochScalars
        Futures of the epoch's counts, training reports and merge
        reports, waited for together.
    model : future, dict or None
        The model after this epoch, when asked for and merged.
    readable : future, ShardedModel or None
        The same model as tasks read it where it lies, which validation
        reads: ``model`` itself, or (``merge="sharded"``) its shards,
        which every worker fetched for its next round already.
    checkpoint : future or None
        Set by the epoch loop when a callback wants checkpoints: what
        :meth:`EpochStrategy.checkpoint_parts` returned after this epoch.
    """

    def __init__(self, epoch, lr, merged, scalars, model=None,
                 readable=None):
        self.epoch = epoch
        self.lr = lr
        self.merged = merged
        self.scalars = scalars
        self.model = model
        self.readable = model if readable is None else readable
        self.checkpoint = None


class EpochStrategy:
    """Base of the strategies; see the module docstring for the calls.

    Attributes
    ----------
    parameters : dict
        The estimator parameters this strategy adds to the shared ones:
        name -> default. An estimator class naming the strategy in
        ``_strategy_class`` takes them in ``__init__`` (see
        :mod:`dislib_nn.training._params`); they reach the strategy in
        :attr:`FitSetup.params` as ``params.own``, a record with one
        field per name.
    constraints : dict
        Their constraints (name -> list of :mod:`._param_validation`
        constraints), which may also narrow a shared parameter's.
    merges_within_epochs : bool
        Whether the strategy merges within epochs (``sync_every`` a
        fraction or ``"step"``).
    """

    parameters = {}
    constraints = {}
    #: Whether ``sync_every`` may be a fraction of an epoch or
    #: ``"step"`` (what ``sync_every="auto"`` may pick).
    merges_within_epochs = False

    def __init__(self, setup):
        self.setup = setup

    @classmethod
    def check_params(cls, params, name):
        """Raise ``InvalidParameterError`` for a combination of the
        estimator's ``params`` (a :class:`~.._fit_params.FitParams`,
        ``"auto"`` values not yet chosen) this strategy cannot run (each
        value already met its constraints); ``name`` is the estimator's
        class name, for the message. Called at the start of ``fit``."""

    @classmethod
    def adapt(cls, own, few):
        """This strategy's own parameters ``own`` (the record
        ``FitParams.own``) with their ``"auto"`` values chosen, given
        whether the replicas make few steps an epoch
        (:mod:`.._adaptive`); before the strategy is built, so that it
        reads the choices in ``setup.params.own``. The default: ``own``
        as it is."""
        return own

    @property
    def scalar_lag(self):
        """Epochs whose scalars the base may leave unread while submitting.

        1: epoch ``e``'s scalars are read after epoch ``e + 1`` is
        submitted, so workers never idle while the master reads them.
        """
        return 1

    def submit_epoch(self, epoch, lr, last, want_model, want_readable=False):
        raise NotImplementedError

    def read(self, handle, scalars):
        """The :class:`EpochReading` of an epoch's ``scalars`` (values),
        after feeding ``balance``'s throughput with its tasks' compute
        times; the strategy's :meth:`merge_fields` come last."""
        counts, stats = combine_shares(scalars.counts, scalars.stats)
        self.setup.data.throughput.observe(counts, measured_compute_s(stats))
        reading = training_reading(counts, stats)
        reading.fields.update(self.merge_fields(handle, scalars))
        return reading

    def merge_fields(self, handle, scalars):
        """The ``history_`` fields of the epoch's merges (name -> plain
        value), from its :class:`EpochHandle` and resolved
        :class:`EpochScalars`."""
        raise NotImplementedError

    def final_model(self):
        raise NotImplementedError

    def checkpoint_parts(self):
        raise NotImplementedError

    def carry(self):
        raise NotImplementedError


def training_reading(counts, stats):
    """The :class:`EpochReading` every strategy makes of its training
    tasks, before its merges' fields.

    ``counts`` and ``stats`` are the resolved third and fourth results of
    the epoch's training tasks (sample counts, :class:`TrainStats`), one
    per worker. ``train_loss`` is over the
    replicas that were merged. ``diverged``, ``skipped`` and ``retried``
    list workers: a replica that was not finite, one whose training
    raised (``errors`` says what it raised, ``tracebacks`` where), one
    whose epoch ran more than once. A policy other than ``"skip"`` stops
    the fit on a raised epoch (the ``FailurePolicy`` callback).
    """
    merged = [s.finite for s in stats]
    total = sum(n for n, ok in zip(counts, merged) if ok)
    loss = sum(s.loss_sum for s, ok in zip(stats, merged) if ok)
    skipped = [w for w, s in enumerate(stats) if s.error is not None]
    fields = {"diverged": [w for w, s in enumerate(stats)
                           if not s.finite and s.error is None],
              "skipped": skipped,
              "errors": {w: stats[w].error for w in skipped},
              "tracebacks": {w: stats[w].traceback for w in skipped},
              "retried": [w for w, s in enumerate(stats) if s.runs > 1],
              "worker_samples": [int(n) for n in counts],
              "worker_compute_s": [float(s.compute_s) for s in stats]}
    return EpochReading(
        train_loss=float(loss / total) if total else float("nan"),
        end_s=max(float(s.end_s) for s in stats), fields=fields)


def combine_shares(counts, stats):
    """One epoch's per-worker counts and statistics from its shares'.

    ``counts[k][w]`` and ``stats[k][w]`` are worker ``w``'s in share
    ``k`` (a strategy merging ``K`` times an epoch submits ``K`` training
    tasks per worker): rows, loss sums and compute times add up; the
    epoch is finite if every share was, ran as often as its most rerun
    share, and reports the first error; it ended with its last share.
    """
    if len(counts) == 1:
        return counts[0], stats[0]
    total_counts = [sum(int(share[w]) for share in counts)
                    for w in range(len(counts[0]))]
    total_stats = [TrainStats.combined(share[w] for share in stats)
                   for w in range(len(counts[0]))]
    return total_counts, total_stats


def measured_compute_s(stats):
    """Each task's compute time for ``balance``, None for a skipped one
    (its time says nothing about the worker's speed)."""
    return [None if s.error is not None else s.compute_s for s in stats]
