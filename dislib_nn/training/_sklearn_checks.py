"""scikit-learn's input checks, imported when first called.

:mod:`._targets` and :mod:`._input_checks` hold objects that tasks
receive (the output adapter and the target kinds), so worker processes
import them; the checks below run on the master only. Importing them
from here instead of from scikit-learn keeps scikit-learn (about 1.5 s
of imports) out of every worker and COMPSs executor.
"""

import functools
import inspect

__all__ = ["check_array", "column_or_1d", "check_classification_targets"]


def check_array(array, *args, ensure_all_finite=True, **kwargs):
    """``sklearn.utils.validation.check_array``.

    ``ensure_all_finite`` is passed as ``force_all_finite`` to the
    scikit-learn releases before 1.6, which know it by that name.
    """
    from sklearn.utils.validation import check_array as check
    kwargs[_finite_keyword()] = ensure_all_finite
    return check(array, *args, **kwargs)


def column_or_1d(y, *args, **kwargs):
    """``sklearn.utils.validation.column_or_1d``."""
    from sklearn.utils.validation import column_or_1d as check
    return check(y, *args, **kwargs)


def check_classification_targets(y):
    """``sklearn.utils.multiclass.check_classification_targets``."""
    from sklearn.utils.multiclass import check_classification_targets as check
    return check(y)


@functools.lru_cache(maxsize=None)
def _finite_keyword():
    from sklearn.utils.validation import check_array as check
    return ("ensure_all_finite"
            if "ensure_all_finite" in inspect.signature(check).parameters
            else "force_all_finite")
