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

from dislib_nn.training.merge import _stale
from tests.compss._emulator import (ahead, needs_emulator, overlapping,
                                    report, task_log)

pytestmark = needs_emulator


@pytest.fixture(scope="module")
def reports():
    """Every app with python and under runcompss: data_app in both of
    the emulator's modes, serial and concurrent, fit_app in the
    concurrent one (started together, with the session: see
    ``_emulator.AHEAD``)."""
    reports = {key: report(key) for key in [
        ("data_app.py", "python"), ("data_app.py", "compss"),
        ("data_app.py", "compss-concurrent"), ("fit_app.py", "python")]}
    for mode in FIT_MODES:
        fit = report(("fit_app.py", f"{mode}-sync"))
        fit.update(report(("fit_app.py", f"{mode}-async")))
        reports["fit_app.py", mode] = fit
    return reports


MODES = ["compss", "compss-concurrent"]
FIT_MODES = ["compss-concurrent"]


@pytest.fixture(scope="module", params=MODES)
def data_reports(reports, request):
    return (reports["data_app.py", "python"],
            reports["data_app.py", request.param])


@pytest.fixture(scope="module", params=FIT_MODES)
def fit_reports(reports, request):
    return (reports["fit_app.py", "python"],
            reports["fit_app.py", request.param])


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
    api = dict(compss["api"])
    refused = api.pop("count_tasks")
    assert api == {"task": True, "constraint": True,
                             "directions": True}
    assert refused is not None and "runcompss" in refused \
        and "--graph" in refused
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
    "regressor/default", "regressor/average", "regressor/checkpoint",
    "regressor/step", "regressor/schedule", "classifier/outer",
    "classifier/half-bf16", "classifier/every2-bf16", "classifier/sharded",
    "classifier/batchnorm"])
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
    if case == "regressor/step":        # 60 rows a replica, batches of 16
        assert got["n_merges"] == expected["n_merges"] == 4
    if case == "regressor/schedule":
        assert got["n_merges"] == expected["n_merges"] == [2, 2]
        # The script's callback ran on the master and halved the rate
        # (epoch 1 is read once epoch 2 is submitted).
        assert got["calls"] == expected["calls"] == [
            ["begin", 1], ["begin", 2], ["end", 1, 2], ["end", 2, 2]]
        assert got["lr"] == expected["lr"]
        assert got["lr"][1] == pytest.approx(got["lr"][0] / 2)
    if case.endswith("/default"):
        assert got["ds_score"] == pytest.approx(got["score"], rel=1e-6)
    if "recomputed" in expected:        # the estimators' own fits
        assert got["recomputed"] == expected["recomputed"]
        assert expected["recomputed"][-1] == (case == "classifier/batchnorm")


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


@pytest.mark.parametrize("sync_case, async_case", [
    # The delayed outer step with no lag: the synchronous one.
    ("classifier/outer", "async-classifier/lag0-outer"),
    # Rounds of half an epoch, bf16 payloads, no lag: the synchronous ones.
    ("classifier/half-bf16", "async-classifier/lag0-half-bf16")])
def test_asynchronous_rounds_with_no_lag_are_the_synchronous_ones(
        fit_reports, sync_case, async_case):
    for run in fit_reports:
        lag0 = run[async_case]["weights"]
        for key, value in run[sync_case]["weights"].items():
            assert lag0[key] == pytest.approx(value, rel=1e-5, abs=1e-5)


# ------------------------------------------------- the concurrent mode
@pytest.mark.parametrize("key", [
    ("fit_app.py", "compss-concurrent-sync"),
    ("fit_app.py", "compss-concurrent-async"),
    ("data_app.py", "compss-concurrent")])
def test_the_concurrent_runs_ran_tasks_at_the_same_time(reports, key):
    # Without overlap the concurrent checks would prove nothing.
    pairs = overlapping(task_log(ahead(key)))
    assert pairs, f"no two tasks of {key} overlapped"
    if key[0] == "fit_app.py":
        assert any("train_epoch" in a and "train_epoch" in b
                   for a, b in pairs), pairs[:10]


@pytest.mark.parametrize("name", ["nolag", "lag1"])
def test_asynchronous_merges_follow_their_history(fit_reports, name):
    # Whatever order the merges ran in, each worker's every epoch was
    # merged once, and the weight of each merge is its share of the rows
    # discounted by the staleness it records.
    for run in fit_reports:
        got = run[f"async-classifier/{name}"]
        merges = [m for epoch in got["merges"] for m in epoch]
        assert sorted(m["index"] for m in merges) == list(
            range(len(merges)))
        for epoch, (records, counts) in enumerate(
                zip(got["merges"], got["worker_samples"])):
            assert sorted(m["worker"] for m in records) == \
                list(range(len(counts))), (epoch, records)
            for m in records:
                assert m["staleness"] >= 0
                share = counts[m["worker"]] / got["n_rows"]
                assert m["weight"] == pytest.approx(
                    share * (1 + m["staleness"])
                    ** -got["staleness_exponent"])


def test_asynchronous_staleness_replays_from_the_merge_order(fit_reports):
    # Without a lag bound each worker starts from its own last merge, so
    # the merge order alone gives every staleness and weight.
    for run in fit_reports:
        got = run["async-classifier/nolag"]
        order = sorted(
            ((m["index"], m["worker"], counts[m["worker"]])
             for records, counts in zip(got["merges"],
                                        got["worker_samples"])
             for m in records))
        replayed = _stale.replay([(w, n) for _, w, n in order],
                                       got["n_rows"],
                                       got["staleness_exponent"])
        by_index = {m["index"]: m for epoch in got["merges"]
                    for m in epoch}
        for (index, _, _), expected in zip(order, replayed):
            assert by_index[index]["staleness"] == pytest.approx(
                expected["staleness"])
            assert by_index[index]["weight"] == pytest.approx(
                expected["weight"])


def test_no_worker_runs_more_than_max_lag_merges_ahead(fit_reports):
    # With max_lag=1 worker w's r-th merge (0-based) comes after the
    # others' first r - 1 merges: it trained from one of them.
    for run in fit_reports:
        got = run["async-classifier/lag1"]
        merges = sorted((m for epoch in got["merges"] for m in epoch),
                        key=lambda m: m["index"])
        done = {}
        for m in merges:
            r = done.get(m["worker"], 0)
            for other in range(len(got["worker_samples"][0])):
                if other != m["worker"]:
                    assert done.get(other, 0) >= r - 1, (m, done)
            done[m["worker"]] = r + 1


def test_a_failing_script_makes_runcompss_fail():
    done = ahead(("raise_app.py", "compss"))
    assert done.returncode != 0
    assert "must keep the rows of its block" in done.stderr


def _flat(values):
    """Nested lists of numbers (None for a missing loss) as one list."""
    if isinstance(values, list):
        return [v for item in values for v in _flat(item)]
    return [float("nan") if values is None else float(values)]
