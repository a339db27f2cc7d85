"""Overhead of the local backend: empty tasks and 10 MB tensor arguments.

Run: ``python benchmarks/runtime_overhead.py [--tasks 2000] [--repeats 3]``

Prints, for the local backend with one worker per core:
- the cost per empty task (throughput over many independent tasks, and
  the round trip of one task waited on at a time);
- the rate at which a 10 MB tensor argument reaches a task, for a tensor
  the master passes again and again (a data block) and for a new tensor
  every call (which pays one copy into shared memory), and when the task
  also reads every byte;
- the same measures for a bare ``concurrent.futures.ProcessPoolExecutor``
  with torch's multiprocessing reductions, as the floor.
Targets (issue 2): at most 1 ms per empty task, at least 3 GB/s for tensor
arguments. This is a benchmark, not a test: it never runs in CI.
"""

import argparse
import concurrent.futures
import multiprocessing
import statistics
import time

import torch
from torch.multiprocessing import reductions  # noqa: F401 - registers them

from dislib_nn import runtime
from dislib_nn.runtime import task, wait_on

from _machine import describe  # noqa: E402 - benchmarks/ is on sys.path

MB10 = 10 * 1000 * 1000


@task(returns=1)
def _empty():
    return None


@task(returns=1)
def _receive(tensor):
    return tensor.shape[0]


@task(returns=1)
def _read(tensor):
    return float(tensor.sum())


def _bare_empty():
    return None


def _bare_receive(tensor):
    return tensor.shape[0]


def _bare_read(tensor):
    return float(tensor.sum())


def _timed(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _tensors(count, fresh):
    if fresh:
        return [torch.rand(MB10 // 4) for _ in range(count)]
    return [torch.rand(MB10 // 4)] * count


def measure_dislib_nn(n_tasks, n_tensor_tasks, repeats):
    runtime.set_backend("local")
    wait_on([_empty() for _ in range(runtime.n_workers() * 4)])  # warm up
    out = {}
    out["empty_ms"] = 1e3 * _timed(
        lambda: wait_on([_empty() for _ in range(n_tasks)]),
        repeats) / n_tasks
    out["round_trip_ms"] = 1e3 * _timed(
        lambda: [wait_on(_empty()) for _ in range(200)], repeats) / 200
    for label, fn, fresh in (("reused", _receive, False),
                             ("fresh", _receive, True),
                             ("read", _read, False)):
        def run():
            tensors = _tensors(n_tensor_tasks, fresh)
            start = time.perf_counter()
            wait_on([fn(t) for t in tensors])
            return time.perf_counter() - start
        wait_on(fn(torch.rand(MB10 // 4)))
        seconds = statistics.median(run() for _ in range(repeats))
        out[f"{label}_gbps"] = n_tensor_tasks * MB10 / seconds / 1e9
    return out


def measure_bare(n_tasks, n_tensor_tasks, repeats, workers):
    ctx = multiprocessing.get_context("forkserver")
    out = {}
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) \
            as pool:
        list(pool.map(_bare_empty_arg, range(workers * 4)))
        out["empty_ms"] = 1e3 * _timed(
            lambda: [f.result() for f in
                     [pool.submit(_bare_empty) for _ in range(n_tasks)]],
            repeats) / n_tasks
        out["round_trip_ms"] = 1e3 * _timed(
            lambda: [pool.submit(_bare_empty).result() for _ in range(200)],
            repeats) / 200
        for label, fn, fresh in (("reused", _bare_receive, False),
                                 ("fresh", _bare_receive, True),
                                 ("read", _bare_read, False)):
            def run():
                tensors = _tensors(n_tensor_tasks, fresh)
                start = time.perf_counter()
                [f.result() for f in [pool.submit(fn, t) for t in tensors]]
                return time.perf_counter() - start
            pool.submit(fn, torch.rand(MB10 // 4)).result()
            seconds = statistics.median(run() for _ in range(repeats))
            out[f"{label}_gbps"] = n_tensor_tasks * MB10 / seconds / 1e9
    return out


def _bare_empty_arg(_):
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--tensor-tasks", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {describe()}")
    ours = measure_dislib_nn(args.tasks, args.tensor_tasks, args.repeats)
    bare = measure_bare(args.tasks, args.tensor_tasks, args.repeats,
                        runtime.n_workers())
    print(f"workers: {runtime.n_workers()} (local backend, forkserver)")
    print(f"{'measure':<34}{'dislib_nn':>12}{'bare pool':>12}")
    rows = [("empty task, many in flight (ms)", "empty_ms"),
            ("empty task, round trip (ms)", "round_trip_ms"),
            ("10 MB tensor, same tensor (GB/s)", "reused_gbps"),
            ("10 MB tensor, new each call (GB/s)", "fresh_gbps"),
            ("10 MB tensor, task sums it (GB/s)", "read_gbps")]
    for label, key in rows:
        print(f"{label:<34}{ours[key]:>12.3f}{bare[key]:>12.3f}")
    ok_empty = ours["empty_ms"] <= 1.0
    ok_rate = ours["reused_gbps"] >= 3.0
    print(f"target empty task <= 1 ms: {'PASS' if ok_empty else 'FAIL'}")
    print(f"target tensor argument >= 3 GB/s: "
          f"{'PASS' if ok_rate else 'FAIL'}")


if __name__ == "__main__":
    main()
