"""The strategy users subclass: :class:`Strategy`, and the :class:`Round`
it merges.

A subclass writes a strategy's decisions only: where the global model
starts (:meth:`Strategy.begin`), what each replica's next round starts
from (:meth:`Strategy.start`), which tasks merge a round's replicas
(:meth:`Strategy.merge`), which future is the model
(:meth:`Strategy.model`) and what it carries from one fit to the next
(:meth:`Strategy.carry`). The library runs everything else
(:mod:`._rounds`): the epochs and their shares (``sync_every``), the
training tasks and the optimizer states, the release of futures no one
reads any more, validation, checkpoints and ``history_``.
"""

from typing import NamedTuple

__all__ = ["Strategy", "Round"]


class Round(NamedTuple):
    """One round of training, which :meth:`Strategy.merge` merges.

    A round is what the replicas train between two merges: an epoch,
    ``sync_every`` epochs, or a share of an epoch (``sync_every`` a
    fraction or ``"step"``). Every list holds one entry per worker.

    Attributes
    ----------
    epoch : int
        The 0-based epoch the round ends in (epochs count across fits:
        ``warm_start``, ``partial_fit`` and resumes go on counting).
    share : (int, int) or None
        ``(k, K)``: the round is share ``k`` of ``K`` of the epoch;
        None for a whole epoch.
    last : bool
        Whether this is the fit's last round.
    starts : list
        What each replica's round started from (what :meth:`Strategy.start`
        returned): state dicts or their futures.
    states : list
        Futures of each replica's ``state_dict`` after the round.
    samples : list
        Futures of the rows each replica trained on in the round's last
        epoch (or share of one): ints.
    stats : list
        Futures of each replica's training report, a ``TrainStats``
        whose ``finite`` is False for a replica that diverged or whose
        training raised under ``on_failure="skip"``: leave it out of the
        merge (its state is not a model to average).
    """

    epoch: int
    share: tuple
    last: bool
    starts: list
    states: list
    samples: list
    stats: list


class Strategy:
    """Base class of a user-written averaging strategy.

    Give an estimator the class or an instance as ``strategy=``; the
    estimator's other parameters (``n_workers``, ``sync_every``,
    ``shuffle``, ``balance``, ``optimizer_state``, callbacks,
    checkpoints...) keep their meaning. A subclass lists its parameters
    in :attr:`parameters` and overrides :meth:`merge` and :meth:`model`,
    and :meth:`begin`, :meth:`start` and :meth:`carry` when their
    defaults do not fit. The hooks run on the master and submit tasks
    (module-level functions under ``dislib_nn.runtime.task``); they never
    wait on a future.

    Futures' lifetimes are the library's: it releases every future your
    strategy gave it (a start, a model, a carried value) and every
    replica of a merged round once no attribute of your strategy holds
    it (attributes are searched through lists, tuples and dicts), so
    hold in attributes what a later hook will pass to a task, and
    submit every task that reads a round's replicas inside
    :meth:`merge`.

    Parameters
    ----------
    **params
        Values for the names of :attr:`parameters`; the others keep
        their defaults. The estimator's ``strategy__name=value``
        parameters override them. Each fit builds a new instance of the
        class with them, so the instance given is never changed.

    Attributes
    ----------
    parameters : dict
        The strategy's parameters, name -> default, set as attributes of
        the same names.
    n_workers : int
        The fit's replicas, set before :meth:`begin`.
    """

    parameters = {}

    def __init__(self, **params):
        unknown = sorted(set(params) - set(self.parameters))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unknown parameters {unknown}; "
                f"its parameters are {sorted(self.parameters)}.")
        for name, default in self.parameters.items():
            setattr(self, name, params.get(name, default))
        self.n_workers = None

    def get_params(self, deep=False):
        """The strategy's parameters, name -> value (as scikit-learn's
        estimators and skorch's callbacks give theirs)."""
        return {name: getattr(self, name) for name in self.parameters}

    def __repr__(self):
        shown = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({shown})"

    # ------------------------------------------------------------ hooks
    def begin(self, model, carried):
        """Start the fit's global model.

        Parameters
        ----------
        model : dict
            The ``state_dict`` the fit starts from (the module's initial
            weights, or the fitted model with ``warm_start``,
            ``partial_fit``, a resume, a loaded file).
        carried : dict
            What :meth:`carry` returned at the end of the previous fit
            (or in the checkpoint resumed), as values; ``{}`` for a new
            model. Raise ``ValueError`` here for parameters that do not
            suit :attr:`n_workers`: no training task has run yet.

        The default keeps ``model`` as :attr:`global_model`.
        """
        self.global_model = model

    def start(self, worker):
        """What ``worker``'s replica starts its next round from: a
        ``state_dict`` or its future. The default: :meth:`model`."""
        return self.model()

    def merge(self, trained):
        """Submit the tasks that merge the replicas of ``trained`` (a
        :class:`Round`) and keep what they return in attributes.

        Return None, or a list of futures (or values) of plain data
        (numbers, strings, lists and dicts of them) that ``history_``
        shows under ``"merge_info"``, a list with one entry per round
        of the epoch. The master waits on them with the epoch's
        scalars, which ends them (as ``compss_wait_on`` does): return
        futures that no later task reads.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must define merge(self, trained)")

    def model(self):
        """The global model now: a ``state_dict`` or its future. The
        default: :attr:`global_model`."""
        return self.global_model

    def carry(self):
        """What the next fit (``warm_start``, ``partial_fit``), a
        checkpoint and ``save`` keep of the strategy besides the model:
        name -> future or value of plain data (tensors, numbers,
        strings, lists and dicts of them), handed back to :meth:`begin`
        as ``carried``. The default carries nothing."""
        return {}
