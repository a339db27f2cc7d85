"""One description of the machine a benchmark ran on, for its output."""

import os
import platform
import sys


def describe():
    """CPU model (and whether it is a VM), cores, memory and versions."""
    model, virtual = "unknown CPU", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown CPU":
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags") and " hypervisor" in line:
                    virtual = " (virtual machine: vCPUs)"
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    import numpy
    import torch
    return (f"{model}{virtual}; {os.cpu_count()} logical cores "
            f"({usable} usable); {memory / 2**30:.0f} GiB RAM; "
            f"{platform.system()} {platform.release()}; Python "
            f"{platform.python_version()}; torch {torch.__version__}; "
            f"numpy {numpy.__version__}")


def print_header(name):
    """Print what ran (the script and its arguments), where, and the load.

    The first lines of every benchmark's output, so that a figure copied
    into docs/benchmarks.md keeps its command, machine and load with it.
    """
    print(f"{name}:", " ".join(sys.argv[1:]) or "(defaults)")
    print("Machine:", describe())
    print(f"Load average before: {os.getloadavg()}")
