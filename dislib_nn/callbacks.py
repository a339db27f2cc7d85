"""The public callbacks: ``from dislib_nn.callbacks import EarlyStopping``.

They live in :mod:`dislib_nn.training.callbacks` (they use the training
layer's records); this module re-exports its public names.
"""

from dislib_nn.training.callbacks import (Callback, Checkpoint, CSVLogger,
                                          EarlyStopping, EpochRecord, FitState,
                                          LRScheduler, MergeRecord,
                                          ProgressBar, TensorBoardLogger)

__all__ = ["Callback", "FitState", "EpochRecord", "MergeRecord",
           "EarlyStopping", "Checkpoint", "LRScheduler", "ProgressBar",
           "CSVLogger", "TensorBoardLogger"]
