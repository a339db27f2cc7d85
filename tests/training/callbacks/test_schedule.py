"""Per-epoch learning rates computed on the master."""

import pytest
import torch

from dislib_nn.training.callbacks._schedule import LRSchedule


def test_scheduler_class_gives_torch_rates_per_epoch():
    sched = LRSchedule(0.1, torch.optim.lr_scheduler.CosineAnnealingLR,
                       {"T_max": 4})
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    ref = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    expected = []
    for _ in range(5):
        expected.append(opt.param_groups[0]["lr"])
        opt.step()
        ref.step()
    assert [sched.lr_at(e) for e in range(5)] == pytest.approx(expected)
    # A later fit resumes at any epoch, stepping forward only.
    assert LRSchedule(0.1, torch.optim.lr_scheduler.CosineAnnealingLR,
                      {"T_max": 4}).lr_at(3) == pytest.approx(expected[3])
    with pytest.raises(ValueError, match="in order"):
        sched.lr_at(1)


def test_callable_is_a_factor_of_lr():
    sched = LRSchedule(0.2, lambda e: 1 / (1 + e), {})
    assert [sched.lr_at(e) for e in (0, 1, 3)] == pytest.approx(
        [0.2, 0.1, 0.05])


def test_plateau_resumes_from_history():
    history = [{"train_loss": 1.0, "valid_loss": None}] * 3
    sched = LRSchedule(0.1, torch.optim.lr_scheduler.ReduceLROnPlateau,
                       {"patience": 0, "factor": 0.5}, history)
    # The first record set the best loss; the next two did not improve.
    assert sched.lr_at(3) == pytest.approx(0.025)
