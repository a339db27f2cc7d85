"""The time-to-accuracy benchmark judges its targets for every estimator
row (in-process: the benchmark's own arithmetic, no testbed)."""

import os

import pytest

from tests._modules import BENCHMARKS, load_file


@pytest.fixture(scope="module")
def tta():
    return load_file(os.path.join(BENCHMARKS, "time_to_accuracy.py"))


def _row(name, time_to_target, floor_to_target=None, accuracy=0.6):
    return {"contender": name, "time_to_target": time_to_target,
            "floor_to_target": floor_to_target, "final_accuracy": accuracy}


def test_every_estimator_row_is_judged_against_the_better_ddp(tta):
    cells = [
        {"rate": "none", "contenders": [
            _row("ddp-linear", 10.0), _row("ddp-sqrt", 20.0),
            _row("sync", None), _row("async lr_scaling=linear", 9.0)]},
        {"rate": "500mbit", "contenders": [
            _row("ddp-linear", 40.0),
            _row("sync", 30.0, floor_to_target=20.0),
            _row("async lr_scaling=linear", 19.0, floor_to_target=15.0)]},
        {"rate": "50mbit", "contenders": [
            _row("ddp-linear", 400.0), _row("sync", 100.0),
            _row("async lr_scaling=linear", 60.0)]}]
    got = {(v["link"], v["contender"], v["target"].split(": ", 1)[1]):
           (v["value"], v["met"]) for v in tta.judge(cells, 4)}
    unshaped = "not slower than DDP to target"
    assert got[("none", "sync", unshaped)] == (None, False)
    assert got[("none", "async lr_scaling=linear", unshaped)] == \
        (pytest.approx(0.9), True)
    half = "time to target <= 0.5 x DDP's"
    assert got[("500mbit", "sync", half)] == (pytest.approx(0.75), False)
    assert got[("500mbit", "async lr_scaling=linear", half)] == \
        (pytest.approx(0.475), True)
    floor = "time to target <= 1.3 x its compute floor"
    assert got[("500mbit", "sync", floor)] == (pytest.approx(1.5), False)
    assert got[("500mbit", "async lr_scaling=linear", floor)] == \
        (pytest.approx(19 / 15), True)
    fifth = "time to target <= 0.2 x DDP's"
    assert got[("50mbit", "sync", fifth)] == (pytest.approx(0.25), False)
    assert got[("50mbit", "async lr_scaling=linear", fifth)] == \
        (pytest.approx(0.15), True)
    # Nothing judged for DDP itself, and nothing else.
    assert len(got) == 2 * (1 + 2 + 1)


def test_a_cell_without_ddp_is_not_judged(tta):
    cells = [{"rate": "none", "contenders": [_row("sync", 5.0)]}]
    assert tta.judge(cells, 2) == []
