"""A user-written strategy under COMPSs's own rules.

``apps/strategy_app.py`` runs the script of docs/writing_a_strategy.md
(FedBuff, defined in the script) under the emulated runcompss and on
the sequential backend: the serial emulator runs tasks in submission
order, as sequential does, so both print the same accuracies, the
resumed fit is the uninterrupted one, and the loaded file predicts as
the saved model. (tests/test_docs.py runs the page on local.)
"""

import re

from tests.compss._emulator import ahead, needs_emulator

pytestmark = needs_emulator


def _lines(key):
    done = ahead(key)
    assert done.returncode == 0, (
        f"{key} exited with {done.returncode}\n--- stdout\n"
        f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-6000:]}")
    return [line for line in done.stdout.splitlines()
            if re.match(r"^(FedBuff|the class|staleness|resumed|warm|"
                        r"loaded)", line)]


def test_the_pages_fedbuff_runs_under_compss_as_on_sequential():
    compss = _lines(("strategy_app.py", "compss"))
    sequential = _lines(("strategy_app.py", "sequential"))
    assert len(compss) == 6
    assert compss == sequential
    found = dict(re.findall(r"^(.*?): accuracy ([\d.]+)$",
                            "\n".join(compss), re.M))
    assert found["resumed"] == found["FedBuff, 6 epochs"]
    assert float(found["FedBuff, 6 epochs"]) > 0.85
    assert "loaded predicts the same: True" in compss
