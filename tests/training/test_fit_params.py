"""FitParams: the record of the parameters a fit's strategy and clock
read, built from the estimator's own parameters."""

import pytest

from dislib_nn import (AsyncEpochAveragingClassifier,
                       AsyncEpochAveragingRegressor,
                       SyncEpochAveragingClassifier,
                       SyncEpochAveragingRegressor)
from dislib_nn.training._fit_params import FitParams, fit_params
from tests.training import _models

_CLASSES = [SyncEpochAveragingClassifier, SyncEpochAveragingRegressor,
            AsyncEpochAveragingClassifier, AsyncEpochAveragingRegressor]


@pytest.mark.parametrize("cls", _CLASSES)
def test_every_field_is_the_estimator_s_parameter(cls):
    estimator = cls(module=_models.MLP, batch_size=7, outer_lr=0.5,
                    optimizer_state="average", shuffle="local")
    given = estimator.get_params(deep=False)
    params = fit_params(estimator, cls._strategy_class)
    for name in FitParams._fields:
        if name != "own":
            assert getattr(params, name) == given[name], name
    assert (params.batch_size, params.outer_lr, params.optimizer_state,
            params.shuffle) == (7, 0.5, "average", "local")
    own = cls._strategy_class.parameters
    assert params.own._fields == tuple(own)
    assert params.own._asdict() == {k: given[k] for k in own}


def test_the_strategy_s_own_parameters_are_a_record_of_their_own():
    sync = fit_params(SyncEpochAveragingClassifier(
        module=_models.MLP, merge="sharded"),
        SyncEpochAveragingClassifier._strategy_class)
    lagged = fit_params(AsyncEpochAveragingClassifier(
        module=_models.MLP, max_lag=3),
        AsyncEpochAveragingClassifier._strategy_class)
    assert (sync.own.merge, sync.own.merge_delay) == ("sharded", 0)
    assert (lagged.own.max_lag, lagged.own.staleness_exponent) == (3, 0.5)
    assert not hasattr(sync.own, "max_lag")
    assert type(sync.own).__name__ == "SyncStrategyParams"

