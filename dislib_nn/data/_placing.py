"""Where a ds-tensor's blocks are made: :func:`per_block`.

Block ``i`` of ``n`` is made on the node of replica ``i`` of ``n``
(:func:`dislib_nn.runtime.placed` with ``of=n``): contiguous runs of
blocks per node, the nodes where a fit with one block per replica trains
them (its training tasks are placed the same way), so that the rows a
loader reads, a shuffle moves or an array is cut into stay on the node
that trains on them. On backends that place nothing this changes
nothing.
"""

from dislib_nn.runtime import placed

__all__ = ["per_block"]


def per_block(n, make):
    """``[make(i) for i in range(n)]``, each call's tasks placed on the
    node of block ``i`` of ``n``."""
    made = []
    for i in range(n):
        with placed(i, of=n):
            made.append(make(i))
    return made
