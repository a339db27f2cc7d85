"""Blocks are released when no DsTensor needs them, and only the library's.

On the local backend every block the master knows of holds shared memory
through a file descriptor, so the master's open descriptors show what
the runtime still keeps.
"""

import gc
import os

import numpy as np
import torch

import dislib_nn as dnn
from dislib_nn import runtime
from dislib_nn.data import DsTensor
from tests.runtime import tasks


def _open_fds():
    """The master's descriptors of shared memory (torch's and the
    library's own): sockets and pipes that other parts of the session
    (a dask client, the emulated COMPSs runs) open and close meanwhile
    are not counted."""
    gc.collect()
    runtime.barrier()
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue        # closed since it was listed
        count += target.startswith(("/dev/shm/", "/memfd:"))
    return count


def test_library_blocks_are_released_with_the_last_ds_tensor(local):
    runtime.wait_on(tasks.identity(0))          # the pool is up
    before = _open_fds()
    x = dnn.from_array(np.ones((40_000, 16), dtype=np.float32), n_blocks=4)
    shuffled = dnn.shuffle(x, random_state=0)
    part = shuffled[100:30_000]                 # shares most blocks
    del x, shuffled
    assert part.collect().shape == (29_900, 16)
    held = _open_fds()
    del part
    after = _open_fds()
    assert held > before
    assert after <= before


def test_blocks_given_by_the_user_are_never_released(backend):
    mine = [tasks.full(3, 1.0), tasks.full(2, 2.0)]
    x = DsTensor(mine, (3, 2), (), torch.float64)
    view = x[1:4]
    del x, view
    gc.collect()
    # Still the user's: usable in tasks and waitable.
    assert runtime.wait_on(tasks.total(mine)) == 7.0


def test_blocks_a_ds_tensor_owns_are_released_with_it(local):
    """``DsTensor(..., owned=True)`` takes the blocks over: they go when
    the last DsTensor holding them is garbage, as the library's own."""
    runtime.wait_on(tasks.identity(0))          # the pool is up
    before = _open_fds()
    x = DsTensor([tasks.full(30_000, 1.0), tasks.full(20_000, 2.0)],
                 (30_000, 20_000), (), torch.float64, owned=True)
    view = x[10:40_000]                         # shares both blocks
    del x
    assert view.collect().sum().item() == 29_990 + 2 * 10_000
    held = _open_fds()
    del view
    after = _open_fds()
    assert held > before
    assert after <= before
