"""The public estimators' docstrings: what they share, and the
parameters and examples each strategy and target adds.

:func:`estimator_doc` writes the docstring of one of the four public
classes; the parameter text is kept beside the code that reads it only
here, so that ``_estimators.py`` holds the classes themselves.
"""

__all__ = ["estimator_doc"]

_STRATEGY = """
    Each worker trains its own replica of ``module`` on its share of the
    data for a whole epoch of minibatch training; at the epoch boundary
    the replicas' ``state_dict`` entries are averaged, weighted by the
    samples each saw, by a binary tree of merge tasks, and every worker
    starts the next epoch from the merged model.
"""

_ASYNC_STRATEGY = """
    Each worker trains its own replica of ``module`` on its share of the
    data, epoch after epoch, in its own chain of tasks. After each epoch
    a merge task folds the worker's update (its change since the model
    it started from) into a global model, weighted by its share of the
    samples and discounted by its staleness; merges run one at a time in
    whatever order workers finish, and each worker starts its next epoch
    from the global model its merge returned, without waiting for the
    others. ``max_lag`` bounds how many rounds (merges) a worker may run
    ahead of the slowest (see docs/strategies.md).
"""

_ASYNC_PARAMETERS = """    max_lag : int, None or "auto", default="auto"
        How many rounds (merges: an epoch, ``sync_every`` epochs, or a
        share of an epoch when ``sync_every`` is a fraction or
        ``"step"``) any worker may run ahead of the slowest. 0 starts
        every round from the model with all of the previous round's
        merges (the synchronous strategy's model); None never makes a
        worker wait. ``"auto"`` is 1, and 0 where the replicas make few
        steps an epoch (4 replicas or more, fewer than 64 steps each,
        the condition ``sync_every="auto"`` adapts to): there a round's
        update one round stale cost up to 21 points of accuracy in
        docs/benchmarks.md. ``history_`` records what it ran.
    staleness_exponent : float, default=0.5
        A merge's weight is its share of the samples times
        ``(1 + tau) ** -staleness_exponent``, where ``tau`` is how many
        rounds the global model moved beyond what a synchronous round
        would have merged since the worker's snapshot; 0 turns the
        discount off.
    merge_delay : {0, 1}, default=0
        1: a worker does not wait for its merge. It starts each round
        from its own weights, corrected by its merge of the round before
        last (that merge's global model minus its weights then), so the
        merge and the transfers it needs run while the next round
        trains. With ``max_lag=0`` (what ``"auto"`` is then) the model
        is the synchronous estimators' ``merge_delay=1``. Needs
        ``max_lag`` 0 or None, ``merge_precision="fp32"`` and
        ``optimizer_state`` "keep" or "reset". docs/strategies.md.
"""

_SYNC_PARAMETERS = """    merge_delay : {0, 1}, default=0
        1: the next round does not wait for the merge. After a merge each
        replica goes on from its own weights, and takes that merge's
        correction (the merged model minus its weights then) at the next
        merge; the fit's last merge is applied at once. The mean of the
        replicas follows the merged models, each replica one round of
        its own progress apart. Needs ``merge_precision="fp32"`` and
        ``optimizer_state`` "keep" or "reset". Its cost in accuracy and
        its gain in time are in docs/strategies.md and
        docs/benchmarks.md.
    merge : {"tree", "sharded"}, default="tree"
        How replicas merge. ``"tree"``: a binary tree of merge tasks,
        whose root sends the merged model to every worker.
        ``"sharded"``: every floating-point tensor is cut into
        ``n_workers`` slices and worker ``j`` merges slice ``j`` of all
        replicas where its own replica was trained; each worker's next
        round reads the other slices (a ring all-reduce's traffic:
        ``2 (P - 1) / P`` of a model per worker and round, on every link
        at once). Bit-identical models; needs ``merge_delay=0``,
        ``merge_precision="fp32"`` and ``optimizer_state`` "keep" or
        "reset". For several nodes on links slower than their compute:
        docs/strategies.md.
"""

