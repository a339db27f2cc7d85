"""The seed draws the benchmarks take from the library (not copies)."""

import numpy as np

from dislib_nn import SyncEpochAveragingClassifier
from dislib_nn.training import _seeds
from tests.training import _models


def test_draw_base_is_the_draw_of_fit(sequential):
    X = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    y = np.arange(32) % 3
    for random_state in (0, 7, np.random.RandomState(3)):
        expected = _seeds.draw_base(
            np.random.RandomState(3) if not isinstance(random_state, int)
            else random_state)
        est = SyncEpochAveragingClassifier(
            module=_models.Classifier, n_epochs=1,
            random_state=random_state).fit(X, y)
        assert est._seed == expected


def test_train_seeds_follow_the_epoch_streams():
    # The streams fit's epoch data derives a task's seed from
    # (strategies/_dealing.EpochData.train_seed, seeded with EPOCHS).
    base = _seeds.draw_base(0)
    epochs = _seeds.seed_for(base, _seeds.EPOCHS)
    assert _seeds.train_seeds(base, 3, 1) == tuple(
        _seeds.seed_for(epochs, _seeds.TRAIN, e, 1) for e in range(3))
    assert len(set(_seeds.train_seeds(base, 3, 0)
                   + _seeds.train_seeds(base, 3, 1))) == 6
