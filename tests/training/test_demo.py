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
    assert "the 1-thread row is the like-for-like one" in out
    # ``theirs``: the demo's plain PyTorch loop, from the same initial
    # weights, epochs, batch and rate. Two workers averaged after each of
    # two epochs trail it a little (0.92 against 0.98 here); a model that
    # learned nothing scores 0.1.
    assert abs(ours - theirs) <= 0.1


def test_the_note_says_when_threads_contend():
    # Two threads 15 times slower than one, as on a busy machine: the
    # note says the row measures contention.
    note = demo.threads_note([(2, 0.97, 30.0), (1, 0.97, 2.0)], 2)
    assert "2 threads took 15.0x the time of 1: they contended" in note
    assert "not a speed-up of dislib_nn" in note
    calm = demo.threads_note([(2, 0.97, 1.5), (1, 0.97, 2.0)], 2)
    assert "contended" not in calm and "same CPUs at once" in calm
    assert demo.threads_note([(1, 0.97, 2.0)], 2).endswith(
        "like-for-like one)")
