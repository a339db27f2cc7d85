"""Scripts the workers cannot import: a clear error, never a hang."""

import os
import subprocess
import sys

import pytest

# Every test here starts new Python processes: `make test-fast` leaves
# them out (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_python")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))

TASK = '''from dislib_nn.runtime import task, wait_on


@task(returns=1)
def inc(x):
    return x + 1


'''
GUARDED = TASK + 'if __name__ == "__main__":\n    print(wait_on(inc(1)))\n'
UNGUARDED = TASK + 'print(wait_on(inc(1)))\n'


def _run(args, cwd, stdin=None, **env_vars):
    env = dict(os.environ, PYTHONPATH=ROOT, **env_vars)
    env.pop("DISLIB_NN_BACKEND", None)
    return subprocess.run([sys.executable] + args, input=stdin, cwd=cwd,
                          capture_output=True, text=True, env=env,
                          timeout=300)


def test_script_without_main_guard(tmp_path):
    (tmp_path / "unguarded.py").write_text(UNGUARDED)
    done = _run(["unguarded.py"], tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()
    assert any(line.startswith("dislib_nn.exceptions.BackendError: the "
                               "local backend's workers could not start")
               for line in last), done.stderr[-3000:]
    assert 'under \'if __name__ == "__main__":\'' in done.stderr
    assert "unguarded.py" in done.stderr
    assert "out of memory" not in done.stderr


def test_script_read_from_stdin(tmp_path):
    done = _run(["-"], tmp_path, stdin=GUARDED)
    assert done.returncode != 0
    assert "BackendError: the local backend's workers import the script " \
           "that started the program" in done.stderr, done.stderr[-3000:]
    assert "('<stdin>') is not a file they can import" in done.stderr
    assert "out of memory" not in done.stderr


def test_script_read_from_stdin_runs_with_forked_workers(tmp_path):
    done = _run(["-"], tmp_path, stdin=GUARDED,
                DISLIB_NN_START_METHOD="fork")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "2"
