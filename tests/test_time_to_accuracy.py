"""benchmarks/time_to_accuracy.py, run tiny (``--smoke``) on a testbed.

Needs root and network namespaces (benchmarks/testbed.py); skips with
the testbed's own reason where it cannot run. No timing is asserted:
what is checked is what the benchmark claims about its own rows.
"""

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests._modules import BENCHMARKS, load_file

# Every test here starts new Python processes: `make test-fast` leaves
# them out (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_python")

def _testbed():
    return load_file(os.path.join(BENCHMARKS, "testbed.py"))


def test_time_to_accuracy_smoke(tmp_path):
    pytest.importorskip("distributed")
    testbed = _testbed()
    reason = testbed.unavailable_reason()
    if reason:
        pytest.skip(f"no testbed here: {reason}")
    prefix = "t" + uuid.uuid4().hex[:7]
    out = tmp_path / "tta.json"
    try:
        done = subprocess.run(
            [sys.executable, "time_to_accuracy.py", "--smoke", "--links",
             "none,100mbit,1gbe", "--prefix", prefix, "--json", str(out)],
            cwd=BENCHMARKS,
            capture_output=True, text=True, timeout=600)
    finally:
        testbed.cleanup(prefix)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Machine:" in done.stdout and "seed 0" in done.stdout
    assert testbed.namespaces_with_prefix(prefix) == []
    report = json.loads(out.read_text())
    single = report["single"]["epochs"]
    assert report["target"] == pytest.approx(single[-1]["test_accuracy"]
                                             - 0.01)
    unshaped, shaped, regime = report["cells"]
    assert [unshaped["rate"], shaped["rate"]] == ["none", "100mbit"]
    # A link named by its regime ran at the rate computed from the
    # unshaped DDP step, and is judged as that regime.
    tta = load_file(os.path.join(BENCHMARKS, "time_to_accuracy.py"))
    assert regime["rate"] == tta.regime_rate(
        tta.pick_ddp(unshaped["contenders"]), "1 GbE", 2)
    assert regime["regime"] == "1 GbE"
    assert {v["regime"] for v in report["verdicts"]
            if v["link"] == regime["rate"]} == {"1 GbE"}
    names = {c["contender"] for c in unshaped["contenders"]}
    assert {"ddp-linear", "sync", "async"} <= names
    for cell in report["cells"]:
        for row in cell["contenders"]:
            assert row["bytes_per_epoch"] > 0, row["contender"]
            assert row["floor_epoch_seconds"] > 0, row["contender"]
            # The later epochs' mean leaves out epoch 1, whose time
            # carries the fit's start.
            later = [e["seconds"] for e in row["epochs"][1:]]
            assert row["later_epoch_seconds"] == pytest.approx(
                sum(later) / len(later)), row["contender"]
    # The factoring the benchmark relies on: a synchronous contender's
    # accuracy per epoch is the same under every link.
    by_rate = {cell["rate"]: {c["contender"]: c for c in cell["contenders"]}
               for cell in report["cells"]}
    for name in ("sync", "ddp-linear"):
        shaped_accs = [e["test_accuracy"]
                       for e in by_rate["100mbit"][name]["epochs"]]
        unshaped_accs = [e["test_accuracy"]
                         for e in by_rate["none"][name]["epochs"]]
        assert shaped_accs == unshaped_accs[:len(shaped_accs)], name
    assert "targets:" in done.stdout
