"""What a training task reports: a plain record that pickles alone."""

import pickle
import subprocess
import sys

from dislib_nn.training.tasks._report import TrainStats


def test_train_stats_round_trip_through_pickle():
    stats = TrainStats(loss_sum=1.5, compute_s=0.25, end_s=10.0,
                       finite=False, runs=2, error="ValueError: x",
                       traceback="tb")
    copy = pickle.loads(pickle.dumps(stats))
    assert [getattr(copy, n) for n in TrainStats.__slots__] == \
        [1.5, 0.25, 10.0, False, 2, "ValueError: x", "tb"]


def test_shares_combine_into_one_epoch():
    first = TrainStats(loss_sum=1.0, compute_s=1.0, end_s=5.0, runs=1)
    second = TrainStats(loss_sum=2.0, compute_s=3.0, end_s=9.0,
                        finite=False, runs=3, error="E: boom",
                        traceback="tb")
    epoch = TrainStats.combined([first, second])
    assert (epoch.loss_sum, epoch.compute_s, epoch.end_s, epoch.finite,
            epoch.runs, epoch.error, epoch.traceback) == \
        (3.0, 4.0, 9.0, False, 3, "E: boom", "tb")


def test_unpickling_a_report_imports_neither_torch_nor_numpy(fresh_python):
    blob = pickle.dumps(TrainStats(loss_sum=1.0))
    code = ("import pickle, sys; s = pickle.loads(sys.stdin.buffer.read()); "
            "print(s.loss_sum, any(m.split('.')[0] in ('torch', 'numpy', "
            "'sklearn') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], input=blob,
                         capture_output=True, check=True).stdout
    assert out.decode().split() == ["1.0", "False"]
