"""Predictions and scores of a fitted estimator.

On arrays they run in the calling process, on the CPU, batch by batch.
On DsTensors they run as one task per block: ``predict`` and
``predict_proba`` return DsTensors, ``score`` gathers counts and sums
(never X, never predictions) and combines them on the master; a
``scoring`` that no counts give gathers the module's outputs instead
(never X).
"""

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from dislib_nn import runtime
from dislib_nn.data import DsTensor
from dislib_nn.data._dataset import is_dataset
from dislib_nn.training import _input_checks as _inputs
from dislib_nn.training import _labels, _metrics
from dislib_nn.training._components import Components
from dislib_nn.training._fit_data import feature_names
from dislib_nn.training._scoring import scorer_callable, scorer_of
from dislib_nn.training.tasks import _blocks
from dislib_nn.training.tasks._held import held
from dislib_nn.training.tasks._sharded import ShardedModel
from dislib_nn.training.tasks._torch_loop import forward_batches, to_cpu

__all__ = ["PredictMixin"]

_PREDICT_BATCH = 1024


class PredictMixin:
    """``predict``, ``predict_proba`` and ``score`` for both estimators."""

    def _forward(self, X, what):
        """``what`` of the fitted module on X: array in, array out;
        DsTensor in, DsTensor out (computed by tasks)."""
        check_is_fitted(self)
        if is_dataset(X):
            return self._forward_dataset(X, what)
        X = self._model_input(X)
        self._check_feature_names(feature_names(X))
        X = _inputs.check_x(X)
        self._check_predict_input(X)
        if _inputs.is_ds_tensor(X):
            return self._forward_ds(X, what)
        x = np.ascontiguousarray(X)
        if not x.flags.writeable:       # torch warns on read-only memory
            x = x.copy()
        x = torch.from_numpy(x)
        raw = forward_batches(self.module_, x, self._predict_batch(),
                              torch.device("cpu"), self._output)
        return self._decode(raw, what)

    def _forward_dataset(self, dataset, what):
        """A torch Dataset's x's read by tasks and predicted by tasks;
        the outputs come back as for an array X."""
        x, _ = self._unpack_dataset(dataset, None, "predict")
        self._check_predict_input(x)
        return self._decode(self._forward_ds(x, "raw").collect(), what)

    def _decode(self, raw, what):
        if what == "proba":
            return torch.softmax(raw.to(torch.float64), dim=1).numpy()
        if what == "labels":
            return self.classes_[raw.argmax(dim=1).numpy()]
        # Arrays out are float64, as scikit-learn's regressors return.
        return raw.to(torch.float64).numpy()

    def _forward_ds(self, X, what):
        classes = None
        if what == "labels":
            classes = _labels.as_label_tensor(self.classes_)
            if classes is None:
                raise TypeError(
                    f"predict on a DsTensor returns a DsTensor of labels, "
                    f"which holds numbers only, but classes_ are not "
                    f"numbers (dtype {self.classes_.dtype}). Use "
                    f"predict_proba(X) and classes_, or pass X as an "
                    f"array.")
        sample_shape, dtype = self._output_spec(what, classes)
        components, state = self._fitted_for_tasks()
        blocks = [_blocks._predict_block(
            components, state, b, self._output, what, self._predict_batch(),
            str(self.device), classes) for b in X.blocks]
        return DsTensor(blocks, X.block_sizes, sample_shape, dtype,
                        owned=True)

    def _fitted_for_tasks(self):
        """The fitted module as block tasks take it: a recipe without
        its weights and its state, held by the runtime, so that the
        weights leave the master once however many blocks X has."""
        recipe = Components(self.module_, {}, None, {}, None, {})
        return recipe.for_tasks(), held(to_cpu(self.module_.state_dict()))

    def _output_spec(self, what, classes):
        """Sample shape and dtype of predictions, from a 1-sample forward."""
        if what == "labels":
            return (), classes.dtype
        probe = torch.zeros((1,) + self._sample_shape,
                            dtype=self._output.x_dtype)
        raw = forward_batches(self.module_, probe, 1, torch.device("cpu"),
                              self._output)
        return tuple(raw.shape[1:]), (torch.float32 if what == "proba"
                                      else raw.dtype)

    def _submit_scores(self, components, state, x, y, classes, with_loss,
                       wants=()):
        score, model = _blocks._score_block, state
        if isinstance(state, ShardedModel):
            score, model = _blocks._score_block_shards, list(state)
        return [score(components, model, xb, yb, self._output, with_loss,
                      self._predict_batch(), str(self.device), classes,
                      wants)
                for xb, yb in zip(x.blocks, y.blocks)]

    def _predict_batch(self):
        return max(self.batch_size, _PREDICT_BATCH)

    def _score(self, X, y, sample_weight=None):
        """``scoring`` (accuracy for a classifier, R² for a regressor by
        default) of predictions on X: on DsTensors from block statistics,
        or, for a scorer no statistics give, from the module outputs the
        blocks return (:mod:`._scoring`)."""
        check_is_fitted(self)
        X, y = self._unpack_dataset(X, y, "score")
        # Arrays are scored by predict on X as given (packed here when it
        # is several inputs).
        given, X = X, self._model_input(X)
        names = feature_names(X)
        # Other column names than fit's: an error before any other; the
        # warnings for names missing on one side come once, below.
        self._check_feature_names(names, warn=False)
        X = _inputs.check_x(X)
        y = _inputs.check_y(y, self._targets)
        _inputs.check_lengths(X, y)
        if not (_inputs.is_ds_tensor(X) or _inputs.is_ds_tensor(y)):
            # predict checks the feature names and the shape of X.
            if self.scoring is None:
                return self._score_arrays(given, y, sample_weight)
            return self._scorer_on_arrays(given, y, sample_weight)
        self._check_feature_names(names)
        self._check_predict_input(X)
        if sample_weight is not None:
            raise TypeError("score() takes sample_weight with array input "
                            "only; X or y is a DsTensor.")
        sizes = X.block_sizes if _inputs.is_ds_tensor(X) else y.block_sizes
        x = _inputs.as_ds_tensor(X, block_sizes=sizes)
        y, classes = self._targets.score_labels(self, y)
        y = _inputs.as_ds_tensor(y, block_sizes=sizes)
        components, state = self._fitted_for_tasks()
        scorer = scorer_of(self)
        stats = runtime.wait_on(self._submit_scores(
            components, state, x, y, classes, with_loss=False,
            wants=scorer.wants))
        return scorer(_metrics.combine_all(stats))

    def _score_arrays(self, X, y, sample_weight):
        raise NotImplementedError

    def _scorer_on_arrays(self, X, y, sample_weight):
        """``scoring`` on arrays: the scorer itself (scikit-learn's, for
        a name), called with this estimator (labels unseen in fit raise
        first, as without ``scoring``)."""
        self._targets.score_labels(self, y)
        scorer = scorer_callable(self.scoring)
        if sample_weight is None:   # a function of one's own may take none
            return float(scorer(self, X, y))
        return float(scorer(self, X, y, sample_weight=sample_weight))
