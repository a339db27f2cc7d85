"""on_failure policies: RETRY, FAIL, IGNORE, CANCEL_SUCCESSORS, @on_failure.

Fault injection: the tasks in tests/runtime/failing.py raise (or kill
their own process) on their first N calls, counted in a file.
"""

import json
import os
import subprocess
import sys

import pytest

from dislib_nn.exceptions import (TaskDefinitionError, TaskError,
                                  TaskFailureWarning, WorkerDiedError)
from dislib_nn.runtime import INOUT, on_failure, task, wait_on
from tests._ahead import RunAhead
from tests.compss._emulator import clean_env, compss_command, needs_emulator
from tests.runtime import failing, tasks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
APP = os.path.join(os.path.dirname(__file__), "scripts", "failure_app.py")

pytestmark = pytest.mark.filterwarnings("ignore::dislib_nn.exceptions."
                                        "TaskFailureWarning")


def test_retry_runs_a_failed_task_again(backend, tmp_path):
    path = str(tmp_path / "calls")
    with pytest.warns(TaskFailureWarning, match=r"flaky\(\) failed .*"
                      r"injected failure 1 of 1.*attempt 2 of 2"):
        result = failing.flaky(path, 1, 7)
        reader = tasks.add(result, 1)
        assert wait_on(reader) == 8 and wait_on(result) == 7
    assert failing.calls(path) == 2


def test_retry_gives_up_after_two_executions(backend, tmp_path):
    path = str(tmp_path / "calls")
    with pytest.raises(ValueError, match="injected failure 2 of 5") as info:
        wait_on(failing.flaky(path, 5, 7))
    assert failing.calls(path) == 2
    assert any("on each of its 2 attempts" in n for n in info.value.__notes__)


def test_retry_starts_again_from_the_inout_argument(backend, tmp_path):
    acc = {"n": 0}
    result = failing.flaky_increment(acc, str(tmp_path / "calls"), 1)
    assert wait_on(result) == 1 and wait_on(acc) == {"n": 1}


def test_retried_commutative_updates_count_once(backend, tmp_path):
    acc = {"sum": 0}
    for i, (failures, value) in enumerate([(1, 1), (0, 2), (1, 4), (0, 8)]):
        failing.flaky_add(acc, str(tmp_path / str(i)), failures, value)
    assert wait_on(acc) == {"sum": 15}
    assert [failing.calls(str(tmp_path / str(i))) for i in range(4)] == \
        [2, 1, 2, 1]


def test_fail_does_not_retry(backend, tmp_path):
    path = str(tmp_path / "calls")
    with pytest.raises(ValueError, match="injected failure 1 of 1") as info:
        wait_on(failing.flaky_fail(path, 1, 7))
    assert failing.calls(path) == 1
    assert not any("attempts" in n for n in info.value.__notes__)


def test_ignore_gives_none_and_readers_run_with_it(backend, tmp_path):
    with pytest.warns(TaskFailureWarning, match=r"flaky_ignore\(\) raised "
                      r"ValueError: injected failure 1 of 1; on_failure="
                      r"'IGNORE'"):
        ignored = failing.flaky_ignore(str(tmp_path / "a"), 1, 7)
        reader = failing.describe(ignored, str(tmp_path / "b"))
        assert wait_on(reader) == "NoneType"
    assert wait_on(ignored) is None
    assert failing.calls(str(tmp_path / "a")) == 1


def test_on_failure_defaults_replace_result_and_inout(backend, tmp_path):
    acc = {"n": 0}
    result = failing.flaky_update(acc, str(tmp_path / "calls"), 1)
    assert wait_on(result) == -1 and wait_on(acc) == {"n": -1}
    # It succeeds when it does not raise.
    acc = {"n": 0}
    result = failing.flaky_update(acc, str(tmp_path / "calls"), 1)
    assert wait_on(result) == 1 and wait_on(acc) == {"n": 1}


def test_ignore_of_several_returns_without_defaults(backend, tmp_path):
    # PyCOMPSs's worker cannot split None into two results: the
    # execution fails and, IGNORE'd, its outputs do not exist.
    first, second = failing.flaky_pair(str(tmp_path / "calls"), 1)
    reader = failing.describe(first, str(tmp_path / "reader"))
    with pytest.raises(TaskError, match=r"describe\(\) could not run: it "
                       r"reads an output of task flaky_pair\(\)"):
        wait_on(reader)
    with pytest.warns(TaskFailureWarning, match="has no value"):
        assert wait_on([first, second]) == [None, None]
    assert failing.calls(str(tmp_path / "reader")) == 0


def test_cancel_successors_cancels_readers_only(backend, tmp_path):
    cancelled = failing.flaky_cancel(str(tmp_path / "a"), 1, 7)
    reader = failing.describe(cancelled, str(tmp_path / "b"))
    second = failing.describe(reader, str(tmp_path / "b"))
    independent = failing.flaky(str(tmp_path / "c"), 0, 8)
    with pytest.warns(TaskFailureWarning, match="has no value"):
        assert wait_on([second, reader, cancelled]) == [None, None, None]
    assert wait_on(independent) == 8
    assert failing.calls(str(tmp_path / "a")) == 1
    assert failing.calls(str(tmp_path / "b")) == 0


def test_killed_worker_is_retried(local, tmp_path):
    path = str(tmp_path / "calls")
    with pytest.warns(TaskFailureWarning, match=r"flaky\(\) failed "
                      r"\(WorkerDiedError: .*SIGKILL"):
        assert wait_on(failing.flaky(path, 1, 7, fault="kill")) == 7
    assert failing.calls(path) == 2


