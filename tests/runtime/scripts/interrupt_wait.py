"""Wait on slow tasks until the test sends SIGINT; report what is left.

Arguments: a folder and the backend. Prints one JSON line.
"""

import json
import os
import sys
import time

from dislib_nn import runtime
from dislib_nn.exceptions import TaskCancelledError
from dislib_nn.runtime import task, wait_on
from tests._procs import descendants, wait_until_gone
from tests.runtime import tasks


@task(returns=1)
def stall(folder, tag):
    open(os.path.join(folder, f"started-{os.getpid()}-{tag}"), "w").close()
    time.sleep(300)
    return tag


def main(folder, backend):
    runtime.set_backend(backend, n_workers=2)
    running = [stall(folder, i) for i in range(2)]
    queued = tasks.add(running[0], 1)
    try:
        wait_on(queued)
    except KeyboardInterrupt:
        # The workers that ran the stalled tasks are stopped at once.
        pids = {int(name.split("-")[1]) for name in os.listdir(folder)}
        children = descendants(os.getpid())
        left = wait_until_gone({p: children[p] for p in pids
                                if p in children}, 60)
        cancelled = []
        for fut in running + [queued]:
            try:
                wait_on(fut)
            except TaskCancelledError as exc:
                cancelled.append("was cancelled" in str(exc))
        print(json.dumps({"cancelled": cancelled, "left": left,
                          "usable": wait_on(tasks.add(1, 1)) == 2}),
              flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
