"""The rules the local backends enforce because COMPSs does on a cluster."""

import functools

import numpy as np
import pytest
import torch

from dislib_nn.exceptions import (BackendError, TaskArgumentError,
                                  TaskDefinitionError)
from dislib_nn.runtime import task, wait_on
from tests.runtime import tasks


def test_in_argument_mutated_in_a_task_does_not_change_the_caller(backend):
    big = torch.zeros(100_000)          # travels as shared memory
    small = torch.zeros(4)              # travels inside the pickle
    items, mapping = ["master"], {"master": True}
    seen = wait_on(tasks.mutate_everything(big, small, items, mapping))
    assert seen == 100.0
    assert float(big.abs().sum()) == 0.0
    assert float(small.abs().sum()) == 0.0
    assert items == ["master"] and mapping == {"master": True}


def test_mutating_a_task_result_in_a_task_does_not_change_it(backend):
    x = tasks.full(100_000, 1)
    tasks.mutate_everything(x, torch.zeros(1), [], {})
    assert float(wait_on(tasks.total([x]))) == 100_000.0
    assert float(wait_on(x)[0]) == 1.0


def test_large_arrays_arrive_intact(backend):
    array = np.arange(200_000, dtype=np.int32).reshape(1000, 200)
    tensor = torch.randn(300, 400)
    view = tensor[10:20, ::3]            # a strided view of a big buffer
    got = wait_on(tasks.identity([array, tensor, view]))
    np.testing.assert_array_equal(got[0], array)
    assert torch.equal(got[1], tensor) and torch.equal(got[2], view)


def test_future_in_a_plain_list_is_an_error(backend):
    fut = tasks.add(1, 2)
    with pytest.raises(TaskArgumentError,
                       match=r"argument 'x' of task identity\(\) holds "
                             r".*not a declared collection"):
        tasks.identity([fut])


def test_future_in_a_dict_is_an_error(backend):
    fut = tasks.add(1, 2)
    with pytest.raises(TaskArgumentError, match="not a declared collection"):
        tasks.identity({"x": fut})


def test_lambda_argument_is_an_error(backend):
    with pytest.raises(TaskArgumentError,
                       match=r"argument 'fn' of task apply\(\).*lambda"):
        tasks.apply(lambda v: v, 1)


def test_closure_argument_is_an_error(backend):
    def local_square(v):
        return v * v
    with pytest.raises(TaskArgumentError, match=r"closure"):
        tasks.apply(local_square, 3)


def test_module_level_function_and_partial_are_fine(backend):
    assert wait_on(tasks.apply(tasks.square, 3)) == 9
    assert wait_on(tasks.apply(functools.partial(tasks.square), 4)) == 16


def test_a_rejected_call_leaves_no_state_behind(backend):
    x = torch.zeros(3)
    with pytest.raises(TaskArgumentError):
        tasks.mutate_everything(x, torch.zeros(1), [lambda: 0], {})
    # x was never registered as written: it is still a plain value.
    assert wait_on(x) is x


def _no_return(x):
    x.append(1)


def _bare_return(x):
    if x:
        return
    x.append(1)


def _one_value(x):
    return x


def _pair(x):
    if x:
        return x, x
    return None


def _hinted(x) -> None:
    pass


@pytest.mark.parametrize("fn, expected", [
    (_no_return, 0), (_bare_return, 1), (_one_value, 1), (_pair, 2),
    (_hinted, 1)])
@pytest.mark.parametrize("returns", [None, 0])
def test_omitted_or_zero_returns_are_inferred_as_pycompss_does(
        fn, expected, returns):
    # PyCOMPSs reads returns=0 as "not given" and scans the function: a
    # bare return counts, and so does a "-> None" hint.
    declared = task()(fn) if returns is None else task(returns=0)(fn)
    assert declared.spec.returns == expected