_PARAMETERS = """
    Parameters
    ----------
    module : type or torch.nn.Module
        The network: an ``nn.Module`` subclass, built with the
        ``module__*`` arguments, or an instance, deep-copied (its weights
        are the starting point). Any module works: every entry of its
        ``state_dict`` is merged. If the class's ``__init__`` takes
        ``n_features_in``, ``n_classes`` (classifier) or ``n_outputs``
        (regressor) and they are not given, ``fit`` fills them in from
        the data.
    criterion : type or torch.nn.Module, default=None
        The loss; ``None`` means {criterion}. Arguments go in as
        ``criterion__*``.
    optimizer : type, default=torch.optim.SGD
        Built in every training task as ``optimizer(params, lr=lr,
        **optimizer__*)``.
    lr : float, default=0.01
        Learning rate.
    lr_schedule : callable or torch scheduler class, default=None
        Per-epoch learning rate: a callable ``epoch -> factor`` (the rate
        is ``lr * factor(epoch)``), or a class such as
        ``torch.optim.lr_scheduler.CosineAnnealingLR`` built with the
        ``lr_schedule__*`` arguments. It is stepped on the master and
        every epoch's rate reaches every worker's optimizer.
    n_epochs : int, default=10
        Epochs per call to ``fit``.
    batch_size : int, default=32
        Minibatch size inside each worker.
    n_workers : int, default=None
        Replicas trained in parallel (``None``: as many as the runtime
        runs at once); never more than the number of blocks of X.
    sync_every : int, float, "step", "auto" or callable, default="auto"
        Epochs between merges; the last epoch of a fit always merges.
        Also a fraction ``1 / k`` of an epoch (``0.25``: four merges an
        epoch, each replica training on the next quarter of its rows
        between them) or ``"step"`` (a merge after every optimizer
        step), or a callable ``epoch -> one of those`` (0-based epochs,
        counted across fits) for a schedule of merges. ``"auto"``: one
        merge per epoch, except with 4 replicas or more making fewer
        than 64 optimizer steps an epoch each: four merges per epoch
        (one per step with 4 steps or fewer); see docs/strategies.md,
        "What the defaults adapt to".
    lr_scaling : {{"auto", "none", "sqrt", "linear"}}, default="auto"
        Each replica trains at ``lr`` times 1, ``sqrt(n_workers)`` or
        ``n_workers``, half of it in the fit's first epoch when scaled
        and no ``lr_schedule`` is given. ``"auto"``: ``"sqrt"`` when
        ``sync_every="auto"`` picks four merges an epoch, else
        ``"none"`` (a merge per step is large-batch SGD at ``lr``).
    shuffle : {{"global", "local", "none"}}, default="global"
        ``"global"``: reshuffle rows across blocks every epoch;
        ``"local"``: shuffle rows inside each worker and re-deal blocks
        to workers; ``"none"``: block ``i`` stays on worker
        ``i % n_workers`` and rows stay in order (federated setting).
    optimizer_state : {{"keep", "reset", "average"}}, default="keep"
        What becomes of each worker's optimizer state (momentum, Adam
        moments) across epochs: kept per worker, reset every epoch (as
        the paper's code did), or averaged with the weights.
    outer_lr : float, default=1.0
        Server learning rate on the averaged update (FedAvgM), with
        ``outer_optimizer=None`` only.
    outer_momentum : float, default=0.0
        Server momentum on the averaged update, with
        ``outer_optimizer=None`` only. The defaults give plain
        averaging.
    outer_optimizer : callable or None, default=None
        A ``torch.optim`` optimizer class (or factory) that steps the
        global parameters on the pseudo-gradient ``previous - average``
        after every merge, built as ``outer_optimizer(params,
        **outer_optimizer__*)`` (DiLoCo: ``torch.optim.SGD`` with
        ``outer_optimizer__lr=0.7``, ``outer_optimizer__momentum=0.9``,
        ``outer_optimizer__nesterov=True``). Its state carries over
        fits, checkpoints and ``save``. The asynchronous estimators take
        the delayed outer step of Async Local-SGD (docs/strategies.md).
    validation_fraction : float, default=0.0
        Fraction of each block held out to compute ``valid_loss`` and
        ``valid_score`` after every merge.
    validation_data : tuple (X_val, y_val), default=None
        Validation data given explicitly (instead of the fraction).
    scoring : str or callable, default=None
        The score of ``valid_score`` (in ``history_`` and the callbacks)
        and of ``score``: a scikit-learn scorer name, or a callable
        ``scorer(estimator, X, y) -> float`` (``make_scorer(...)``, a
        function). These names are computed block by block:
        "accuracy", "balanced_accuracy", "f1_macro", "f1_micro",
        "f1_weighted", "precision_macro", "recall_macro", "neg_log_loss"
        for classifiers; "r2", "neg_mean_absolute_error",
        "neg_mean_squared_error", "neg_root_mean_squared_error" for
        regressors. Any other scorer is computed exactly on the master,
        from the module outputs the validation (or ``score``) tasks
        return, one row per sample (never X), with an estimator that
        predicts those rows; it is never sent to a task. A scorer of the
        other kind of estimator, or one needing a method this one lacks,
        is refused before any task. None: accuracy, or R²
        (docs/estimators.md).
    early_stopping : bool, default=False
        Stop when the validation loss (the training loss, without
        validation) has not improved for ``patience`` merges, and keep
        the best model: the shortcut for the default callback
        ``EarlyStopping(patience=patience)`` (docs/callbacks.md).
    patience : int, default=5
    device : str or torch.device, default="auto"
        Where training tasks run: ``"auto"`` takes a GPU when the task
        sees one; ``"cpu"``; ``"cuda"``. Weights always travel as CPU
        tensors.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the shuffles and dropout.
    verbose : int, default=0
        Print one line per epoch when > 0 (and, on a terminal, a progress
        line while an epoch runs, estimated from the last one).
    warm_start : bool, default=False
        ``fit`` continues from the current model instead of starting
        anew.
    balance : bool or list of float, default=False
        Deal blocks to workers in proportion to their measured throughput
        (rows per second in earlier epochs), so that a slower worker gets
        less data and all finish together; a list gives each worker's
        relative speed instead, dealt by from the first epoch (needs
        ``n_workers`` of its length: ``balance=[3, 1]`` for a node three
        times as fast as the other). Needs ``shuffle="global"`` or
        ``"local"`` and more blocks than workers; measured, the model
        then depends on timings, so ``random_state`` no longer fixes it
        (given rates, it does). Every
        replica weighs the same in the merge, whatever rows it got (see
        docs/strategies.md).
    checkpoint_dir : str, os.PathLike or None, default=None
        Write a checkpoint there after every merge (model, optimizer
        states, outer step's state, epoch, seed, parameters,
        ``history_``),
        atomically; ``fit(X, y, resume=True)`` continues from it. See
        docs/estimators.md. The shortcut for the default callback
        ``Checkpoint(checkpoint_dir)``.
    callbacks : list or None, default=None
        ``dislib_nn.callbacks.Callback`` instances or ``(name, instance)``
        pairs, run on the master after the default ones (failure policy,
        learning rate, history, early stopping, printer, checkpoint);
        unnamed ones are named after their class. Their arguments are
        parameters: ``set_params(callbacks__NAME__ARG=value)``. See
        docs/callbacks.md.
    on_failure : {{"retry", "skip", "raise"}}, default="retry"
        What to do with a worker whose epoch raised or diverged (NaN or
        infinite loss, weights or optimizer state; never merged).
        ``"retry"`` runs that epoch again from its starting state with
        the same seed: up to ``max_retries`` times when it raised, once
        when it diverged (if ``max_retries >= 1``), then raises.
        ``"skip"`` drops its update (the merge weights are renormalised
        over the others; when none is left the model stays as it was),
        warns, and records it in ``history_``. ``"raise"`` raises at
        once: ``TrainingTaskError`` or ``DivergenceError``, naming the
        epoch and the worker. A task whose worker process died is run
        again by the runtime under ``"retry"`` and ``"skip"`` (not under
        ``"raise"``); see docs/estimators.md.
    max_retries : int, default=2
        With ``on_failure="retry"``: how many more times an epoch that
        raised runs before the fit stops.
    task_timeout : float or None, default=None
        Seconds any one task of the fit's epochs may run (None: no
        limit). One that runs longer fails with ``TaskTimeoutError``
        naming it, the time-out and the epoch; as for a task whose
        worker died, the runtime runs it once more (not a training task
        under ``"raise"``), then the fit stops. See docs/estimators.md.
    grad_clip_norm : float or None, default=None
        Before every optimizer step, clip the gradients' total norm to
        this value (``torch.nn.utils.clip_grad_norm_``).
    grad_clip_value : float or None, default=None
        Before every optimizer step (after ``grad_clip_norm``), clip each
        gradient element to ``[-value, value]``
        (``torch.nn.utils.clip_grad_value_``).
    accumulate_grad_batches : int, default=1
        Step the optimizer every that many minibatches, on the sum of
        their gradients of ``loss / accumulate_grad_batches`` (Lightning's
        semantics); a last incomplete group of an epoch still steps.
        Merges within an epoch (``sync_every`` a fraction or ``"step"``)
        fall between optimizer steps, never inside a group.
    precision : {{"fp32", "bf16", "fp16"}}, default="fp32"
        ``"bf16"``: the forward pass and the loss run under
        ``torch.autocast`` with bfloat16, on the CPU and on CUDA.
        ``"fp16"``: under float16 autocast with a ``torch.amp.GradScaler``
        of each training task's own (a step it skips for gradients that
        overflowed leaves the replica as it was and does not count as
        diverging); CUDA only, refused by ``fit`` before any training
        task where they would run on the CPU. Weights, optimizer states
        and merges stay float32.
    merge_precision : {{"fp32", "bf16"}}, default="fp32"
        What a replica sends to the merge that follows its training
        task. ``"bf16"``: its update from the model its round started
        from, each floating-point entry cast to bfloat16 (half the
        bytes), which the merges widen to float32, average and add to
        the float32 global model; a task no merge follows returns its
        float32 state as with ``"fp32"``. Weights, optimizer states, the
        merged model and the partial sums between merge tasks stay
        float32. See docs/strategies.md.
    recompute_batchnorm : bool or "auto", default="auto"
        At the end of every fit (after the last merge and early
        stopping's choice), recompute the final model's BatchNorm
        running statistics: one task per worker runs it in train mode
        over its rows of the last epoch with the statistics reset and
        ``momentum=None``, and one task averages what they found,
        weighted by their batch counts (SWAP). ``"auto"``: with 4
        replicas or more. Nothing runs for a module without BatchNorm
        layers tracking running statistics. The last epoch's
        ``valid_score`` is of the model before. See docs/strategies.md.
    output : int, str or None, default=None
        For a module whose forward returns several outputs: the one
        ``predict`` returns and the loss is computed on. None: a tensor
        as it is, the first element of a tuple, the first value of a
        dict; an int: that element of a tuple; a str: that key of a dict
        or field of a named tuple (docs/estimators.md).
    loss_input : {{"output", "all"}}, default="output"
        What the criterion receives besides the targets: the selected
        ``output``, or ``"all"`` the forward returned (a tuple or dict as
        it is), for a loss that combines several heads.
    strategy : Strategy subclass or instance, or None, default=None
        A user-written averaging strategy
        (``dislib_nn.strategies.Strategy``) to run instead of this
        class's own: its merges replace the class's (this class's own
        strategy parameters stay at their defaults, and the outer step,
        ``merge_precision`` and ``optimizer_state="average"`` are the
        strategy's to decide); everything else keeps its meaning. Its
        parameters are routed as ``strategy__name=value``. See
        docs/writing_a_strategy.md.
{extra}    **kwargs
        Component arguments with the prefixes ``module__``,
        ``criterion__``, ``optimizer__``, ``lr_schedule__`` and
        ``outer_optimizer__``; ``strategy__`` arguments of ``strategy``;
        ``callbacks__NAME__`` arguments of a callback.

    Attributes
    ----------
    module_ : torch.nn.Module
        The trained module, on the CPU, in eval mode.
    history_ : list of dict
        One dict per epoch: ``epoch``, ``train_loss``, ``valid_loss``,
        ``valid_score``, ``lr``, ``merged``, ``dur_s`` (wall time from the
        end of the previous epoch's last training task, or the start of
        ``fit``, to the end of this epoch's last training task),
        ``worker_samples`` and ``worker_compute_s`` (rows and seconds of
        each worker's training task), ``diverged``, ``skipped`` and
        ``retried`` (the workers whose epoch diverged, raised and was
        dropped, or ran more than once; see ``on_failure``),
        ``errors`` (worker -> what its skipped epoch raised) and
        ``batchnorm_recomputed`` (True in a fit's last record when
        ``recompute_batchnorm`` ran){merges}.
    n_epochs_ : int
        Epochs run, over all calls to ``fit`` and ``partial_fit`` since
        the model was created.
    n_features_in_ : int
        Features per sample (for 2-D X only).
    feature_names_in_ : ndarray of shape (n_features_in_,)
        The column names of X in ``fit``, for a DataFrame whose column
        names are all strings only.
    n_workers_ : int
        Replicas trained in the last fit.
    optimizer_states_ : list of dict or None
        Optimizer state per worker after the last epoch (one, averaged,
        with ``optimizer_state="average"``; None with ``"reset"``), so that
        ``partial_fit`` and ``warm_start`` continue it exactly.
    strategy_state_ : dict
        What the strategy carries into the next fit besides the model and
        the optimizer states, name -> value: the outer step's momentum
        buffer (``"velocity"``) or optimizer state
        (``"outer_optimizer"``), or what a user-written strategy's
        ``carry()`` returned. Checkpoints and ``save`` store it.
"""


