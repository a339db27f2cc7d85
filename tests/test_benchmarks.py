"""The claims benchmarks check for themselves, checked on a small run.

A benchmark that finds its claim broken exits non-zero; these tests run
it small enough for the suite (what is measured, not how fast: no
timing is asserted).
"""

import os
import subprocess
import sys

import pytest

# Every test here starts new Python processes: `make test-fast` leaves
# them out (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_python")

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "benchmarks")


def test_merge_tree_depth_is_ceil_log2_replicas():
    # docs/benchmarks.md: "Merge depth is log2 P for every P".
    done = subprocess.run(
        [sys.executable, "bench_scaling.py", "--max-replicas", "4",
         "--epochs", "2", "--rows-per-replica", "32"],
        cwd=BENCHMARKS, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "merge depth equals ceil(log2 P) for every P: True" in done.stdout


def _scaling_accuracy(tmp_path, workload, settings, n_train=600, n_test=200,
                      epochs=2, max_epochs=3, more=()):
    """Run scaling_accuracy.py small; (its stdout, its JSON)."""
    import json
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, "scaling_accuracy.py", "--workload", workload,
         "--n-train", str(n_train), "--n-test", str(n_test),
         "--replicas", "1,2,4", "--epochs", str(epochs),
         "--max-epochs", str(max_epochs), "--batch", "16",
         "--strategies", "sync,async", "--settings", settings,
         "--json", str(out), "--plot", str(tmp_path / "acc"), *more],
        cwd=BENCHMARKS, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with open(out) as f:
        return done.stdout, json.load(f)


def test_scaling_accuracy_rows_bytes_and_targets(tmp_path):
    # docs/benchmarks.md "Accuracy from 2 to 64 replicas": every
    # contender at every P, its bytes by the stated formulas, the epochs
    # to within 1 point of single-process read off its own scores.
    import dislib_nn as dnn
    settings = ["0.25+sqrt", "0.25+sqrt+diloco", "0.5+lin+bf16", "0.5+lag1"]
    stdout, report = _scaling_accuracy(tmp_path, "mlp", ",".join(settings))
    has_bf16 = "merge_precision" in \
        dnn.SyncEpochAveragingClassifier().get_params()
    if not has_bf16:
        assert "skipping setting 0.5+lin+bf16" in stdout
        settings.remove("0.5+lin+bf16")
    rows, size = report["rows"], report["model_bytes"]
    assert report["seed"] == 0 and "seed 0" in stdout
    assert "Machine:" in stdout
    assert not [r for r in rows if r.get("error")]
    # The DDP row's setting is the better scaling, checked below.
    by_key = {(r["P"], r["contender"],
               None if r["contender"] == "ddp" else r.get("setting")): r
              for r in rows}
    expected = {(1, "single", None)} | {(P, "ddp", None) for P in (2, 4)} | {
        (P, strategy, setting) for P in (1, 2, 4)
        for strategy in ("sync", "async")
        # --settings from P = 2 on (--settings-from's default).
        for setting in ["default"] + (settings if P > 1 else [])
        # +lagK sets max_lag: asynchronous only.
        if strategy == "async" or "lag" not in setting}
    assert set(by_key) == expected and len(rows) == len(expected)
    single = by_key[(1, "single", None)]
    assert len(single["scores"]) == 3
    target = single["scores"][1] - 0.01
    n_rows, batch = 600, 16
    for r in rows:
        assert len(r["scores"]) == 3
        assert r["acc"] == r["scores"][1]
        assert abs(r["points"] - 100 * (r["acc"] - single["acc"])) < 1e-9
        reached = [e + 1 for e, s in enumerate(r["scores"]) if s >= target]
        assert r["epochs_to_target"] == (reached[0] if reached else None)
        P, upload = r["P"], size
        if r["contender"] == "ddp":
            assert r["setting"] in ("lin", "sqrt")
            scores = r["scores_all"]
            assert r["scores"] == scores[r["setting"]]
            assert r["acc"] == max(s[1] for s in scores.values())
            expect = 2 * (P - 1) * size * n_rows / (P * batch)
        elif r["contender"] in ("sync", "async"):
            assert r["schedule"] is not None and "sync_every" in \
                r["schedule"]
            if r["setting"] != "default":
                every = float(r["setting"].split("+")[0])
                assert r["schedule"]["sync_every"] == every
                assert r["merges_per_epoch"] == 1 / every
            if r["setting"].endswith("+bf16"):
                upload = size / 2
            if r["contender"] == "sync":
                per_round = P * upload + max(P - 2, 0) * size + P * size
            else:
                # The docs' formula: folds read a replica and the global
                # model; with no lag one read of the global model starts
                # every worker, else each fold's copy does, picked by a
                # task reading P copies when there is a lag bound.
                # (Only the explicit +lag1 row has no max_lag there.)
                lag = r["schedule"].get("max_lag", 1)
                per_round = P * (upload + size) + (
                    (P + 1) * size if lag == 0
                    else P * size + (P * P * size if P > 1 else 0))
            expect = per_round * r["merges_per_epoch"]
        else:
            expect = 0
        assert abs(r["bytes_per_epoch"] - expect) <= 1e-6 * expect
    # max_lag="auto": 1 at two replicas, 0 at four of 9 steps each; +lag1
    # runs what it says.
    lags = {P: by_key[(P, "async", "default")]["schedule"]["max_lag"]
            for P in (1, 2, 4)}
    assert lags == {1: 1, 2: 1, 4: 0}
    assert "max_lag" not in by_key[(4, "sync", "default")]["schedule"]
    assert "max_lag" not in by_key[(4, "async", "0.5+lag1")]["schedule"]
    assert "ran sync_every=0.25 lr x2 max_lag=0" in stdout
    # Two replicas at the defaults: one merge per epoch, 4 models.
    assert by_key[(2, "sync", "default")]["merges_per_epoch"] == 1
    assert by_key[(2, "sync", "default")]["bytes_per_epoch"] == 4 * size
    assert (tmp_path / "acc_mlp.png").stat().st_size > 0