def test_worker_killed_twice_is_reported(local, tmp_path):
    path = str(tmp_path / "calls")
    with pytest.raises(WorkerDiedError, match=r"task flaky\(\) died "
                       r"\(killed by signal SIGKILL\)"):
        wait_on(failing.flaky(path, 2, 7, fault="kill"))
    assert failing.calls(path) == 2
    assert wait_on([failing.flaky(str(tmp_path / "ok"), 0, i)
                    for i in range(3)]) == [0, 1, 2]


def test_killed_worker_with_fail_is_not_retried(local, tmp_path):
    path = str(tmp_path / "calls")
    with pytest.raises(WorkerDiedError, match="died"):
        wait_on(failing.flaky_fail(path, 1, 7, fault="kill"))
    assert failing.calls(path) == 1


def test_killed_worker_with_ignore_leaves_no_output(local, tmp_path):
    # The worker could not give defaults: the output does not exist, a
    # reader fails, wait_on gives None (as COMPSs does).
    ignored = failing.flaky_ignore(str(tmp_path / "a"), 1, 7,
                                   fault="kill")
    reader = failing.describe(ignored, str(tmp_path / "b"))
    with pytest.raises(TaskError, match=r"reads an output of task "
                       r"flaky_ignore\(\), which failed"):
        wait_on(reader)
    assert wait_on(ignored) is None
    assert failing.calls(str(tmp_path / "b")) == 0


def test_killed_worker_with_cancel_successors(local, tmp_path):
    cancelled = failing.flaky_cancel(str(tmp_path / "a"), 1, 7,
                                     fault="kill")
    reader = failing.describe(cancelled, str(tmp_path / "b"))
    assert wait_on(reader) is None and wait_on(cancelled) is None
    assert failing.calls(str(tmp_path / "b")) == 0


@needs_emulator
def test_same_outcomes_as_pycompss(fresh_python, tmp_path):
    """The local backends against the real binding (compss-emulator)."""
    env = dict(clean_env(), PYTHONPATH=ROOT)
    commands = {"compss": compss_command(APP, pythonpath=ROOT),
                "local": [sys.executable, APP],
                "sequential": [sys.executable, APP]}
    # The three applications are independent: they run side by side.
    runs = RunAhead(jobs=len(commands), timeout=300)
    try:
        for name, command in commands.items():
            folder = tmp_path / name
            folder.mkdir()
            run_env = dict(env, DISLIB_NN_BACKEND=name) \
                if name == "sequential" else env
            runs.start(name, command + [str(folder)],
                       env=run_env, cwd=os.path.dirname(APP))
        reports = {}
        for name in commands:
            done = runs.result(name)
            assert done.returncode == 0, done.stderr[-3000:]
            reports[name] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        runs.close()
    assert reports["local"] == reports["compss"]
    assert reports["sequential"] == reports["compss"]
    assert reports["compss"]["calls"]["retry"] == 2
    assert reports["compss"]["cancel_reader"] is None


@needs_emulator
def test_fail_stops_a_compss_application(fresh_python, tmp_path):
    """Under COMPSs a task that fails for good ends the application."""
    script = tmp_path / "fail_app.py"
    script.write_text(
        "import sys\nfrom dislib_nn.runtime import wait_on\n"
        "from tests.runtime import failing\n"
        "if __name__ == '__main__':\n"
        "    wait_on(failing.flaky_fail(sys.argv[1], 1, 7))\n"
        "    print('not reached')\n")
    done = subprocess.run(
        compss_command(str(script), str(tmp_path / "calls"),
                       pythonpath=ROOT),
        capture_output=True, text=True, env=dict(clean_env(), PYTHONPATH=ROOT),
        cwd=str(tmp_path), timeout=300)
    assert done.returncode != 0 and "not reached" not in done.stdout
    assert failing.calls(str(tmp_path / "calls")) == 1


def _two_returns(acc, x):
    return acc, x


@pytest.mark.parametrize("decorate, match", [
    (lambda fn: task(returns=2, on_failure="retry")(fn),
     r"'on_failure' must be one of 'RETRY', 'FAIL', 'IGNORE', "
     r"'CANCEL_SUCCESSORS'. Got 'retry'"),
    (lambda fn: on_failure(management="SKIP")(task(returns=2)(fn)),
     r"'management' must be one of .* Got 'SKIP'"),
    (lambda fn: on_failure(management="IGNORE", x=1, y=2)(
        task(returns=2)(fn)),
     r"defaults for \['y'\], which are neither 'returns' nor parameters"),
    (lambda fn: on_failure(management="IGNORE", acc=1)(
        task(returns=2, acc=INOUT)(fn)),
     r"defaults for \['acc'\] but not for \['x'\]"),
    (lambda fn: on_failure(management="IGNORE", returns=5)(
        task(returns=2)(fn)),
     r"returns=2 must be a list or tuple of 2 values. Got 5"),
])
def test_bad_failure_declarations(decorate, match):
    with pytest.raises(TaskDefinitionError, match=match):
        decorate(_two_returns)


def test_on_failure_must_be_above_task():
    def fn(x):
        return x
    with pytest.raises(TaskDefinitionError,
                       match="@on_failure must be placed above @task"):
        on_failure(management="IGNORE")(fn)
