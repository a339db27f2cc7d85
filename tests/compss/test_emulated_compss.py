"""dislib_nn under COMPSs's own rules: apps run through the real binding.

Each app runs twice, with plain ``python`` (the local backend) and under
the emulated ``runcompss`` (PyCOMPSs's real master and worker code, see
``_emulator``), and both must print the same results. The local backend
is stricter than COMPSs where it can be; this is where what only COMPSs
does (ending waited futures, tracking by ``id()``, executors that import
only the task's module, ``-O``) is met for real.
"""

import math

import pytest

from tests.compss._emulator import ahead, needs_emulator, report

pytestmark = needs_emulator


@pytest.fixture(scope="module")
def reports():
    """Every app, with python and under runcompss (started together, with
    the session: see ``_emulator.AHEAD``)."""
    reports = {key: report(key) for key in [
        ("data_app.py", "python"), ("data_app.py", "compss"),
        ("fit_app.py", "python"), ("fit_app.py", "compss-sync"),
        ("fit_app.py", "compss-async")]}
    compss = reports.pop(("fit_app.py", "compss-sync"))
    compss.update(reports.pop(("fit_app.py", "compss-async")))
    reports["fit_app.py", "compss"] = compss
    return reports


@pytest.fixture(scope="module")
def data_reports(reports):
    return reports["data_app.py", "python"], reports["data_app.py", "compss"]


@pytest.fixture(scope="module")
def fit_reports(reports):
    return reports["fit_app.py", "python"], reports["fit_app.py", "compss"]


def test_data_app_runs_under_compss_as_on_the_local_backend(data_reports):
    local, compss = data_reports
    assert local["backend"] == "local" and compss["backend"] == "compss"
    assert compss["optimized"]          # runcompss runs Python with -O
    for key in ("shuffle", "partition", "split", "map_blocks", "load_npy",
                "slice_after_collect", "astype_after_collect", "norm",
                "halves", "commutative"):
        assert compss[key] == local[key], key
    # A tensor collected twice, then sliced and converted, still works:
    # COMPSs ends every future wait_on resolves.
    assert compss["collect_twice"] and local["collect_twice"]


def test_the_runtime_names_are_pycompss_own_under_compss(data_reports):
    local, compss = data_reports
    assert compss["api"] == {"task": True, "constraint": True,
                             "directions": True}
    assert local["api"] is None
    counts, acc = compss["commutative"]
    assert counts == [[2, 3.0], [2, 4.0], [2, 5.0]] and acc == [2, 2, 2]


def test_compss_fills_the_emulated_node(data_reports):
    # One worker node (localhost) with two CPUs, one CPU per task.
    assert data_reports[1]["n_workers"] == 2


def test_nothing_the_library_made_stays_with_compss(data_reports):
    # Every block, shuffle plan and piece of the cycle was dropped by the
    # app: COMPSs must hold none of their results any more.
    assert data_reports[1]["held_results"] == 0


@pytest.mark.parametrize("case", [
    "classifier/default", "classifier/average",
    "regressor/default", "regressor/average", "regressor/checkpoint"])
def test_fit_predict_score_under_compss_match_the_local_backend(
        fit_reports, case):
    local, compss = fit_reports
    assert compss["backend"] == "compss"
    got, expected = compss[case], local[case]
    assert got["weights"].keys() == expected["weights"].keys()
    for key, value in expected["weights"].items():
        assert got["weights"][key] == pytest.approx(value, rel=1e-5,
                                                    abs=1e-5), key
    # Predictions and scores on ds-tensors: after the default fits.
    names = ["history", "predict"] + (["ds_predict"] if case.endswith(
        "/default") else [])
    for name in names:
        assert _flat(got[name]) == pytest.approx(_flat(expected[name]),
                                                 rel=1e-5, abs=1e-6,
                                                 nan_ok=True), name
    assert got["score"] == pytest.approx(expected["score"], rel=1e-6)
    if case.endswith("/default"):
        assert got["ds_score"] == pytest.approx(got["score"], rel=1e-6)


@pytest.mark.parametrize("policy", ["retry", "skip"])
def test_a_raising_worker_follows_on_failure_under_compss(fit_reports,
                                                          policy):
    local, compss = fit_reports
    got, expected = compss[f"regressor/{policy}"], local[f"regressor/{policy}"]
    # The training task deals with the error itself: COMPSs sees a task
    # that succeeded, and the fit goes on as on the local backend.
    assert got["retried"] == expected["retried"]
    assert got["skipped"] == expected["skipped"]
    done = got["retried"] if policy == "retry" else got["skipped"]
    assert any(done), got
    for key, value in expected["weights"].items():
        assert got["weights"][key] == pytest.approx(value, rel=1e-5,
                                                    abs=1e-5), key


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
@pytest.mark.parametrize("setting", ["default", "average"])
def test_asynchronous_fit_predict_score_run_under_compss(fit_reports, kind,
                                                         setting):
    # Merges run in whatever order workers finish, so runs need not agree
    # to the bit; they must run end to end and agree with themselves.
    local, compss = fit_reports
    got = compss[f"async-{kind}/{setting}"]
    expected = local[f"async-{kind}/{setting}"]
    assert got["weights"].keys() == expected["weights"].keys()
    assert all(math.isfinite(v) for v in got["weights"].values())
    assert len(got["history"]) == len(expected["history"])
    assert len(got["predict"]) == 8
    if setting == "default":
        assert got["ds_score"] == pytest.approx(got["score"], rel=1e-6)
        assert len(got["ds_predict"]) == 8


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_asynchronous_with_no_lag_is_synchronous_under_compss(fit_reports,
                                                              kind):
    for run in fit_reports:
        lag0 = run[f"async-{kind}/lag0"]["weights"]
        sync = run[f"{kind}/default"]["weights"]
        for key, value in sync.items():
            assert lag0[key] == pytest.approx(value, rel=1e-5, abs=1e-5)


def test_a_failing_script_makes_runcompss_fail():
    done = ahead(("raise_app.py", "compss"))
    assert done.returncode != 0
    assert "must keep the rows of its block" in done.stderr


def _flat(values):
    """Nested lists of numbers (None for a missing loss) as one list."""
    if isinstance(values, list):
        return [v for item in values for v in _flat(item)]
    return [float("nan") if values is None else float(values)]
