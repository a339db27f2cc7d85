"""Count the tasks a fit submits, by name, on the local backends'
engine (the ``local`` and ``sequential`` backends share it)."""

import collections

from dislib_nn.runtime._engine import Engine


def count_submitted(monkeypatch):
    """A Counter of the tasks submitted from now on, by qualified name
    (until ``monkeypatch`` is undone)."""
    calls = collections.Counter()
    submit = Engine.submit

    def counted(engine, task_fn, args, kwargs):
        calls[task_fn.__qualname__] += 1
        return submit(engine, task_fn, args, kwargs)
    monkeypatch.setattr(Engine, "submit", counted)
    return calls
