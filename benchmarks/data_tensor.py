"""ds-tensor benchmark: the master's memory, the speed of shuffle, and
the loaders of HDF5, Zarr and shards.

Two figures by default, on the local backend:

1. Master memory. ``load_npy`` of a 2 GiB float32 file into 16 blocks,
   then ``map_blocks`` and ``shuffle``, waiting for every task. Reported:
   the master's peak resident memory (VmHWM) above its resident memory
   after imports. Runs in a fresh child process, so that the figure is
   that process's own; the file is written beforehand by another child.
2. Shuffle speed. ``shuffle`` of a 1 GiB float32 tensor (rows of 128
   values) against ``numpy.take(a, perm, axis=0)`` on the same data in
   one process, as a ratio of median times over repeats. Blocks are made
   (and the worker pool started) before timing.

With ``--loaders``, instead: ``load_hdf5``, ``load_zarr`` and
``load_shards`` of a ``--loaders-mib`` (default 512) MiB data set against
reading it whole in one process (h5py, zarr, ``np.load``/``torch.load``),
as read throughput and the reading process's peak memory, each
contender in a fresh child process (see ``_loaders.py``; needs h5py and
zarr, about 3 times the data set in memory and disk).

Usage::

    python benchmarks/data_tensor.py            # both figures
    python benchmarks/data_tensor.py --repeats 7 --blocks 2 8 16
    python benchmarks/data_tensor.py --skip-memory
    python benchmarks/data_tensor.py --loaders --repeats 5

Needs about 7 GiB of free memory and 2 GiB of disk in --tmpdir.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import _loaders  # noqa: E402 - benchmarks/ is on sys.path
from _machine import describe  # noqa: E402

GIB = 1 << 30
ROW = 128   # float32 values per row: 512 bytes


def _scale(block):
    """The map_blocks function of the memory run (module level: picklable)."""
    return block * 2.0 - 1.0


# ---------------------------------------------------------------- memory
def write_npy(path, n_bytes):
    """Write an ``(n, ROW)`` float32 ``.npy`` of ``n_bytes`` by chunks."""
    rows = n_bytes // (4 * ROW)
    header = {"descr": "<f4", "fortran_order": False, "shape": (rows, ROW)}
    rng = np.random.default_rng(0)
    chunk = (64 << 20) // (4 * ROW)
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            f.write(rng.random((n, ROW), dtype=np.float32).tobytes())


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_child(path, n_blocks):
    """Runs in a fresh process: prints the master's RSS figures (MiB)."""
    import dislib_nn as dnn
    from dislib_nn.runtime import barrier
    after_imports = _status_kib("VmRSS")
    # Reset the peak to the current RSS (Linux >= 4.0), so that the peak
    # below is the one reached while the ds-tensor work ran.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    start = time.perf_counter()
    x = dnn.load_npy(path, n_blocks=n_blocks)
    y = x.map_blocks(_scale)
    z = dnn.shuffle(y, random_state=0)
    barrier()
    elapsed = time.perf_counter() - start
    peak = _status_kib("VmHWM")
    print(f"MEMORY {after_imports / 1024:.1f} {peak / 1024:.1f} "
          f"{elapsed:.2f} {z.n_blocks} {len(z)}")


def run_memory(tmpdir, n_bytes, n_blocks):
    path = os.path.join(tmpdir, "dislib_nn_bench.npy")
    try:
        subprocess.run([sys.executable, "-c",
                        "import sys; sys.path.insert(0, sys.argv[1]); "
                        "import data_tensor as b; "
                        "b.write_npy(sys.argv[2], int(sys.argv[3]))",
                        os.path.dirname(os.path.abspath(__file__)), path,
                        str(n_bytes)], check=True)
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--memory-child",
             path, "--memory-blocks", str(n_blocks)],
            check=True, capture_output=True, text=True).stdout
    finally:
        if os.path.exists(path):
            os.remove(path)
    line = next(ln for ln in out.splitlines() if ln.startswith("MEMORY"))
    base, peak, elapsed, blocks, rows = line.split()[1:]
    base, peak = float(base), float(peak)
    print(f"load_npy({n_bytes / GIB:.0f} GiB, n_blocks={blocks}) + "
          f"map_blocks + shuffle ({rows} rows), all tasks awaited: "
          f"{float(elapsed):.1f} s")
    print(f"  master RSS after imports: {base:.0f} MiB; peak during the "
          f"run: {peak:.0f} MiB; increase: {peak - base:.0f} MiB "
          f"(target < 200 MiB)")
    return peak - base