def test_inferred_returns_run_on_the_backend(backend):
    assert wait_on(task()(_one_value)(5)) == 5
    assert wait_on(task(returns=0)(_pair)(3)) == [3, 3]
    assert task(returns=0)(_no_return)([]) is None


@pytest.mark.parametrize("returns", [-1, True, "two", 1.5])
def test_bad_returns_are_rejected(returns):
    with pytest.raises(TaskDefinitionError, match="'returns' must be"):
        task(returns=returns)(_one_value)


def test_direction_for_unknown_parameter_is_rejected():
    with pytest.raises(TaskDefinitionError, match="'blcks'"):
        @task(returns=1, blcks=tasks.COLLECTION_IN)
        def typo(blocks):
            return blocks


def test_bad_depth_is_rejected():
    with pytest.raises(TaskDefinitionError, match="Depth of 'b'.*Got 0"):
        @task(returns=1, b={tasks.Type: tasks.COLLECTION_IN,
                            tasks.Depth: 0})
        def shallow(b):
            return b


def test_wrong_arguments_name_the_task(backend):
    with pytest.raises(TypeError, match=r"task add\(\):"):
        tasks.add(1)


def test_collection_must_be_a_list(backend):
    with pytest.raises(TaskArgumentError, match="must be a list"):
        tasks.total(tasks.full(3, 1))


def test_unassigned_collection_out_element_fails_the_task(backend):
    out = [object(), object()]
    tasks.forget_one(out)
    for element in out:
        with pytest.raises(ValueError,
                           match=r"did not assign element \[1\]"):
            wait_on(element)


def test_wrong_number_of_returns_fails_the_task(backend):
    a, b = tasks.bad_pair(1)
    with pytest.raises(ValueError, match="returns=2 but returned 3 values"):
        wait_on(a)


def test_a_future_cannot_be_pickled(backend):
    import pickle
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(tasks.add(1, 1))


@pytest.mark.parametrize("out, match", [
    ([None, None], r"element \[0\].* is None"),
    ([object(), 0], r"element \[1\].* is 0"),
    ([[object()], [None]], r"element \[1, 0\].* is None"),
])
def test_collection_out_placeholders_follow_compss_rules(backend, out,
                                                          match):
    task_fn = tasks.deal if not isinstance(out[0], list) else \
        tasks.fill_grid
    args = (torch.zeros(4), out) if task_fn is tasks.deal else (out,)
    with pytest.raises(TaskArgumentError, match=match + r".*object\(\)"):
        task_fn(*args)
    # Nothing was submitted: the list is as it was.
    assert not any(type(o).__name__ == "Future" for o in out)


def test_shared_collection_out_placeholder_is_rejected(backend):
    same = object()
    with pytest.raises(TaskArgumentError, match="same object as an earlier"):
        tasks.deal(torch.zeros(4), [same, same])


def test_future_used_after_wait_on_is_rejected(backend):
    fut = tasks.identity(3)
    assert wait_on(fut) == 3
    with pytest.raises(TaskArgumentError, match="already resolved.*empty "
                                                "Future"):
        tasks.identity(fut)
    with pytest.raises(BackendError, match="already resolved by an earlier "
                                           "wait_on"):
        wait_on(fut)


@pytest.mark.parametrize("value", [2 ** 53 + 1, 2 ** 62 + 11, -(2 ** 60)])
def test_ints_compss_would_change_are_rejected(backend, value):
    # PyCOMPSs's worker reads a Java long through float(): 2**62 + 11
    # would arrive as 2**62.
    with pytest.raises(TaskArgumentError, match=r"argument 'x' .* would "
                                                r"arrive as"):
        tasks.identity(value)
    with pytest.raises(TaskArgumentError, match="an element of argument "
                                                "'blocks'"):
        tasks.total([value])


@pytest.mark.parametrize("value", [2 ** 53, 2 ** 64 + 1, np.int64(2 ** 62)])
def test_ints_compss_keeps_exact_are_accepted(backend, value):
    assert wait_on(tasks.identity(value)) == value
