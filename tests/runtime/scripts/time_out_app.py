"""Tasks that run past their time-out, as one JSON report.

Run with any backend: under COMPSs (the compss-emulator runs it through
the real PyCOMPSs binding, whose worker arms SIGALRM) and on the local
backends the report must be the same. Each hanging call sleeps for
minutes, so only the time-out ends it: a run that finishes had its
time-outs enforced. Argument, outside COMPSs: the backend (two workers);
the call counters go to a temporary folder, removed at the end.
"""

import json
import os
import shutil
import sys
import tempfile
import warnings

import numpy as np
import torch

# The suite's own modules, outside COMPSs too (runcompss gets the
# checkout with --pythonpath).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))

from dislib_nn import SyncEpochAveragingRegressor, runtime  # noqa: E402
from dislib_nn.runtime import wait_on  # noqa: E402
from tests.runtime import failing, hanging  # noqa: E402
from tests.training._models import FaultOnCalls  # noqa: E402


# A fit's tasks take well under a second, but a first epoch in a fresh
# process pays for torch's first optimizer step, and the suite runs this
# app on four backends at once beside the other tests on two cores.
FIT_TIME_OUT = 15


def main(folder):
    def counter(name):
        return os.path.join(folder, name)

    report = {"backend": runtime.backend_name()}
    # RETRY (the default): hangs once, then runs again and returns.
    report["retry"] = wait_on(hanging.hangs(counter("retry"), 1, 7))
    # A retried task starts from its INOUT argument as it was.
    acc = {"n": 0}
    report["retry_inout"] = [
        wait_on(hanging.hangs_after_increment(acc, counter("inout"), 1)),
        wait_on(acc)]
    # IGNORE: as if its code had raised, so the @on_failure default.
    report["ignore"] = wait_on(hanging.hangs_ignore(counter("ignore"), 9, 7))
    # CANCEL_SUCCESSORS: the reader never runs; both give None.
    cancelled = hanging.hangs_cancel(counter("cancel"), 9, 7)
    reader = failing.describe(cancelled, counter("cancel_reader"))
    report["cancel_reader"] = wait_on(reader)
    report["cancel"] = wait_on(cancelled)
    # A block's time-out, for a task that declares none (0.7 s: 1 s, in
    # whole seconds, under COMPSs).
    with runtime.time_out(0.7):
        undeclared = hanging.hangs_undeclared(counter("block"), 1, 8)
    report["block"] = wait_on(undeclared)
    runtime.barrier()
    report["calls"] = {name: failing.calls(counter(name)) for name in (
        "retry", "inout", "ignore", "cancel", "cancel_reader", "block")}
    # A fit whose training hangs once (a worker's first forward of the
    # first epoch): the runtime runs that task again, and the fit ends
    # with the model of a fit where nothing hung.
    clean = _fit(counter("clean"), 0)
    hung = _fit(counter("hung"), 5)
    report["fit_as_if_nothing_hung"] = all(
        torch.equal(value, hung.module_.state_dict()[key])
        for key, value in clean.module_.state_dict().items())
    report["fit_hung"] = os.path.getsize(counter("hung")) > \
        os.path.getsize(counter("clean"))
    # The rerun was the runtime's: the training code let the time-out
    # through instead of rerunning the epoch itself (which history_
    # would list under "retried").
    report["fit_retried"] = [h["retried"] for h in hung.history_]
    return report


def _fit(counter, hang_on):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    torch.manual_seed(0)
    module = FaultOnCalls(counter=counter, first=hang_on, last=hang_on,
                          fault="hang")
    return SyncEpochAveragingRegressor(
        module=module, n_workers=2, batch_size=4, n_epochs=2,
        shuffle="none", lr=0.05, random_state=0,
        task_timeout=FIT_TIME_OUT).fit(x, x.sum(axis=1))


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    if len(sys.argv) > 1:
        runtime.set_backend(sys.argv[1], n_workers=2)
    folder = tempfile.mkdtemp(prefix="time_out_app_")
    try:
        print(json.dumps(main(folder)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