# --------------------------------------------------------------- shuffle
def cpu_seconds():
    """CPU time (user + system) of this process and all its descendants.

    Local workers are children of the fork server, itself a child of this
    process, so descendants are found through /proc.
    """
    parents, times = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    family = {os.getpid()}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in family and pid not in family:
                family.add(pid)
                changed = True
    return sum(times.get(pid, 0.0) for pid in family)


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def wait_until_quiet(limit_s, threshold=0.6):
    """Wait (at most limit_s) for the 1-minute load average to drop."""
    start = time.time()
    while load_average() > threshold and time.time() - start < limit_s:
        time.sleep(5)
    return load_average()


def _median_time(fn, repeats):
    times, cpus = [], []
    for _ in range(repeats):
        cpu = cpu_seconds()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        cpus.append(cpu_seconds() - cpu)
    return statistics.median(times), times, statistics.median(cpus)


def run_shuffle(n_bytes, block_counts, repeats):
    import dislib_nn as dnn
    from dislib_nn.runtime import barrier
    rows = n_bytes // (4 * ROW)
    results = {}
    for n_blocks in block_counts:
        x = dnn.random((rows, ROW), n_blocks=n_blocks, random_state=0)
        barrier()
        seeds = iter(range(repeats + 1))

        def once():
            shuffled = dnn.shuffle(x, random_state=next(seeds))
            barrier()           # every block written
            del shuffled

        once()                  # untimed: warms the pool and the memory
        results[n_blocks] = _median_time(once, repeats)
        del x
    a = np.random.default_rng(0).random((rows, ROW), dtype=np.float32)
    perm = np.random.default_rng(1).permutation(rows)
    np.take(a, perm, axis=0)    # warm-up
    base, base_times, base_cpu = _median_time(
        lambda: np.take(a, perm, axis=0), repeats)
    print(f"np.take(a, perm, axis=0), {n_bytes / GIB:.0f} GiB float32, rows "
          f"of {ROW}, one process: median {base:.3f} s "
          f"({_fmt(base_times)}); CPU {base_cpu:.2f} s")
    for n_blocks, (median, times, cpu) in results.items():
        print(f"shuffle, {n_blocks:>2} blocks, local backend: median "
              f"{median:.3f} s ({_fmt(times)}) = {median / base:.2f} x "
              f"np.take (target <= 3); CPU of master and workers "
              f"{cpu:.2f} s")
    return base, results


def _fmt(times):
    return ", ".join(f"{t:.3f}" for t in times)


# ------------------------------------------------------------------ main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--blocks", type=int, nargs="+", default=[2, 8, 16])
    parser.add_argument("--shuffle-gib", type=float, default=1.0)
    parser.add_argument("--memory-gib", type=float, default=2.0)
    parser.add_argument("--memory-blocks", type=int, default=16)
    parser.add_argument("--tmpdir", default=tempfile.gettempdir())
    parser.add_argument("--quiet-wait", type=float, default=300,
                        help="seconds to wait for the load average to drop "
                             "below 0.6 before each figure (default 300)")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-shuffle", action="store_true")
    parser.add_argument("--loaders", action="store_true",
                        help="only the loaders figure (HDF5, Zarr, shards)")
    parser.add_argument("--loaders-mib", type=float, default=512)
    parser.add_argument("--memory-child", metavar="PATH",
                        help=argparse.SUPPRESS)
    parser.add_argument("--loader-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        memory_child(args.memory_child, args.memory_blocks)
        return
    if args.loader_child:
        _loaders.child(args.loader_child, args.tmpdir, args.repeats)
        return
    print(f"machine: {describe()}")
    print(f"backend: local, {os.environ.get('DISLIB_NN_WORKERS') or 'one'}"
          f" worker(s) per core")
    if args.loaders:
        before = wait_until_quiet(args.quiet_wait)
        with tempfile.TemporaryDirectory(dir=args.tmpdir) as folder:
            _loaders.run(os.path.abspath(__file__), folder,
                         int(args.loaders_mib * (1 << 20)), args.repeats)
        print(f"1-minute load average before: {before:.2f}, after: "
              f"{load_average():.2f}")
        return
    if not args.skip_memory:
        run_memory(args.tmpdir, int(args.memory_gib * GIB),
                   args.memory_blocks)
    if not args.skip_shuffle:
        before = wait_until_quiet(args.quiet_wait)
        run_shuffle(int(args.shuffle_gib * GIB), args.blocks, args.repeats)
        print(f"1-minute load average before the shuffle runs: {before:.2f}"
              f", after: {load_average():.2f} (other processes running "
              f"make the wall times longer)")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"this process's own peak RSS: {usage.ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
