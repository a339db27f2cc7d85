"""The order in which the backends start tasks that become ready
together: submission order, ``priority=True`` first."""

import re
import time

import pytest

from dislib_nn import runtime
from dislib_nn.exceptions import InvalidParameterError, TaskDefinitionError
from dislib_nn.runtime import wait_on
from tests.conftest import use_backend
from tests.runtime import tasks


@pytest.fixture
def one_worker():
    # One worker: what starts first is what the engine dispatched first.
    # A configuration no other test uses, so a pool of its own (a test
    # in test_failures.py breaks the pool of 1 worker x 1 thread).
    runtime.set_backend("local", n_workers=1, threads_per_worker=2)
    yield
    use_backend("local")


def _first_two_logged(path):
    with open(path) as f:
        return f.read().split("\n")[:2]


def test_readers_made_ready_by_one_task_start_in_submission_order(
        one_worker, tmp_path):
    path = str(tmp_path / "order")
    first, second = tasks.pair(tasks.after(1, 0.5))
    # Submitted first, reads both outputs; the later one reads one.
    both = tasks.log_name(path, "reads both", first, second)
    one = tasks.log_name(path, "reads one", first)
    wait_on([both, one])
    assert _first_two_logged(path) == ["reads both", "reads one"]


def test_priority_task_made_ready_with_others_starts_first(one_worker,
                                                          tmp_path):
    path = str(tmp_path / "order")
    first, second = tasks.pair(tasks.after(1, 0.5))
    plain = tasks.log_name(path, "plain", first)
    urgent = tasks.log_name_first(path, "priority", first)
    wait_on([plain, urgent])
    assert _first_two_logged(path) == ["priority", "plain"]


def _queued_behind_a_busy_worker(path):
    """Two tasks ready at once while the only worker is busy: the one
    submitted last has priority. (Submitted 0.3 s apart: dask itself
    starts tasks submitted more than 0.1 s earlier first.)"""
    busy = tasks.after(1, 1.5)
    plain = tasks.log_name(path, "plain", 1)
    time.sleep(0.3)
    urgent = tasks.log_name_first(path, "priority", 2)
    wait_on([busy, plain, urgent])
    return _first_two_logged(path)


def test_queued_priority_task_overtakes_earlier_ones(one_worker, tmp_path):
    assert _queued_behind_a_busy_worker(str(tmp_path / "order")) == \
        ["priority", "plain"]


def test_queued_priority_task_overtakes_earlier_ones_on_dask(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1,
                                  processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False):
        runtime.set_backend("dask", address=cluster.scheduler_address)
        try:
            assert _queued_behind_a_busy_worker(
                str(tmp_path / "order")) == ["priority", "plain"]
        finally:
            use_backend("local")


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_priority_must_be_a_bool(value):
    with pytest.raises(TaskDefinitionError,
                       match=r"'priority' must be True or False\. Got "
                             + re.escape(repr(value))):
        @runtime.task(returns=1, priority=value)
        def anything(x):
            return x


@pytest.mark.parametrize("node", [-1, 1.5, True, "0"])
def test_placed_takes_a_node_index(node):
    with pytest.raises(InvalidParameterError, match=(
            rf"runtime.placed\(\) takes a node index, an int >= 0, or "
            rf"None; got node={re.escape(repr(node))}")):
        with runtime.placed(node):
            pass


def test_placed_blocks_nest_and_change_nothing_on_one_machine():
    from dislib_nn.runtime import _placement
    with runtime.placed(3):
        with runtime.placed(1):
            inner = _placement.current()
            added = tasks.add(1, 2)
        outer = _placement.current()
    assert (inner.node, outer.node, _placement.current()) == (1, 3, None)
    assert wait_on(added) == 3


@pytest.mark.parametrize("kwargs, match", [
    ({"node": 0, "of": 0}, "of=the number of replicas, an int >= 1, or "
                           "None; got of=0"),
    ({"node": 0, "of": 2.0}, "got of=2.0"),
    ({"node": 2, "of": 2}, "a replica index below of=2; got node=2"),
    ({"node": None, "of": 2}, "a replica index below of=2; got node=None")])
def test_placed_takes_a_replica_index_below_of(kwargs, match):
    with pytest.raises(InvalidParameterError, match=re.escape(match)):
        with runtime.placed(**kwargs):
            pass


def test_replicas_of_more_than_the_nodes_share_nodes_in_runs():
    from dislib_nn.runtime._placement import Placement, node_index

    def nodes(n_replicas, n_nodes):
        return [node_index(Placement(j, n_replicas), n_nodes)
                for j in range(n_replicas)]
    # Neighbours, which the merge tree pairs first, share a node.
    assert nodes(8, 4) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert nodes(4, 2) == [0, 0, 1, 1]
    assert nodes(6, 4) == [0, 0, 1, 2, 2, 3]
    # No more replicas than nodes: one each, in order.
    assert nodes(3, 4) == [0, 1, 2]
    assert nodes(4, 4) == [0, 1, 2, 3]
    # A node named without `of`: modulo the nodes.
    assert [node_index(Placement(k), 3) for k in range(5)] == \
        [0, 1, 2, 0, 1]
