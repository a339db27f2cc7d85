"""A PyCOMPSs-style application whose tasks live in its own __main__.

Run as ``python graph_app.py BACKEND``: builds a tree of merges, a
commutative accumulator and a collection input, and prints the results
as JSON so that runs on different backends can be compared.
"""

import json
import sys

import torch

from dislib_nn.runtime import (COLLECTION_IN, COMMUTATIVE, Depth, Type,
                               set_backend, task, wait_on)


@task(returns=1)
def make(i):
    return torch.arange(50_000, dtype=torch.float64) * i


@task(returns=1)
def merge(a, b):
    return a + b


@task(returns=0, acc=COMMUTATIVE)
def accumulate(acc, block):
    acc["sum"] += float(block.sum())
    acc["n"] += 1


@task(returns=1, blocks={Type: COLLECTION_IN, Depth: 1})
def norms(blocks):
    return [float(b.norm()) for b in blocks]


def main(backend):
    set_backend(backend, n_workers=2)
    blocks = [make(i) for i in range(5)]
    level = blocks
    while len(level) > 1:
        level = [merge(level[i], level[i + 1]) if i + 1 < len(level)
                 else level[i] for i in range(0, len(level), 2)]
    acc = {"sum": 0.0, "n": 0}
    for block in blocks:
        accumulate(acc, block)
    result = {"tree": float(wait_on(level[0]).sum()),
              "acc": wait_on(acc),
              "norms": wait_on(norms(blocks))}
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
