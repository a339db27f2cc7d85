"""``python -m dislib_nn.demo`` runs and prints what it promises."""

import pytest

from dislib_nn import demo
from tests.conftest import use_backend


@pytest.fixture(scope="module", autouse=True)
def _local():
    use_backend("local")


def test_demo_prints_epochs_and_both_accuracies(capsys):
    ours, theirs = demo.main(["--epochs", "2", "--workers", "2"])
    out = capsys.readouterr().out
    assert "epoch   1/2" in out and "epoch   2/2" in out
    assert "dislib_nn, 2 workers, epoch averaging" in out
    assert "plain PyTorch, 1 process" in out
    # ``theirs``: the demo's plain PyTorch loop, from the same initial
    # weights, epochs, batch and rate. Two workers averaged after each of
    # two epochs trail it a little (0.92 against 0.98 here); a model that
    # learned nothing scores 0.1.
    assert abs(ours - theirs) <= 0.1
