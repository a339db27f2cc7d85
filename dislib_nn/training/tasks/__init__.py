"""The tasks of a fit: plain data in, plain data out.

:mod:`._train` declares the training task (its body is
:mod:`._torch_loop`'s, on the device :mod:`._device` picks, in the
precision :mod:`._precision` plans, at the per-step learning rates of
:mod:`._step_schedule`, reporting a :class:`._report.TrainStats`),
:mod:`._reduce` the synchronous merge tree and its outer step,
:mod:`._async_merge` the asynchronous merges into the global model (and
:mod:`._delayed_fold` their starts under ``merge_delay=1``),
:mod:`._batchnorm` the BatchNorm statistics recomputed at the end of a
fit, :mod:`._blocks` the tasks on data blocks (split, check, encode labels,
predict, score). A worker imports only the module of the
task it runs: this package imports none of them.
"""
