"""The local backend runs independent tasks at the same time."""

import pytest

from dislib_nn.runtime import wait_on
from tests.runtime import tasks


def test_independent_tasks_run_concurrently(local, tmp_path):
    # Each task waits for the other's file: both succeed only together.
    a = tasks.rendezvous(str(tmp_path), "a", "b", 60)
    b = tasks.rendezvous(str(tmp_path), "b", "a", 60)
    (met_a, start_a, end_a), (met_b, start_b, end_b) = wait_on([a, b])
    assert met_a and met_b
    assert start_a < end_b and start_b < end_a


def test_commutative_order_is_free(local):
    # The first update waits for a slow input; the second need not wait.
    acc = {"log": [], "count": 0}
    slow = tasks.after("first", 1.0)
    tasks.accumulate(acc, slow, 0.0)
    tasks.accumulate(acc, "second", 0.0)
    log = wait_on(acc)["log"]
    assert [tag for tag, _, _ in log] == ["second", "first"]


def test_tasks_spread_over_workers(local):
    stamps = wait_on([tasks.stamp(i, 0.3) for i in range(4)])
    assert len({pid for _, pid, _, _ in stamps}) == 2


@pytest.mark.parametrize("n", [1, 50])
def test_many_small_tasks_all_complete(local, n):
    assert wait_on([tasks.add(i, i) for i in range(n)]) == \
        [2 * i for i in range(n)]


def test_a_task_of_a_module_another_thread_imports_is_found(tmp_path,
                                                            monkeypatch):
    # A worker of several threads (dask's --nthreads) may get two tasks
    # of one module at once: while one thread imports the module, the
    # other must wait for its tasks to be defined, not fail to find them.
    import importlib
    import sys
    import threading
    import time
    import uuid

    from dislib_nn.runtime import _execute
    name = "slow_import_" + uuid.uuid4().hex[:8]
    (tmp_path / f"{name}.py").write_text(
        "import time\n\ntime.sleep(0.5)\n\n\ndef work():\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    importing = threading.Thread(target=importlib.import_module,
                                 args=(name,))
    importing.start()
    while name not in sys.modules:      # the import has begun
        time.sleep(0.001)
    found = _execute.resolve_task(name, "work")
    importing.join()
    assert found() == 7
