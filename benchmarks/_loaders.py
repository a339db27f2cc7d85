"""The loaders figure of data_tensor.py (``--loaders``).

``load_hdf5``, ``load_zarr`` and ``load_shards`` of one data set (float32
rows of 128 values), each against reading the whole of it in one process
(h5py ``ds[:]``, zarr ``arr[:]``, ``np.load`` / ``torch.load`` of every
shard). Each contender runs in a fresh child process: one untimed run
(imports, the worker pool, the page cache), then ``repeats`` timed runs,
each to the last byte read (``barrier()`` for the ds-tensor loaders).
Reported: the median time as read throughput, the CPU seconds of the
process and its workers, and the child's peak resident memory (VmHWM,
reset after the untimed run) above its resident memory before the timed
runs.
"""

import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROW = 128       # float32 values per row: 512 bytes
SHARDS = 16
ZARR_CHUNK_ROWS = 1 << 16   # 32 MiB chunks
CONTENDERS = ("load_hdf5", "h5py ds[:]", "load_zarr", "zarr arr[:]",
              "load_shards", "np.load/torch.load")


def write(folder, n_bytes):
    """The same rows as an HDF5 dataset (contiguous), a Zarr array (32 MiB
    chunks, zarr's default codecs) and SHARDS files, .npy and .pt in
    turn."""
    import h5py
    import torch
    import zarr
    rows = n_bytes // (4 * ROW)
    per_shard = -(-rows // SHARDS)
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(folder, "shards"), exist_ok=True)
    with h5py.File(os.path.join(folder, "data.h5"), "w") as f:
        ds = f.create_dataset("x", shape=(rows, ROW), dtype=np.float32)
        array = zarr.create_array(
            store=os.path.join(folder, "data.zarr"), shape=(rows, ROW),
            chunks=(ZARR_CHUNK_ROWS, ROW), dtype=np.float32)
        for k, start in enumerate(range(0, rows, per_shard)):
            part = rng.random((min(per_shard, rows - start), ROW),
                              dtype=np.float32)
            ds[start:start + len(part)] = part
            array[start:start + len(part)] = part
            path = os.path.join(folder, "shards", f"part-{k:03d}")
            if k % 2:
                torch.save(torch.from_numpy(part), path + ".pt")
            else:
                np.save(path + ".npy", part)
    return rows


def _reader(kind, folder):
    """A function reading the whole data set the way ``kind`` does."""
    import h5py
    import torch
    import zarr

    import dislib_nn as dnn
    from dislib_nn.runtime import barrier
    h5 = os.path.join(folder, "data.h5")
    store = os.path.join(folder, "data.zarr")
    shards = os.path.join(folder, "shards")

    def awaited(load):
        def run():
            x = load()
            barrier()           # every block read
            return x
        return run

    def whole_h5():
        with h5py.File(h5, "r") as f:
            return f["x"][:]

    def all_shards():
        return [np.load(os.path.join(shards, name)) if name.endswith(".npy")
                else torch.load(os.path.join(shards, name),
                                weights_only=True)
                for name in sorted(os.listdir(shards))]
    return {
        "load_hdf5": awaited(lambda: dnn.load_hdf5(h5, "x")),
        "h5py ds[:]": whole_h5,
        "load_zarr": awaited(lambda: dnn.load_zarr(store)),
        "zarr arr[:]": lambda: zarr.open_array(store, mode="r")[:],
        "load_shards": awaited(lambda: dnn.load_shards(shards)),
        "np.load/torch.load": all_shards,
    }[kind]


def child(kind, folder, repeats):
    """Runs in a fresh process: prints one LOADER line."""
    import gc

    from data_tensor import _status_kib, cpu_seconds
    read = _reader(kind, folder)
    out = read()                # untimed: imports, pool, page cache
    blocks = getattr(out, "n_blocks", None)
    del out
    gc.collect()
    base = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")            # VmHWM := VmRSS
    times, cpus = [], []
    for _ in range(repeats):
        cpu = cpu_seconds()
        start = time.perf_counter()
        out = read()
        times.append(time.perf_counter() - start)
        cpus.append(cpu_seconds() - cpu)
        del out
        gc.collect()
    peak = _status_kib("VmHWM")
    print("LOADER", repr(kind), base / 1024, peak / 1024, blocks,
          statistics.median(cpus), *times)


def run(script, folder, n_bytes, repeats):
    """Write the data, run every contender in its own child, print the
    table; returns ``{contender: (median s, MB/s, peak increase MiB)}``."""
    rows = write(folder, n_bytes)
    size = rows * ROW * 4
    print(f"data: {rows} rows of {ROW} float32 = {size / 2**20:.0f} MiB, "
          f"as HDF5 (contiguous), Zarr (chunks of {ZARR_CHUNK_ROWS} rows, "
          f"default codecs) and {SHARDS} shards (.npy and .pt in turn); "
          f"in the page cache (just written); {repeats} timed runs each")
    results = {}
    for kind in CONTENDERS:
        out = subprocess.run(
            [sys.executable, script, "--loader-child", kind, "--tmpdir",
             folder, "--repeats", str(repeats)],
            check=True, capture_output=True, text=True).stdout
        line = next(ln for ln in out.splitlines() if ln.startswith("LOADER"))
        fields = line.split("'")[2].split()
        base, peak, blocks, cpu = (float(fields[0]), float(fields[1]),
                                   fields[2], float(fields[3]))
        times = [float(t) for t in fields[4:]]
        median = statistics.median(times)
        results[kind] = (median, size / 1e6 / median, peak - base)
        where = (f"{blocks} blocks" if blocks != "None" else "one process")
        print(f"{kind:>20} ({where}): median {median:.3f} s "
              f"({', '.join(f'{t:.3f}' for t in times)}) = "
              f"{size / 1e6 / median:,.0f} MB/s; CPU {cpu:.2f} s; master "
              f"peak RSS {peak:.0f} MiB, {peak - base:+.0f} MiB above "
              f"{base:.0f} MiB")
    return results
