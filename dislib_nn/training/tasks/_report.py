"""What a training task reports besides the replica: :class:`TrainStats`.

The record travels from the training task to the merge tasks (which
leave a diverged replica out) and to the master (history, ``balance``'s
throughput, the failure policy). It is plain data from a module that
imports nothing, so it pickles on every backend and a worker that
unpickles it imports nothing more.
"""

__all__ = ["TrainStats"]


class TrainStats:
    """The statistics of one training task (one replica, one epoch or
    one share of one).

    Parameters
    ----------
    loss_sum : float
        Sum over minibatches of the mean loss times the batch length.
    compute_s : float
        Seconds the task body took, from building the model to returning
        it (what ``balance=True`` measures throughput by).
    end_s : float
        When it ended (``time.time()``), to date epochs on every backend.
    finite : bool
        Whether the loss, the state and the optimizer state are finite;
        a replica that is not is left out of the merges.
    runs : int
        How many times the epoch ran (more than 1 under ``"retry"``).
    error : str or None
        What the last run raised (``"Type: message"``), None when it
        returned.
    traceback : str or None
        The formatted traceback of ``error``, from the user's frame.
    """

    __slots__ = ("loss_sum", "compute_s", "end_s", "finite", "runs",
                 "error", "traceback")

    def __init__(self, loss_sum=0.0, compute_s=0.0, end_s=0.0, finite=True,
                 runs=1, error=None, traceback=None):
        self.loss_sum = loss_sum
        self.compute_s = compute_s
        self.end_s = end_s
        self.finite = finite
        self.runs = runs
        self.error = error
        self.traceback = traceback

    def __getstate__(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, values):
        for name, value in zip(self.__slots__, values):
            setattr(self, name, value)

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)!r}"
                           for name in self.__slots__
                           if name != "traceback")
        return f"TrainStats({fields})"

    @classmethod
    def combined(cls, shares):
        """One epoch's statistics from its shares' (in order): loss sums
        and compute times add up; finite if every share was; as many runs
        as its most rerun share; the first error; it ended with its last
        share."""
        shares = list(shares)
        error = next((s for s in shares if s.error is not None), None)
        return cls(
            loss_sum=sum(s.loss_sum for s in shares),
            compute_s=sum(s.compute_s for s in shares),
            end_s=max(s.end_s for s in shares),
            finite=all(s.finite for s in shares),
            runs=max(s.runs for s in shares),
            error=None if error is None else error.error,
            traceback=None if error is None else error.traceback)
