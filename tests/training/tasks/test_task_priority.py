"""The tasks every worker waits for are declared ``priority=True``
(docs/runtime.md, "Which ready task starts first"); the rest are not."""

import pytest

from dislib_nn.training.tasks import _async_merge, _blocks, _reduce, _train

ROUND = [_train.train_task_for(device, on_failure)
         for device in ("cpu", "cuda") for on_failure in ("retry", "raise")]
ROUND += [_reduce._merge_pair, _reduce._merge_pair_with_optims,
          _reduce._keep_finite, _reduce._delayed_start,
          _reduce._momentum_step, _reduce._optimizer_step,
          _reduce._merge_root_stepped,
          _async_merge._fold, _async_merge._fold_round]
ASIDE = [_blocks._score_block, _blocks._predict_block,
         _blocks._split_block]


@pytest.mark.parametrize("task", ROUND, ids=lambda t: t.__qualname__)
def test_the_rounds_tasks_have_priority(task):
    assert task.spec.priority is True


@pytest.mark.parametrize("task", ASIDE, ids=lambda t: t.__qualname__)
def test_scoring_and_data_tasks_do_not(task):
    assert task.spec.priority is False
