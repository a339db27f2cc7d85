"""Warnings that point at the user's line, not at dislib_nn's insides."""

import os
import sys
import warnings

__all__ = ["warn_user"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_user(message, category):
    """``warnings.warn`` attributed to the first caller outside dislib_nn
    (the user's ``fit(...)`` line), whatever the depth of the call."""
    level, frame = 2, sys._getframe(1)     # 2: warn_user's caller
    while frame is not None and \
            os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        level += 1
        frame = frame.f_back
    warnings.warn(message, category, stacklevel=level)
