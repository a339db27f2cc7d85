"""Training strategies: *when* replicas train and merge.

A strategy is one module behind the small interface of
:mod:`._interface` (:class:`EpochStrategy`, driven by the epoch loop with a
:class:`FitSetup`, answering with :class:`EpochHandle` records and
carrying a :class:`Carry` from one fit to the next):
:mod:`._sync` merges every replica together, :mod:`._async` folds each
one in as it finishes. :mod:`._clock` plans each epoch's rounds and what
each task trains, :mod:`._dealing` which blocks each worker trains on,
:mod:`._lifetimes` when a future's data may be freed, :mod:`._replicas`
the per-worker training loop every strategy shares.
"""

from dislib_nn.training.strategies._interface import (Carry, EpochHandle,
                                                      FitSetup, EpochStrategy)

__all__ = ["EpochStrategy", "FitSetup", "EpochHandle", "Carry"]