_TARGET_SHAPES = """
    Targets reach the criterion with the shape they were given: 1-D
    targets stay 1-D (a module output of shape (n, 1) is read as (n,),
    so that it cannot broadcast against them), 2-D targets are
    multi-output.
"""

_CLASSES = """
    classes_ : ndarray of shape (n_classes,)
        The labels seen in ``fit`` (any values; encoded as 0..n-1).
"""

_MERGES = """; and, for the
        asynchronous strategy, ``merges``: one dict per merge submitted
        after the epoch, with ``worker``, ``index`` (its position in the
        order merges ran), ``staleness`` (tau) and ``weight``"""


def _classifier_example(name):
    return f"""
    Examples
    --------
    >>> import torch
    >>> from sklearn.datasets import load_iris
    >>> from dislib_nn import {name}
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = {name}(
    ...     module=torch.nn.Linear, module__in_features=4,
    ...     module__out_features=3, lr=0.1, n_epochs=3, random_state=0)
    >>> clf.fit(X, y).predict(X[:2]).shape
    (2,)

    A module class of your own may live anywhere, your script or a
    notebook included: what workers could not import is sent by value.
    """


def _regressor_example(name):
    return f"""
    Examples
    --------
    >>> import torch
    >>> from sklearn.datasets import load_diabetes
    >>> from dislib_nn import {name}
    >>> X, y = load_diabetes(return_X_y=True)
    >>> reg = {name}(
    ...     module=torch.nn.Linear, module__in_features=10,
    ...     module__out_features=1, n_epochs=2, random_state=0)
    >>> reg.fit(X, y / 100).predict(X[:2]).shape
    (2,)
    """


