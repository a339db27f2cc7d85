"""First in the local backend's fork-server preload (see
:mod:`dislib_nn._forkserver`)."""

from dislib_nn import _forkserver

_forkserver.guard()