def test_scaling_accuracy_cnn_workload_on_the_local_backend(tmp_path):
    # The CNN's rows cost the most: fewer of them, one epoch; the
    # library on the local backend's pool, SlowMo's outer momentum
    # 1 - 1/P resolved per P, and a rate times 3.
    stdout, report = _scaling_accuracy(tmp_path, "cnn",
                                       "0.5+sqrt,1+slowmo,1+x3",
                                       n_train=192, n_test=64, epochs=1,
                                       max_epochs=1,
                                       more=("--backend", "local"))
    assert report["workload"] == "cnn" and report["args"]["lr"] == 0.01
    assert report["args"]["backend"] == "local"
    assert "workload cnn: 192 training and 64 test rows" in stdout
    assert "the library on the local backend" in stdout
    rows = [r for r in report["rows"] if not r.get("error")]
    contenders = {(r["P"], r["contender"], r.get("setting")) for r in rows}
    # single; ddp at P = 2, 4; defaults at 1, 2, 4 and the three settings
    # at 2, 4, for both strategies.
    assert len(contenders) == len(report["rows"]) == 1 + 2 + 2 * (3 + 6)
    slowmo = {(r["P"], r["contender"]): r["params"] for r in rows
              if r.get("setting") == "1+slowmo"}
    assert set(slowmo) == {(P, s) for P in (2, 4) for s in ("sync", "async")}
    for (P, _), params in slowmo.items():
        assert params["outer_optimizer__momentum"] == 1 - 1 / P
        assert params["outer_optimizer__lr"] == 1.0
    # x3: three times the rate, half of it in the first epoch, as the
    # estimators warm up a scaled rate; the printed factor is the rate's.
    for r in rows:
        if r.get("setting") == "1+x3":
            assert r["params"]["lr_factor"] == 3.0
            assert r["params"]["lr_scaling"] == "none"
            assert r["schedule"]["lr_factor"] == 1
    assert stdout.count("1+x3") >= 4 and "ran sync_every=1 lr x3" in stdout
    assert (tmp_path / "acc_cnn.png").stat().st_size > 0


def test_scaling_accuracy_resumes_only_rows_of_the_same_backend(tmp_path):
    import json
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"args": {"backend": "sequential"},
                                   "rows": []}))
    done = subprocess.run(
        [sys.executable, "scaling_accuracy.py", "--workload", "mlp",
         "--n-train", "64", "--n-test", "32", "--replicas", "2",
         "--backend", "local", "--resume", str(earlier)],
        cwd=BENCHMARKS, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    assert (f"--resume: {earlier} ran the library on the sequential "
            f"backend, not --backend local") in done.stderr
    assert "P=  1 single" not in done.stdout
