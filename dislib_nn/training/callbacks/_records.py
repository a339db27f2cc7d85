"""What a callback receives: the fit's state, an epoch's record, a merge.

Three named records, passed by the epoch loop
(:func:`dislib_nn.training._epoch_loop.run_epochs`) to every callback's
hooks (:class:`~._core.Callback`). They import nothing: a callback module
and the loop agree on these classes, not on dict keys.
"""

__all__ = ["FitState", "EpochRecord", "MergeRecord", "HISTORY_KEYS"]

#: The keys every ``history_`` dict starts with, in this order; the
#: strategy's fields (and keys callbacks add) follow.
HISTORY_KEYS = ("epoch", "train_loss", "valid_loss", "valid_score", "lr",
                "merged", "dur_s", "batchnorm_recomputed")


class FitState:
    """The state of one ``fit`` (or ``partial_fit``) that callbacks see.

    Attributes
    ----------
    estimator : estimator
        The estimator being fitted: read its parameters and
        ``estimator.history_`` (the records of the epochs read so far,
        earlier fits included); do not change its fitted attributes.
    first_epoch : int
        The 0-based epoch the fit starts at (epochs count across fits:
        ``warm_start``, ``partial_fit`` and resumes go on counting).
    total : int
        The epoch count the fit ends at, unless a callback stops it.
    lr : float
        The learning rate the next epoch is submitted with. Reset to the
        estimator's ``lr`` before each epoch; a callback may set it in
        ``on_epoch_begin`` (the built-in schedule does, then later
        callbacks see its value).
    stop : bool
        Set it to True (in ``on_epoch_end`` or ``on_merge``) to end the
        fit after the epoch being read; returning True from
        ``on_epoch_end`` does the same.
    final_model : future, dict or None
        The model the fit keeps. None keeps the model after the last
        epoch; in ``on_fit_end`` a callback may set it to the ``model``
        of an earlier :class:`EpochRecord` (early stopping's best).
    callbacks : list of (str, Callback)
        The fit's callbacks with their names, in the order they run.
    strategy : EpochStrategy
        The training strategy (internal: see
        :mod:`dislib_nn.training.strategies`).
    """

    def __init__(self, estimator, strategy, first_epoch, total, lr,
                 callbacks=()):
        self.estimator = estimator
        self.callbacks = list(callbacks)
        self.strategy = strategy
        self.first_epoch = first_epoch
        self.total = total
        self.lr = lr
        self.stop = False
        self.final_model = None


class EpochRecord:
    """One epoch, as read by the master: its ``history_`` dict and more.

    The named fields below are the keys every ``history_`` dict has.
    The record reads like that dict too (``record["valid_loss"]``,
    ``record.get("n_merges")``, ``"merges" in record``), which reaches
    the strategy's fields; ``record["my_key"] = value`` adds a key,
    which ``history_`` gets too (it holds this record's dict, see
    :meth:`as_history`), and stays JSON-serialisable only if the value is.

    Attributes
    ----------
    epoch : int
        1-based, counted across fits (``history_[i]["epoch"]``).
    train_loss : float
        The mean training loss of the replicas that were merged.
    valid_loss, valid_score : float or None
        On the validation data (``validation_fraction``,
        ``validation_data``), after a merged epoch; None otherwise.
    lr : float
        The learning rate the epoch ran at.
    merged : bool
        Whether the replicas were merged at the end of the epoch.
    dur_s : float
        Seconds from the end of the previous epoch read.
    batchnorm_recomputed : bool
        False when the epoch is read; set True on a fit's last record
        once the fit has recomputed its final model's BatchNorm
        statistics (``recompute_batchnorm``), after every callback saw
        the record.
    merges : list of MergeRecord
        The merges the epoch ran, in order (see :class:`MergeRecord`).
    model : future or None
        The model after the epoch (a future: pass it to
        :attr:`FitState.final_model`, never wait on it), for merged
        epochs when some callback has ``wants_model``; else None. Not in
        ``history_``.
    """

    def __init__(self, fields, merges=(), model=None):
        self._dict = dict(fields)
        self.merges = list(merges)
        self.model = model

    def __getattr__(self, name):
        if name in HISTORY_KEYS:
            return self._dict[name]
        raise AttributeError(
            f"'EpochRecord' object has no attribute {name!r}")

    def __getitem__(self, key):
        return self._dict[key]

    def __setitem__(self, key, value):
        self._dict[key] = value

    def __contains__(self, key):
        return key in self._dict

    def get(self, key, default=None):
        return self._dict.get(key, default)

    def keys(self):
        return self._dict.keys()

    def as_history(self):
        """The dict that ``history_`` holds for this epoch (this very
        object: keys added to the record later are in it too)."""
        return self._dict

    def __repr__(self):
        shown = ", ".join(f"{k}={self._dict[k]!r}" for k in HISTORY_KEYS
                          if k in self._dict)
        return f"EpochRecord({shown})"


class MergeRecord:
    """One merge of the replicas, as the master learns of it.

    The master learns of merges when the epoch's scalars are read, so
    ``on_merge`` runs for each of an epoch's merges just before that
    epoch's ``on_epoch_end``, not when the merge ran on the workers.

    Attributes
    ----------
    epoch : int
        1-based epoch the merge belongs to (as :attr:`EpochRecord.epoch`).
    index : int
        The merge's 0-based position: within the epoch for the
        synchronous strategy (``sync_every`` fractions merge
        ``history_[i]["n_merges"]`` times an epoch), among the fit's
        merges for the asynchronous one (``history_[i]["merges"][k]
        ["index"]``).
    worker : int or None
        The worker whose replica was merged (asynchronous strategy);
        None when every replica merged at once (synchronous).
    staleness : float or None
        Asynchronous: how many merges the global model went through since
        the worker's replica started from it.
    weight : float or None
        Asynchronous: the weight the replica's update got.
    """

    def __init__(self, epoch, index, worker=None, staleness=None,
                 weight=None):
        self.epoch = epoch
        self.index = index
        self.worker = worker
        self.staleness = staleness
        self.weight = weight

    def __repr__(self):
        return (f"MergeRecord(epoch={self.epoch}, index={self.index}, "
                f"worker={self.worker}, staleness={self.staleness}, "
                f"weight={self.weight})")


def merges_of(epoch, fields):
    """The :class:`MergeRecord` list of an epoch's history fields: from
    ``n_merges`` (synchronous) or ``merges`` (asynchronous)."""
    if "merges" in fields:
        return [MergeRecord(epoch, int(m["index"]), int(m["worker"]),
                            float(m["staleness"]), float(m["weight"]))
                for m in fields["merges"]]
    return [MergeRecord(epoch, k) for k in range(int(fields.get(
        "n_merges", 1 if fields.get("merged") else 0)))]


def monitored(record, key, role):
    """``record[key]`` for a callback that watches ``key``; a key the
    fit's records lack is the user's mistake, named with ``role`` (for
    instance ``"EarlyStopping monitors"``) and the keys there are."""
    if key not in record:
        raise ValueError(
            f"{role} {key!r}, which the records of this fit do not have; "
            f"their keys are {sorted(record.keys())}.")
    return record[key]
