"""The same fit on every local backend gives the same model."""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification

from dislib_nn import (AsyncEpochAveragingClassifier,
                       SyncEpochAveragingClassifier)
from tests.conftest import BACKENDS, use_backend
from tests.training import _models


# The asynchronous strategy is reproducible when merges cannot reorder:
# max_lag=0.
@pytest.mark.parametrize("estimator", [
    SyncEpochAveragingClassifier,
    lambda **kwargs: AsyncEpochAveragingClassifier(max_lag=0, **kwargs),
], ids=["sync", "async"])
def test_same_model_on_every_backend(estimator):
    X, y = make_classification(n_samples=90, n_features=4, n_informative=3,
                               n_redundant=0, n_classes=3, random_state=0)
    states = {}
    try:
        for name in BACKENDS:
            use_backend(name)
            clf = estimator(
                module=_models.Classifier, n_workers=3, n_epochs=3,
                batch_size=8, lr=0.05, optimizer__momentum=0.9,
                optimizer_state="average", validation_fraction=0.2,
                random_state=0)
            clf.fit(X.astype(np.float32), y)
            states[name] = clf.module_.state_dict()
    finally:
        use_backend("local")
    first, *others = states.values()
    for other in others:
        for key in first:
            torch.testing.assert_close(first[key], other[key], atol=1e-6,
                                       rtol=1e-6, msg=key)
