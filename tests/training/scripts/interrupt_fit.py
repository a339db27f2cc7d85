"""Fit on a stalling module until the test interrupts or kills this process.

Arguments: a folder, the backend, and the case: ``first`` (a first fit),
``warm`` (a warm_start fit after a first one) or ``partial`` (partial_fit
after a first one). On KeyboardInterrupt it prints one JSON report: is
the estimator as it was before, and is the backend still usable.
"""

import json
import os
import sys

import numpy as np
import torch

from dislib_nn import SyncEpochAveragingClassifier, runtime
from tests.runtime import tasks
from tests.training._faults import SlowNet


def state(est):
    fitted = {k: v for k, v in vars(est).items() if k.endswith("_")
              and not k.startswith("_")}
    out = {"attributes": sorted(fitted)}
    if "module_" in fitted:
        out["weights"] = [float(t.sum()) for t in
                          est.module_.state_dict().values()]
        out["history"] = len(est.history_)
        out["n_epochs"] = est.n_epochs_
    return out


def main(folder, backend, case):
    runtime.set_backend(backend, n_workers=2)
    rng = np.random.RandomState(0)
    X = rng.randn(64, 4).astype("float32")
    y = (X[:, 0] > 0).astype(np.int64)
    est = SyncEpochAveragingClassifier(
        module=SlowNet, module__folder=folder, n_epochs=3, n_workers=2,
        batch_size=16, random_state=0)
    if case != "first":
        est.fit(X, y)
        est.set_params(warm_start=case == "warm")
    before = state(est)
    open(os.path.join(folder, "slow"), "w").close()
    try:
        if case == "partial":
            est.partial_fit(X, y)
        else:
            est.fit(X, y)
    except KeyboardInterrupt:
        os.remove(os.path.join(folder, "slow"))
        after = state(est)
        usable = runtime.wait_on(tasks.add(torch.ones(2), 1)).tolist()
        print(json.dumps({"interrupted": True, "unchanged": before == after,
                          "before": before, "after": after,
                          "usable": usable == [2.0, 2.0]}), flush=True)
        return
    print(json.dumps({"interrupted": False}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
