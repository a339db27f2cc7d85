"""*How* replicas merge: pure arithmetic on state dicts.

Nothing here imports the runtime, so the formulas are tested without
tasks: :mod:`._sums` holds the weighted sums that the synchronous tree
adds and divides once, :mod:`._stale` the staleness-weighted folds of
the asynchronous strategy, :mod:`._outer` the outer step (FedAvgM's
momentum, or a torch optimizer) both strategies take on the averaged
update.
"""
