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


def test_a_regime_link_is_judged_as_its_regime(tta):
    """A link named 10gbe runs at a computed rate; the cell keeps the
    regime, which the rate alone would not give."""
    cells = [
        {"rate": "none", "contenders": [
            _row("ddp-linear", 10.0), _row("sync", 12.0)]},
        {"rate": "12345kbit", "regime": "10 GbE", "contenders": [
            _row("ddp-linear", 40.0),
            _row("sync", 16.0, floor_to_target=15.0)]}]
    got = {(v["link"], v["target"].split(": ", 1)[1]): v["value"]
           for v in tta.judge(cells, 2)}
    assert got[("12345kbit", "time to target <= 0.5 x DDP's")] == \
        pytest.approx(0.4)
    assert ("12345kbit", "time to target <= 1.3 x its compute floor") \
        in got


@pytest.mark.parametrize("nodes", [2, 4])
def test_the_regime_rate_gives_the_paper_s_ratio(tta, nodes):
    """At the computed rate B the ring all-reduce's 2(P - 1)/P model
    sizes take (r_paper - r_unshaped) x the compute of a step."""
    ddp = {"r": 0.5, "model_bytes": 105_000, "nosync_step_seconds": 0.025}
    for regime, r in (("10 GbE", 2.8), ("1 GbE", 28.0)):
        rate = tta.regime_rate(ddp, regime, nodes)
        assert rate.endswith("kbit")
        bits_per_s = float(rate[:-4]) * 1e3
        sent = 2 * (nodes - 1) / nodes * ddp["model_bytes"] * 8
        comm = sent / bits_per_s
        assert comm / ddp["nosync_step_seconds"] + ddp["r"] == \
            pytest.approx(r, rel=1e-3)


def test_no_rate_reproduces_a_ratio_below_the_unshaped_one(tta):
    ddp = {"r": 3.5, "model_bytes": 1000, "nosync_step_seconds": 0.001}
    with pytest.raises(SystemExit, match="already above"):
        tta.regime_rate(ddp, "10 GbE", 2)


def test_data_on_workers_are_the_rows_the_arrays_hold(tta, tmp_path):
    """--data-on-workers: the child's DsTensors, read from the files the
    driver wrote, hold the rows the child makes itself without it."""
    from dislib_nn import runtime

    args = tta._parser().parse_args(
        ["--model", "tiny", "--n-train", "96", "--n-test", "32"])
    args.tmp, args.child_data = str(tmp_path), None
    arrays = tta._child_data(args)
    args.child_data = tta.write_data(args)
    runtime.set_backend("sequential")
    try:
        tensors = tta._child_data(args)
        for array, tensor in zip(arrays, tensors):
            got = tensor.collect().numpy()
            assert tensor.n_blocks == args.nodes
            assert got.dtype == array.dtype and (got == array).all()
    finally:
        runtime.set_backend("local")


def test_the_testbed_s_workers_import_the_benchmarks_modules(tta,
                                                              monkeypatch):
    """The CNN reaches the dask workers as ``_common.CNN``: the
    benchmark's folder goes on the path they inherit, once, wherever the
    script was started from."""
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    tta._workers_import_here()
    tta._workers_import_here()
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [
        tta.HERE, "/elsewhere"]
    monkeypatch.delenv("PYTHONPATH")
    tta._workers_import_here()
    assert os.environ["PYTHONPATH"] == tta.HERE
    assert os.path.samefile(tta.HERE, BENCHMARKS)