def _doc(summary, strategy, criterion, extra, merges, tail):
    params = _PARAMETERS.format(criterion=criterion, extra=extra,
                                merges=merges)
    return f"""{summary}{strategy}    {params}{tail}"""


_SUMMARIES = {
    ("Sync", "Classifier"):
        "Data-parallel classifier averaging replicas every epoch.\n",
    ("Sync", "Regressor"):
        "Data-parallel regressor averaging replicas every epoch.\n",
    ("Async", "Classifier"):
        "Data-parallel classifier merging each replica as it finishes.\n",
    ("Async", "Regressor"):
        "Data-parallel regressor merging each replica as it finishes.\n",
}


def estimator_doc(name):
    """The docstring of the public estimator class ``name`` (e.g.
    ``"AsyncEpochAveragingRegressor"``)."""
    strategy = "Async" if name.startswith("Async") else "Sync"
    target = "Classifier" if name.endswith("Classifier") else "Regressor"
    asynchronous = strategy == "Async"
    text = _ASYNC_STRATEGY if asynchronous else _STRATEGY
    if target == "Classifier":
        criterion = "torch.nn.CrossEntropyLoss"
        tail = _CLASSES + _classifier_example(name)
    else:
        text += _TARGET_SHAPES
        criterion = "torch.nn.MSELoss"
        tail = _regressor_example(name)
    return _doc(_SUMMARIES[strategy, target], text, criterion,
                _ASYNC_PARAMETERS if asynchronous else _SYNC_PARAMETERS,
                _MERGES if asynchronous else "", tail)
