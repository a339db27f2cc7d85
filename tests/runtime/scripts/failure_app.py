"""on_failure outcomes that let a program go on, as one JSON report.

Run with any backend: under COMPSs (the compss-emulator runs it through
the real PyCOMPSs binding) and on the local backends the report must be
the same. Argument: an empty folder for the call counters.
"""

import json
import os
import sys
import warnings

from dislib_nn import runtime
from dislib_nn.runtime import wait_on
from tests.runtime import failing


def main(folder):
    def counter(name):
        return os.path.join(folder, name)

    report = {}
    # RETRY (the default): fails once, succeeds when run again.
    report["retry"] = wait_on(failing.flaky(counter("retry"), 1, 7))
    # A retried task starts from its INOUT argument as it was.
    acc = {"n": 0}
    report["retry_inout"] = [
        wait_on(failing.flaky_increment(acc, counter("inout"), 1)),
        wait_on(acc)]
    # IGNORE without defaults: None, and a reader runs with None.
    ignored = failing.flaky_ignore(counter("ignore"), 9, 7)
    report["ignore_reader"] = wait_on(
        failing.describe(ignored, counter("ignore_reader")))
    report["ignore"] = wait_on(ignored)
    # IGNORE with @on_failure defaults, for the result and an INOUT.
    acc = {"n": 0}
    result = failing.flaky_update(acc, counter("defaults"), 9)
    report["ignore_defaults"] = [wait_on(result), wait_on(acc)]
    # CANCEL_SUCCESSORS: the reader never runs; both give None.
    cancelled = failing.flaky_cancel(counter("cancel"), 9, 7)
    reader = failing.describe(cancelled, counter("cancel_reader"))
    report["cancel_reader"] = wait_on(reader)
    report["cancel"] = wait_on(cancelled)
    # Independent work goes on.
    report["after"] = wait_on(failing.flaky(counter("after"), 0, 8))
    runtime.barrier()
    report["calls"] = {name: failing.calls(counter(name)) for name in (
        "retry", "inout", "ignore", "ignore_reader", "defaults", "cancel",
        "cancel_reader", "after")}
    return report


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    print(json.dumps(main(sys.argv[1])))
