"""The cost model's calibration on the testbed's reports (in-process:
the script's own arithmetic on a hand-made report, no testbed)."""

import os

import pytest

from tests._modules import BENCHMARKS, load_file

M = 16e6                      # bytes of a model
FAST, SLOW = 1e9, 1e6         # bytes a second at 8000 and 8 Mbit/s


@pytest.fixture(scope="module")
def calibration():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(BENCHMARKS)
        yield load_file(os.path.join(BENCHMARKS, "cost_calibration.py"))


def _row(name, epoch_s, floor_s, merges=1):
    return {"contender": name, "epoch_seconds": epoch_s,
            "floor_epoch_seconds": floor_s,
            "epochs": [{"merges": merges}] * 3}


def _report(cells):
    return {"nodes": 4, "cells": [
        {"rate": rate, "link_mbit_per_s": mbit, "contenders": rows}
        for rate, mbit, rows in cells]}


def test_each_synchronous_row_is_calibrated_unshaped_and_predicts_shaped(
        calibration):
    tree, sharded = "sync", "sync sync_every=1,merge=sharded"
    report = _report([
        ("none", 8000, [_row(tree, 3.0, 1.0), _row(sharded, 2.5, 1.0),
                        _row("async", 9.0, 1.0)]),
        ("8mbit", 8, [_row(tree, 90.0, 1.0), _row(sharded, 30.0, 1.0)])])
    hs, overlap = calibration.calibrate(report, M)
    assert overlap is None                       # no DDP in the report
    assert set(hs) == {tree, sharded}            # async rows are not modelled
    # The tree: d + P - 1 = 5 models through its root's link.
    assert hs[tree] == pytest.approx(2.0 - 5 * M / FAST)
    # Sharded: 2 (P - 1) / P = 1.5 models on every link at once.
    assert hs[sharded] == pytest.approx(1.5 - 1.5 * M / FAST)
    rows = {(link, what): (measured, guess) for link, what, measured, guess
            in calibration.predict(report, M, hs, overlap)}
    assert rows[("none", f"{tree} epoch")] == pytest.approx((3.0, 3.0))
    measured, guess = rows[("8mbit", f"{sharded} epoch")]
    assert measured == 30.0
    assert guess == pytest.approx(1.0 + hs[sharded] + 1.5 * M / SLOW)
    assert rows[("8mbit", f"{tree} epoch")][1] == pytest.approx(
        1.0 + hs[tree] + 5 * M / SLOW)


def test_a_global_shuffle_moves_its_rows_through_every_link(calibration):
    """The default global shuffle sends (P - 1) / P of a node's D / P
    bytes of rows each epoch; the local setting sends none."""
    D = 64e6                                # training rows' bytes
    per_link = 3 / 16 * D                   # P = 4
    defaults = _row("sync", 3.0 + per_link / FAST, 1.0)
    local = dict(_row("sync shuffle=local", 3.0, 1.0),
                 setting={"shuffle": "local"})
    shaped_defaults = _row("sync", 0.0, 1.0)
    report = _report([("none", 8000, [defaults, local]),
                      ("8mbit", 8, [shaped_defaults, local])])
    report["data_bytes"] = D
    assert calibration.data_bytes(report) == D
    assert calibration.shuffle_bytes(defaults, 4, D) == per_link
    assert calibration.shuffle_bytes(local, 4, D) == 0.0
    hs, _ = calibration.calibrate(report, M, D)
    # The unshaped shuffle's seconds are not counted as round overhead.
    assert hs["sync"] == pytest.approx(hs["sync shuffle=local"])
    rows = {(link, what): guess for link, what, _, guess
            in calibration.predict(report, M, hs, None, D)}
    assert rows[("8mbit", "sync epoch")] - \
        rows[("8mbit", "sync shuffle=local epoch")] == \
        pytest.approx(per_link / SLOW)


def test_an_older_report_s_rows_come_from_its_command_line(calibration):
    report = {"argv": ["--model", "cnn", "--n-train", "1000"]}
    assert calibration.data_bytes(report) == 1000 * (3 * 32 * 32 * 4 + 8)
    assert calibration.data_bytes({"argv": []}) == 4096 * (1024 * 4 + 8)
