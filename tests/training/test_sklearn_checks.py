"""scikit-learn's estimator checks (``parametrize_with_checks``).

The checks that cannot pass are listed in ``EXPECTED_FAILED`` with the
reason for each, and in docs/sklearn_conformance.md.
"""

import pytest
import torch
from sklearn.utils.estimator_checks import parametrize_with_checks

from dislib_nn import (AsyncEpochAveragingClassifier,
                       AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from tests.conftest import use_backend
from tests.training import _models


@pytest.fixture(scope="module", autouse=True)
def _sequential():
    use_backend("sequential")
    yield
    use_backend("local")


ESTIMATORS = [
    classifier(
        # BatchNorm cannot train on a batch of one sample, which
        # check_fit2d_1sample asks for: that is PyTorch's rule, not ours.
        module=_models.Classifier, module__batch_norm=False,
        optimizer=torch.optim.Adam, lr=0.05,
        n_epochs=10, batch_size=16, n_workers=2, random_state=0)
    for classifier in (SyncEpochAveragingClassifier,
                       AsyncEpochAveragingClassifier)
] + [
    regressor(
        module=_models.MLP, optimizer=torch.optim.Adam, lr=0.05,
        n_epochs=10, batch_size=16, n_workers=2, random_state=0)
    for regressor in (SyncEpochAveragingRegressor,
                      AsyncEpochAveragingRegressor)
]

EXPECTED_FAILED = {}


def _expected_failed(estimator):
    return EXPECTED_FAILED.get(type(estimator).__name__, {})


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
