"""GridSearchCV(n_jobs=2): each joblib worker process fits with a local
pool of its own, which must stop cleanly when the joblib worker exits."""

import numpy as np
from sklearn.model_selection import GridSearchCV

from dislib_nn import SyncEpochAveragingClassifier
from tests.training._models import Classifier

if __name__ == "__main__":
    rng = np.random.RandomState(0)
    X = rng.randn(60, 4).astype("float32")
    y = (X[:, 0] > 0).astype(np.int64)
    search = GridSearchCV(
        SyncEpochAveragingClassifier(module=Classifier, n_epochs=1,
                                     n_workers=2, random_state=0),
        {"lr": [0.01, 0.1]}, cv=2, n_jobs=2,
        refit=False)            # the joblib workers' pools are the point
    search.fit(X, y)
    print(sorted(search.best_params_))
