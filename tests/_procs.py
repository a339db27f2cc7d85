"""Process-tree helpers for tests that kill or interrupt a master (Linux)."""

import os
import time


def _stat(pid):
    """(state, ppid, start time) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[19])


def descendants(pid):
    """{pid: start time} of every live descendant of ``pid``."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                children.setdefault(stat[1], []).append((int(name), stat))
    found, todo = {}, [pid]
    while todo:
        for child, stat in children.get(todo.pop(), []):
            found[child] = stat[2]
            todo.append(child)
    return found


def alive(processes):
    """Those of ``{pid: start time}`` still running (zombies are not)."""
    out = []
    for pid, start in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[2] == start and stat[0] not in "ZX":
            out.append(pid)
    return out


def wait_until_gone(processes, timeout):
    """Poll until none of ``processes`` runs; return those still running."""
    deadline = time.monotonic() + timeout
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(processes)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
