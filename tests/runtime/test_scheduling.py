"""The order in which the local backend starts tasks that become ready
together."""

from dislib_nn import runtime
from dislib_nn.runtime import wait_on
from tests.conftest import use_backend
from tests.runtime import tasks


def test_readers_made_ready_by_one_task_start_in_submission_order(tmp_path):
    # One worker: what starts first is what the engine dispatched first.
    # A configuration no other test uses, so a pool of its own (a test
    # in test_failures.py breaks the pool of 1 worker x 1 thread).
    runtime.set_backend("local", n_workers=1, threads_per_worker=2)
    try:
        path = str(tmp_path / "order")
        first, second = tasks.pair(tasks.after(1, 0.5))
        # Submitted first, reads both outputs; the later one reads one.
        both = tasks.log_name(path, "reads both", first, second)
        one = tasks.log_name(path, "reads one", first)
        wait_on([both, one])
        with open(path) as f:
            assert f.read().split("\n")[:2] == ["reads both", "reads one"]
    finally:
        use_backend("local")
