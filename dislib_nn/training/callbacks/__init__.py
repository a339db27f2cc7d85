"""Callbacks: code of yours that the epoch loop runs on the master.

Pass them to any estimator as ``callbacks=[...]`` (instances, or
``(name, instance)`` pairs); ``set_params(callbacks__NAME__arg=value)``
sets their arguments. The public import path is ``dislib_nn.callbacks``;
see docs/callbacks.md.

:class:`Callback`
    The base class: hooks at fit begin/end, epoch begin/end and after
    each merge, receiving the records :class:`FitState`,
    :class:`EpochRecord` and :class:`MergeRecord`.
:class:`EarlyStopping`, :class:`Checkpoint`, :class:`LRScheduler`
    What the estimators' ``early_stopping``, ``checkpoint_dir`` and
    ``lr_schedule`` parameters do, with more options.
:class:`ProgressBar`, :class:`CSVLogger`, :class:`TensorBoardLogger`
    Reports of a fit (tqdm, a CSV file, TensorBoard).

The names are imported when first used (PEP 562), as the package's
others are: the task modules of this package (``_checkpoint``) import it
on workers, and the training layer's modules import ``_schedule``
without pulling in every callback.
"""

import importlib as _importlib

_PUBLIC = {
    "Callback": "_core",
    "FitState": "_records",
    "EpochRecord": "_records",
    "MergeRecord": "_records",
    "EarlyStopping": "_early_stopping",
    "Checkpoint": "_checkpoint",
    "LRScheduler": "_lr_scheduler",
    "ProgressBar": "_loggers",
    "CSVLogger": "_loggers",
    "TensorBoardLogger": "_loggers",
}

__all__ = list(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        module = _importlib.import_module(f"{__name__}.{_PUBLIC[name]}")
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
