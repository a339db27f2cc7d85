"""``runtime.count_tasks()``: the tasks a block submits, by name, on
every backend whose task graph is the library's."""

import threading

from dislib_nn import runtime
from dislib_nn.runtime import wait_on
from tests.runtime import tasks


def test_tasks_are_counted_by_name_while_the_block_is_open(backend):
    before = tasks.add(1, 1)
    with runtime.count_tasks() as counts:
        two = tasks.add(before, 1)
        same = [tasks.identity(i) for i in range(3)]
        assert counts == {"add": 1, "identity": 3}     # as they are submitted
    after = tasks.add(two, 1)
    assert counts == {"add": 1, "identity": 3}
    assert wait_on(after) == 4 and wait_on(same) == [0, 1, 2]


def test_a_task_called_inside_a_task_is_a_call_not_a_task(backend):
    with runtime.count_tasks() as counts:
        assert wait_on(tasks.outer(1)) == 20
    assert counts == {"outer": 1}


def test_nested_blocks_each_count_what_was_submitted_while_open(backend):
    with runtime.count_tasks() as whole:
        tasks.add(1, 1)
        with runtime.count_tasks() as inner:
            tasks.add(1, 2)
        tasks.identity(2)
    runtime.barrier()
    assert whole == {"add": 2, "identity": 1}
    assert inner == {"add": 1}


def test_tasks_submitted_by_other_threads_are_counted(local):
    results = []

    def submit():
        results.append(tasks.add(2, 2))
    with runtime.count_tasks() as counts:
        threads = [threading.Thread(target=submit) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert counts == {"add": 4}
    assert wait_on(results) == [4] * 4
