"""Dependencies, collections, versions and commutative groups, per backend."""

import torch

from dislib_nn.runtime import barrier, delete_object, wait_on
from tests.runtime import tasks


def test_future_is_returned_at_once_and_resolves(backend):
    fut = tasks.add(2, 3)
    assert type(fut).__name__ == "Future"
    assert wait_on(fut) == 5


def test_tree_of_merges_matches_serial_sum(backend):
    leaves = [tasks.full(1000, i) for i in range(7)]
    level = leaves
    while len(level) > 1:
        level = [tasks.add(level[i], level[i + 1]) if i + 1 < len(level)
                 else level[i] for i in range(0, len(level), 2)]
    result = wait_on(level[0])
    assert torch.equal(result, torch.full((1000,), float(sum(range(7)))))


def test_chain_of_dependencies(backend):
    x = tasks.identity(0)
    for _ in range(10):
        x = tasks.add(x, 1)
    assert wait_on(x) == 10


def test_collection_in_resolves_futures_depth_1(backend):
    blocks = [tasks.full(50_000, i) for i in range(4)]
    assert wait_on(tasks.total(blocks)) == 50_000 * (0 + 1 + 2 + 3)


def test_collection_in_depth_2_mixes_futures_and_values(backend):
    grid = [[tasks.identity(1), 2], [tasks.add(1, 2), tasks.identity(4)]]
    assert wait_on(tasks.grid_sum(grid)) == [[1.0, 2.0], [3.0, 4.0]]


def test_collection_out_fills_the_list_with_futures(backend):
    x = torch.arange(300_000, dtype=torch.float64)
    out = [object() for _ in range(3)]
    tasks.deal(x, out)
    assert all(type(o).__name__ == "Future" for o in out)
    # The element futures are ordinary dependencies for later tasks.
    total = tasks.total(out)
    parts = wait_on(out)
    for i, part in enumerate(parts):
        assert torch.equal(part, x[i::3])
    assert wait_on(total) == float(x.sum())


def test_collection_out_depth_2(backend):
    out = [[object(), object()], [object(), object(), object()]]
    tasks.fill_grid(out)
    assert wait_on(out) == [[0, 1], [10, 11, 12]]


def test_returns_2_gives_two_futures(backend):
    a, b = tasks.pair(21)
    assert wait_on(b) == 42
    assert wait_on(a) == 21


def test_inout_creates_versions_later_tasks_see(backend):
    x = torch.zeros(3)
    tasks.increment(x)
    seen = tasks.identity(x)
    tasks.increment(x)
    assert torch.equal(wait_on(seen), torch.ones(3))
    assert torch.equal(wait_on(x), torch.full((3,), 2.0))


def test_inout_on_a_future(backend):
    x = tasks.full(4, 1)
    tasks.increment(x)
    tasks.increment(x)
    assert torch.equal(wait_on(x), torch.full((4,), 3.0))


def test_commutative_applies_every_update(backend):
    acc = {"log": [], "count": 0}
    for i in range(6):
        tasks.accumulate(acc, i, 0.0)
    result = wait_on(acc)
    assert result["count"] == 6
    assert sorted(tag for tag, _, _ in result["log"]) == list(range(6))


def test_commutative_updates_never_overlap(backend):
    acc = {"log": [], "count": 0}
    for i in range(4):
        tasks.accumulate(acc, i, 0.2)
    log = sorted(wait_on(acc)["log"], key=lambda entry: entry[1])
    for (_, _, end), (_, start, _) in zip(log, log[1:]):
        assert end <= start


def test_commutative_on_a_future_base_and_later_reader(backend):
    acc = tasks.identity({"log": [], "count": 5})
    tasks.accumulate(acc, "a", 0.0)
    tasks.accumulate(acc, "b", 0.0)
    reader = tasks.identity(acc)      # closes the group: sees both updates
    tasks.accumulate(acc, "c", 0.0)   # a new group on the new version
    assert wait_on(reader)["count"] == 7
    assert wait_on(acc)["count"] == 8


def test_task_called_inside_a_task_runs_inline(backend):
    assert wait_on(tasks.outer(4)) == 50


def test_wait_on_resolves_lists_and_dicts_not_tuples(backend):
    fut = tasks.add(1, 1)
    nested = {"a": [fut, {"b": tasks.add(1, 2)}], "c": 3}
    assert wait_on(nested) == {"a": [2, {"b": 3}], "c": 3}
    kept = wait_on((tasks.add(1, 1),))
    assert type(kept[0]).__name__ == "Future"


def test_wait_on_several_arguments_gives_a_list(backend):
    assert wait_on(tasks.add(1, 1), tasks.add(2, 2)) == [2, 4]


def test_barrier_waits_for_everything(backend):
    acc = {"log": [], "count": 0}
    for i in range(3):
        tasks.accumulate(acc, i, 0.05)
    barrier()
    assert wait_on(acc)["count"] == 3


def test_delete_object_keeps_pending_consumers_working(backend):
    x = tasks.full(100_000, 2)
    y = tasks.add(x, x)
    delete_object(x)
    assert float(wait_on(y)[0]) == 4.0


def test_torch_threads_per_worker_default_to_1(backend):
    assert wait_on(tasks.threads()) == 1


def test_sequential_tasks_leave_the_master_thread_count_alone():
    import torch
    from tests.conftest import use_backend
    use_backend("sequential")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert wait_on(tasks.threads()) == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
        use_backend("local")
