"""The per-worker loop every strategy shares: one training task per
worker.

A strategy decides what each replica starts from (the merged model, its
own chain, a snapshot) and what happens after (a merge tree, a fold);
submitting the training tasks in between is the same for all of them
and lives here (reading what they reported is
:meth:`~._interface.EpochStrategy.read`'s).
"""

from dislib_nn import runtime
from dislib_nn.training.tasks._sharded import ShardedModel

__all__ = ["Trained", "submit_training", "homes"]


class Trained:
    """The futures of one round of training tasks, one entry per worker.

    Attributes
    ----------
    states : list
        The replicas' state dicts after training.
    optims : list
        Their optimizer states (None entries after the last share of an
        epoch with ``optimizer_state="reset"``).
    counts : list
        The rows each trained on.
    stats : list
        Their :class:`~dislib_nn.training.tasks._report.TrainStats`.
    """

    __slots__ = ("states", "optims", "counts", "stats")

    def __init__(self, states, optims, counts, stats):
        self.states = states
        self.optims = optims
        self.counts = counts
        self.stats = stats


def homes(setup, epoch):
    """Where each replica trains ``epoch``: ``(node, of)`` for
    :func:`dislib_nn.runtime.placed`, one per worker.

    On the replica's own node, replica ``worker`` of ``n_workers``, every
    round: its optimizer state, its blocks and its shard of a sharded
    merge stay there, and neighbours share a node when there are more
    replicas than nodes, so that the merge tree's first pairs merge
    there. Where its blocks are instead (block ``b`` of ``n`` is made on
    the node of replica ``b`` of ``n``: :mod:`dislib_nn.data._placing`)
    when they weigh more than what the replica carries from round to
    round (its state and its optimizer state, taken as two models): the
    task then goes to its data, as COMPSs sends a task to where most of
    its inputs are. With one block per replica the two are one node but
    for ``shuffle="local"``, which deals the blocks to the replicas anew
    every epoch.
    """
    carried = 2 * setup.state_bytes
    n = setup.n_workers
    return [block[0] if block is not None and block[1] > carried
            else (w, n)
            for w, block in enumerate(setup.data.block_homes(epoch))]


def submit_training(setup, blocks, inputs, epoch, lr, share=None,
                    merge_from=None):
    """Submit one training task per worker; wait for nothing.

    Parameters
    ----------
    setup : FitSetup
    blocks : list of (x_blocks, y_blocks)
        Each worker's blocks for ``epoch``.
    inputs : list of (state, optimizer state)
        What each worker's replica starts from (futures or values; a
        state may be a :class:`~.tasks._sharded.ShardedModel`).
    epoch : int
    lr : float
    share : (int, int) or None, default=None
        The share of the epoch this round trains (see
        :meth:`~._clock.FitClock.settings`).
    merge_from : list or None, default=None
        None when no merge follows these tasks. Otherwise the model each
        worker's round started from, which the merge adds the update
        to: with ``merge_precision="bf16"`` each task returns its update
        from it, a :class:`~dislib_nn.training.merge._payload.Delta`,
        instead of its state dict (the task also reads it when it is
        not the state the task starts from, mid-round).

    Returns
    -------
    Trained

    With ``optimizer_state="reset"`` the optimizer is new every epoch but
    carried across the epoch's shares: the shares before the last keep
    it, and after the last the optimizer states are released (entries
    None).
    """
    reset = setup.params.optimizer_state == "reset"
    ends_epoch = share is None or share[0] == share[1] - 1
    where = homes(setup, epoch)
    states, optims, counts, stats = [], [], [], []
    for w, ((x_blocks, y_blocks), (state, optim)) in enumerate(
            zip(blocks, inputs)):
        settings = setup.clock.settings(epoch, w, lr, share,
                                  merged=merge_from is not None)
        if reset and not ends_epoch:
            settings.optimizer_state = "keep"
        base = ()
        if settings.merge_precision != "fp32" and \
                merge_from[w] is not state:
            base = (merge_from[w],)
        # A task's state is a list: one state dict, or a model's shards.
        parts = list(state) if isinstance(state, ShardedModel) else [state]
        with runtime.placed(*where[w]):
            out = setup.train_task(setup.task_components, parts, optim,
                                   x_blocks, y_blocks, settings, *base)
        for results, value in zip((states, optims, counts, stats), out):
            results.append(value)
    if reset and ends_epoch:
        setup.lifetimes.release(optims)
        optims = [None] * len(optims)
    return Trained(states, optims, counts, stats)

