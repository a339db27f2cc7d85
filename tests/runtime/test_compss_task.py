"""What a task learns from COMPSs's environment: threads, GPUs, slots.

These are the pure functions behind ``runtime.task_threads``,
``task_cuda_devices``, ``gpus_per_task`` and the default ``n_workers``
under COMPSs, fed with the environment COMPSs's executors set (see
``pycompss/worker/piper/commons/executor.py``: ``bind_gpus``,
``setup_environment``).
"""

import pytest

from dislib_nn.runtime import _compss_task as ct
from tests._compss_sources import PYCOMPSS, needs_sources


def test_threads_come_from_compss_num_threads():
    assert ct.task_threads({"COMPSS_NUM_THREADS": "18"}) == 18
    assert ct.task_threads({}) is None
    assert ct.task_threads({"COMPSS_NUM_THREADS": "x"}) is None


@pytest.mark.parametrize("raw, ids", [
    (None, []), ("-", []), ("", []), ("2", [2]), ("1,3", [1, 3])])
def test_binded_gpus_are_parsed_as_executors_set_them(raw, ids):
    env = {} if raw is None else {"COMPSS_BINDED_GPUS": raw}
    assert ct.binded_gpus(env) == ids


def test_a_task_without_gpus_gets_none_even_on_a_gpu_node():
    # CUDA_VISIBLE_DEVICES is unset for tasks without a GPU constraint:
    # they would see every GPU; the binding says they were given none.
    assert ct.cuda_devices({}) == []


@pytest.mark.parametrize("ids, base, expected", [
    ([2], None, [2]),            # CUDA started with every GPU visible
    ([3, 1], None, [3, 1]),
    ([2], [2], [0]),             # CUDA started inside a task given GPU 2
    ([3], [1, 3], [1]),
])
def test_node_ids_map_to_this_process_cuda_indices(ids, base, expected):
    assert ct.map_to_cuda(ids, base) == expected


def test_a_gpu_hidden_from_this_process_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"GPU\(s\) \[3\].*"
                       r"CUDA_VISIBLE_DEVICES=1, which hides \[3\]"):
        ct.map_to_cuda([3], [1])


@pytest.mark.parametrize("env, cpus, gpus, slots", [
    ({}, 48, 0, 48),
    ({"ComputingUnits": "18"}, 80, 4, 4),
    ({"ComputingUnits": "18", "ComputingUnitsGPUs": "1"}, 80, 4, 4),
    ({"ComputingUnitsGPUs": "2"}, 80, 4, 2),
    ({"ComputingUnits": "128"}, 80, 0, 1),
    ({"ComputingUnitsGPUs": "1"}, 80, 0, 1),
])
def test_slots_per_node_follow_the_task_constraint(env, cpus, gpus, slots):
    assert ct.slots_per_node(env, cpus, gpus) == slots
    assert ct.gpus_per_task(env) == int(env.get("ComputingUnitsGPUs", 0))


@needs_sources
def test_under_compss_blocks_are_plain_memory(monkeypatch):
    # Results travel through files under COMPSs: a buffer in /dev/shm
    # would only cost a descriptor (and room in a container's small shm).
    import sys

    monkeypatch.syspath_prepend(PYCOMPSS)
    monkeypatch.delitem(sys.modules, "dislib_nn.runtime._compss",
                        raising=False)
    from dislib_nn import runtime
    from dislib_nn.runtime import _compss
    big = (256, 1024)
    assert not _compss.shared_empty(big).untyped_storage().is_shared()
    assert runtime.shared_empty(big).untyped_storage().is_shared()
