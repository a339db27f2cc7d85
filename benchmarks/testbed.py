"""A multi-node testbed on one machine: network namespaces on shaped links.

Each "node" is a network namespace with one interface, ``eth0``, joined
by a veth pair to a Linux bridge that lives in a namespace of its own, so
nothing is created in the root namespace. A "master" node, where the
Dask scheduler, the client and the user's command run, is joined to the
bridge the same way. With ``--rate`` every link is shaped in both
directions by a token bucket (``tc ... tbf``): on the node's egress and
on the bridge port's egress, so a node sends and receives at most the
rate. Addresses are on 10.213.0.0/24: the master is .1, node i is .(i+2).
The namespaces are ``PREFIX-m`` (master), ``PREFIX-n0`` ... and
``PREFIX-br`` (the bridge); everything else lives inside them.

Run as root from the repository root::

    python benchmarks/testbed.py --nodes 2 --rate 100mbit    # measure it
    python benchmarks/testbed.py --nodes 4 --rate 1gbit --dask -- \\
        python my_benchmark.py                  # run a command on it
    python benchmarks/testbed.py --cleanup      # leftovers of prefix dnt

The command runs in the master namespace with ``TESTBED_NODES`` (the
nodes' addresses), ``TESTBED_NETNS`` (their namespaces), ``TESTBED_IFACE``
and ``TESTBED_MASTER`` set, and with ``--dask`` also
``DISLIB_NN_BACKEND=dask`` and ``DISLIB_NN_DASK_ADDRESS``; it may start
processes on a node itself with ``ip netns exec NS ...``. The testbed
reports the throughput it measured between two nodes, the idle round
trip, and the bytes each node's interface sent and received while the
command ran (``--json PATH`` writes them too), and returns the command's
exit code. Whatever happens (an error, Ctrl-C, SIGTERM) it removes every
namespace it made and ends every process in them; after a SIGKILL,
``--cleanup`` does (and the next run with the same prefix does it first).

From Python (``benchmarks/`` on the path)::

    from testbed import Testbed
    with Testbed(n_nodes=2, rate="1gbit", dask=True) as tb:
        print(tb.measure_throughput())
        tb.run([sys.executable, "bench.py"])         # in the master node
        print(tb.counters())

Latency. The kernel here has no ``netem`` (nor any other qdisc that adds
delay), so no delay is added: an idle round trip between two nodes stays
about 10 us in the kernel whatever the rate (the probe's ping-pong in
Python reports 30-60 us, its own overhead included). tbf's ``latency``
only bounds how long a packet may wait in its queue (it sets the queue's
length); it delays nothing on an idle link. A user-space delay line that
joins TAP devices and holds each frame D ms gave 10.3 ms round trips with
5 ms each way on this machine; it is not built here. For exchanging
weights once per epoch this matters little: each message is megabytes
and bandwidth-bound (a 16.8 MB model takes about 140 ms at 1 Gbit/s and
1.4 s at 100 Mbit/s, while a few ms of round trip per message adds a few
percent). DDP's all-reduce every step is more sensitive: a ring
all-reduce is 2(P-1) message rounds per step, so with small models, where
each round carries little, real round trips of 0.1-1 ms add time that
this testbed does not show; its DDP step times are a lower bound there.

What is ended: every process started through :meth:`Testbed.run` (by
process group) and every process left in the testbed's namespaces.
A process the command starts in the root namespace, in a session of its
own, is the command's to end.

Needs root and iproute2 (``ip``, ``tc``); :func:`unavailable_reason`
says why it cannot run. Not a test; never imported by the package.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SUBNET = "10.213.0"
IFACE = "eth0"
DASK_PORT = 8786
# The workers' nannies leave glibc's malloc thresholds alone (dask sets
# MALLOC_TRIM_THRESHOLD_ by default, which doubled a small CNN's step
# time here; docs/hpc.md, "Workers' malloc").
WORKER_ENV = {"DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON":
              "{'MALLOC_TRIM_THRESHOLD_': None}"}
# The scheduler leaves placed tasks where they were placed: work stealing
# moves a task and its inputs at a bandwidth it assumes (docs/hpc.md,
# "Work stealing").
SCHEDULER_ENV = {"DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False"}
MAX_NODES = 253                 # node i is .(i + 2); .1 is the master
DEFAULT_PREFIX = "dnt"

_PREFIX_RE = re.compile(r"[a-z][a-z0-9]{0,11}")
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class TestbedError(RuntimeError):
    """The testbed could not be built, or a process on it failed."""


class TestbedUnavailable(TestbedError):
    """No root, or no network namespaces: see :func:`unavailable_reason`."""


# ------------------------------------------------------------ parameters
def parse_rate(rate):
    """Bits per second of ``"100mbit"``, ``"1gbit"``, ``"2.5gbit"``...;
    None for ``"none"`` or None (an unshaped link)."""
    if rate is None or str(rate).strip().lower() == "none":
        return None
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit",
                         str(rate).strip().lower())
    bits = found and float(found.group(1)) * \
        {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[found.group(2)]
    if not bits or bits < 1e3:
        raise ValueError("must be 'none' or a rate of at least 1kbit such "
                         f"as 100mbit, 300mbit or 1gbit; got {rate!r}")
    return int(bits)


def parse_size(size):
    """Bytes of ``"64k"``, ``"256kb"``, ``"1m"`` or ``65536`` (k = 1024)."""
    found = re.fullmatch(r"(\d+)\s*(b|k|kb|m|mb)?", str(size).strip().lower())
    if not found:
        raise ValueError(f"must be a size such as 64k or 256kb; got {size!r}")
    scale = {None: 1, "b": 1, "k": 1024, "kb": 1024, "m": 2**20, "mb": 2**20}
    value = int(found.group(1)) * scale[found.group(2)]
    if value < 1600:
        raise ValueError("must be at least 1600 bytes (one full frame); "
                         f"got {size!r}")
    return value


def parse_seconds(duration):
    """Seconds of ``"20ms"``, ``"500us"``, ``"1s"``."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)",
                         str(duration).strip().lower())
    if not found or float(found.group(1)) <= 0:
        raise ValueError("must be a positive duration such as 20ms; "
                         f"got {duration!r}")
    return float(found.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[
        found.group(2)]


def default_burst(bits_per_s):
    """The token bucket's size for a rate: 2 ms of it, at least 64 KiB.

    Measured here: at 1 Gbit/s a 64 KB burst gave 628 Mbit/s (GSO sends
    packets of up to 64 KB) and 256 KB gave 954; at 100 Mbit/s 64 KB gave
    96. Two milliseconds is 244 KiB at 1 Gbit/s and under 64 KiB below
    256 Mbit/s.
    """
    return max(64 * 1024, -(-int(bits_per_s * 0.002 / 8) // 1024) * 1024)


def _check_nodes(n_nodes):
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) \
            or not 1 <= n_nodes <= MAX_NODES:
        raise ValueError(f"must be an int in the range [1, {MAX_NODES}]; "
                         f"got {n_nodes!r}")
    return n_nodes


def _check_prefix(prefix):
    if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
        raise ValueError("must be 1-12 lowercase letters or digits starting "
                         f"with a letter; got {prefix!r}")
    return prefix


def _check_positive(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not value > 0:
        raise ValueError(f"must be a positive number; got {value!r}")
    return float(value)


def _check_resources(resources):
    if resources is not None and not re.fullmatch(
            r"\s*\w+=[\d.e+-]+(\s+\w+=[\d.e+-]+)*\s*", str(resources)):
        raise ValueError("must be resources such as 'GPU=1 MEMORY=1e9'; "
                         f"got {resources!r}")
    return resources


# ------------------------------------------------------------ the host
def _sh(argv, check=True, input=None, timeout=60):
    """Run a short command here; its CompletedProcess (text)."""
    done = subprocess.run(argv, input=input, capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        raise TestbedError(f"'{' '.join(argv)}' failed (exit "
                           f"{done.returncode}): {done.stderr.strip()}")
    return done


def unavailable_reason():
    """None if testbeds can be built here, else why not (one line).

    Needs Linux, root, ``ip`` and ``tc``, and a kernel with network
    namespaces, veth pairs, bridges and tbf: it tries them in a probe
    namespace of its own, and removes it.
    """
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return ("needs root to create network namespaces "
                f"(running as uid {os.geteuid()})")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs '{tool}' (iproute2) on PATH"
    probe = f"dntprobe{os.getpid()}x{threading.get_ident() % 10000}"
    steps = [("network namespaces", ["ip", "netns", "add", probe]),
             ("veth pairs", ["ip", "-n", probe, "link", "add", "name", "va",
                             "type", "veth", "peer", "name", "vb"]),
             ("bridges", ["ip", "-n", probe, "link", "add", "name", "br",
                          "type", "bridge"]),
             ("tbf", ["tc", "-n", probe, "qdisc", "add", "dev", "va", "root",
                      "tbf", "rate", "1gbit", "burst", "64k",
                      "latency", "20ms"])]
    try:
        for what, argv in steps:
            done = _sh(argv, check=False)
            if done.returncode != 0:
                return (f"no {what} here: '{' '.join(argv)}' failed: "
                        f"{done.stderr.strip() or done.returncode}")
    finally:
        _sh(["ip", "netns", "del", probe], check=False)
    return None


def namespaces_with_prefix(prefix):
    """The names of the namespaces ``PREFIX-*`` that exist now."""
    listed = _sh(["ip", "netns", "list"]).stdout
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    return [name for name in names if name.startswith(prefix + "-")]


def _pids_in(namespace):
    done = _sh(["ip", "netns", "pids", namespace], check=False)
    return [int(p) for p in done.stdout.split()
            if p.isdigit() and int(p) != os.getpid()]


def remove_namespaces(names, grace=3.0):
    """End every process in the namespaces, then delete them."""
    pids = {p for name in names for p in _pids_in(name)}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            pids = {p for name in names for p in _pids_in(name)}
            time.sleep(0.05)
    for name in names:
        _sh(["ip", "netns", "del", name], check=False)


def cleanup(prefix=DEFAULT_PREFIX):
    """Remove every namespace ``PREFIX-*`` and its processes; their names."""
    names = namespaces_with_prefix(_check_prefix(prefix))
    remove_namespaces(names)
    return names


def _stop(procs, grace=3.0):
    """End the process groups of these Popen objects: TERM, then KILL."""
    running = [p for p in procs if p.poll() is None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in running:
            try:                        # still unreaped: the group is ours
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        for proc in running:
            try:
                proc.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        running = [p for p in running if p.poll() is None]


def _tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


# A probe run on two nodes: ``serve HOST`` answers one connection with an
# echo of each byte (round trips), then drains a second one (throughput)
# and prints what it got; ``send HOST PORT NBYTES SECONDS ROUNDS`` is the
# other end. The stream stops at NBYTES or after SECONDS, whichever first.
_PROBE = r"""
import json, socket, statistics, struct, sys, time
def connect(host, port):
    for _ in range(100):
        try:
            return socket.create_connection((host, port), timeout=10)
        except OSError:
            time.sleep(0.1)
    return socket.create_connection((host, port), timeout=10)
def serve(host):
    srv = socket.create_server((host, 0))
    srv.settimeout(60)
    print(srv.getsockname()[1], flush=True)
    echo = srv.accept()[0]
    echo.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while byte := echo.recv(1):
        echo.sendall(byte)
    echo.close()
    sink = srv.accept()[0]
    sink.settimeout(60)
    view = memoryview(bytearray(1 << 20))
    got, first, start = 0, 0, None
    try:
        while n := sink.recv_into(view):
            if start is None:
                start, first = time.perf_counter(), n
            got += n
    except ConnectionResetError:
        pass
    end = time.perf_counter()
    print(json.dumps({"bytes": got, "timed_bytes": got - first,
                      "seconds": end - start if start else 0.0}), flush=True)
def send(host, port, nbytes, seconds, rounds):
    with connect(host, port) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            s.sendall(b"x")
            s.recv(1)
            times.append(time.perf_counter() - t)
    chunk = memoryview(bytearray(256 * 1024))
    s = connect(host, port)
    stop = time.perf_counter() + seconds
    sent, cut = 0, False
    while sent < nbytes and not cut:
        left = stop - time.perf_counter()
        s.settimeout(max(left, 0.001))
        try:
            sent += s.send(chunk[:min(len(chunk), nbytes - sent)])
        except (TimeoutError, socket.timeout):
            cut = True
        cut = cut or time.perf_counter() >= stop
    if cut:        # drop what is still queued here: reset the connection
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                     struct.pack("ii", 1, 0))
    else:
        s.shutdown(socket.SHUT_WR)
        s.settimeout(60)
        s.recv(1)
    s.close()
    print(json.dumps({"rtt_median_s": statistics.median(times),
                      "rtt_min_s": min(times), "sent": sent}), flush=True)
if sys.argv[1] == "serve":
    serve(sys.argv[2])
else:
    send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
         float(sys.argv[5]), int(sys.argv[6]))
"""

# Run in the master node: waits for N workers, prints their hosts.
_WAIT_FOR_WORKERS = r"""
import json, sys
from distributed import Client
address, n, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with Client(address, timeout=timeout) as client:
    client.wait_for_workers(n, timeout=timeout)
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:
        info = client.scheduler_info()
    print(json.dumps(sorted(w["host"] for w in info["workers"].values())))
"""


# ------------------------------------------------------------ the testbed
class Testbed:
    """N nodes and a master, each a network namespace, on shaped links.

    Parameters
    ----------
    n_nodes : int, default=2
        Nodes besides the master (1 to 253).
    rate : str or None, default=None
        Each link's rate in both directions (``"100mbit"``, ``"1gbit"``);
        None or ``"none"`` leaves links unshaped.
    burst : str or int or None, default=None
        The token bucket's size (``"256k"``); None picks it by rate
        (:func:`default_burst`).
    queue : str, default="20ms"
        tbf's ``latency``: the longest a packet may queue (it adds no
        delay to an idle link).
    dask : bool, default=False
        Start a Dask scheduler in the master and one worker (1 thread)
        per node, and wait for them.
    resources : str or None, default=None
        Passed to every worker's ``--resources`` (``"GPU=1"``).
    prefix : str, default="dnt"
        The namespaces' names start with ``PREFIX-``; one testbed per
        prefix at a time (a start removes the prefix's leftovers).
    python : str or None, default=None
        The interpreter of the Dask processes and probes (this one).
    timeout : float, default=60
        Seconds to wait for the Dask workers to register.
    verbose : bool, default=True
        Say what is done on stderr.

    Attributes (once started): ``addresses`` and ``namespaces`` of the
    nodes, ``master_address``, ``master_namespace``, ``scheduler_address``
    (None without Dask), ``rate_bits_per_s``, ``burst_bytes``.

    Starting installs handlers for SIGINT, SIGTERM and SIGHUP (in the
    main thread) that raise, so that ``with`` removes everything; closing
    restores the previous ones.
    """

    def __init__(self, n_nodes=2, *, rate=None, burst=None, queue="20ms",
                 dask=False, resources=None, prefix=DEFAULT_PREFIX,
                 python=None, timeout=60.0, verbose=True):
        self.n_nodes = n_nodes
        self.rate = rate
        self.burst = burst
        self.queue = queue
        self.dask = dask
        self.resources = resources
        self.prefix = prefix
        self.python = python
        self.timeout = timeout
        self.verbose = verbose
        self._procs = []        # every Popen started, for close()
        self._daemons = []      # (label, Popen, log path)
        self._touched = False   # namespaces may exist: close() removes them
        self._tmpdir = None
        self._old_handlers = {}

    # ---- set-up
    def validate(self):
        """Check the parameters (start does): ValueError naming the
        first bad one, what it must be and what it got."""
        checks = [("n_nodes", _check_nodes, self.n_nodes),
                  ("rate", parse_rate, self.rate),
                  ("burst", lambda b: b if b is None else parse_size(b),
                   self.burst),
                  ("queue", parse_seconds, self.queue),
                  ("resources", _check_resources, self.resources),
                  ("prefix", _check_prefix, self.prefix),
                  ("timeout", _check_positive, self.timeout)]
        for name, check, value in checks:
            try:
                check(value)
            except ValueError as e:
                raise ValueError(f"The '{name}' parameter of Testbed "
                                 f"{e}") from None
        python = self.python or sys.executable
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise ValueError("The 'python' parameter of Testbed must be an "
                             f"executable; got {self.python!r}")

    def start(self):
        """Build the nodes (and Dask); returns self. On failure, removes
        whatever it made and raises."""
        self.validate()
        reason = unavailable_reason()
        if reason:
            raise TestbedUnavailable(reason)
        self._install_handlers()
        try:
            self._touched = True
            stale = namespaces_with_prefix(self.prefix)
            if stale:
                self._say("removing leftovers of an earlier run with prefix "
                          f"{self.prefix!r}: {', '.join(stale)}")
                remove_namespaces(stale)
            self._tmpdir = tempfile.mkdtemp(prefix=f"{self.prefix}-testbed-")
            self._build_network()
            if self.dask:
                self._start_dask()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def rate_bits_per_s(self):
        return parse_rate(self.rate)

    @property
    def burst_bytes(self):
        """The bucket size used (None on unshaped links)."""
        rate = self.rate_bits_per_s
        if rate is None:
            return None
        return default_burst(rate) if self.burst is None \
            else parse_size(self.burst)

    @property
    def namespaces(self):
        return [f"{self.prefix}-n{i}" for i in range(self.n_nodes)]

    @property
    def addresses(self):
        return [f"{SUBNET}.{i + 2}" for i in range(self.n_nodes)]

    @property
    def master_namespace(self):
        return f"{self.prefix}-m"

    @property
    def master_address(self):
        return f"{SUBNET}.1"

    @property
    def bridge_namespace(self):
        return f"{self.prefix}-br"

    @property
    def scheduler_address(self):
        return f"tcp://{self.master_address}:{DASK_PORT}" if self.dask \
            else None

    def _hosts(self):
        """(namespace, address, bridge port) of the master and the nodes."""
        return [(self.master_namespace, self.master_address, "p-m")] + [
            (ns, addr, f"p-n{i}") for i, (ns, addr)
            in enumerate(zip(self.namespaces, self.addresses))]

    def _build_network(self):
        bridge = self.bridge_namespace
        for ns in [bridge] + [h[0] for h in self._hosts()]:
            _sh(["ip", "netns", "add", ns])
            _sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            # No IPv6 chatter (router and neighbour solicitations) in the
            # byte counts; absent IPv6 is fine.
            _sh(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                 "net.ipv6.conf.all.disable_ipv6=1",
                 "net.ipv6.conf.default.disable_ipv6=1"], check=False)
        _sh(["ip", "-n", bridge, "link", "add", "name", "br0", "type",
             "bridge"])
        _sh(["ip", "-n", bridge, "link", "set", "br0", "up"])
        rate = self.rate_bits_per_s
        for ns, addr, port in self._hosts():
            _sh(["ip", "link", "add", "name", IFACE, "netns", ns, "type",
                 "veth", "peer", "name", port, "netns", bridge])
            _sh(["ip", "-n", bridge, "link", "set", port, "master", "br0"])
            _sh(["ip", "-n", bridge, "link", "set", port, "up"])
            _sh(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", IFACE])
            _sh(["ip", "-n", ns, "link", "set", IFACE, "up"])
            if rate is not None:
                for where, dev in ((ns, IFACE), (bridge, port)):
                    _sh(["tc", "-n", where, "qdisc", "add", "dev", dev,
                         "root", "tbf", "rate", f"{rate}bit", "burst",
                         str(self.burst_bytes), "latency",
                         f"{parse_seconds(self.queue) * 1e6:.0f}us"])
        shaped = "unshaped" if rate is None else \
            f"{rate / 1e6:g} Mbit/s each way, burst {self.burst_bytes} B"
        self._say(f"{self.n_nodes} node(s) {', '.join(self.addresses)} and "
                  f"master {self.master_address} on bridge {bridge}; {shaped}")

    def _start_dask(self):
        python = self.python or sys.executable
        self._daemon("dask scheduler", "master", [
            python, "-m", "distributed.cli.dask_scheduler",
            "--host", self.master_address, "--port", str(DASK_PORT),
            "--no-dashboard"], env=SCHEDULER_ENV)
        for i, addr in enumerate(self.addresses):
            resources = ["--resources", self.resources] if self.resources \
                else []
            self._daemon(f"dask worker {i}", i, [
                python, "-m", "distributed.cli.dask_worker",
                self.scheduler_address, "--host", addr, "--nthreads", "1",
                "--nworkers", "1", "--no-dashboard", "--local-directory",
                os.path.join(self._tmpdir, f"worker-{i}"), *resources],
                env=WORKER_ENV)
        self._wait_for_workers()

    def _daemon(self, label, node, argv, env=None):
        log = os.path.join(self._tmpdir, label.replace(" ", "-") + ".log")
        with open(log, "w") as f:
            proc = self.run(argv, node=node, env=env, background=True,
                            stdout=f, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
        self._daemons.append((label, proc, log))
        self._say(f"started {label} in {self._namespace(node)} "
                  f"(pid {proc.pid})")

    def _wait_for_workers(self):
        python = self.python or sys.executable
        waiter = self.run([python, "-c", _WAIT_FOR_WORKERS,
                           self.scheduler_address, str(self.n_nodes),
                           str(self.timeout)], background=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
        deadline = time.monotonic() + self.timeout + 30   # imports too
        try:
            while waiter.poll() is None:
                dead = [(label, p, log) for label, p, log in self._daemons
                        if p.poll() is not None]
                if dead:
                    label, p, log = dead[0]
                    raise TestbedError(f"{label} exited ({p.returncode}) "
                                       f"before all workers registered; its "
                                       f"log ends:\n{_tail(log)}")
                if time.monotonic() > deadline:
                    raise TestbedError("the check for dask workers did not "
                                       f"end within {self.timeout + 30:.0f} s")
                time.sleep(0.1)
            out, err = waiter.communicate()
        finally:
            _stop([waiter])
        hosts = json.loads(out) if waiter.returncode == 0 else []
        missing = [a for a in self.addresses if a not in hosts]
        if waiter.returncode != 0 or missing:
            said = (err.strip().splitlines() or ["nothing"])[-1]
            logs = "".join(f"--- {label}:\n{_tail(log, 5)}"
                           for label, _, log in self._daemons)
            raise TestbedError(
                f"dask workers did not all register within {self.timeout:g} "
                f"s (timeout): missing {', '.join(missing)}; the check said: "
                f"{said}\n{logs}")
        self._say(f"{len(hosts)} dask worker(s) registered with "
                  f"{self.scheduler_address}")

    # ---- use
    def _namespace(self, node):
        if node == "master":
            return self.master_namespace
        if isinstance(node, int) and not isinstance(node, bool) \
                and 0 <= node < self.n_nodes:
            return self.namespaces[node]
        raise ValueError(f"node must be 'master' or an int in [0, "
                         f"{self.n_nodes}); got {node!r}")

    def environment(self, extra=None):
        """The environment commands run with: this one, the TESTBED_*
        variables, DISLIB_NN_BACKEND/DISLIB_NN_DASK_ADDRESS with Dask,
        then ``extra``."""
        env = dict(os.environ)
        env.update(TESTBED_NODES=",".join(self.addresses),
                   TESTBED_NETNS=",".join(self.namespaces),
                   TESTBED_IFACE=IFACE, TESTBED_MASTER=self.master_address)
        if self.dask:
            env.update(DISLIB_NN_BACKEND="dask",
                       DISLIB_NN_DASK_ADDRESS=self.scheduler_address)
        env.update(extra or {})
        return env

    def run(self, argv, node="master", *, env=None, background=False,
            timeout=None, **popen_kwargs):
        """Run ``argv`` in a node (``"master"`` or an index).

        In its own process group, with :meth:`environment` (``env`` on
        top). ``background=True`` returns the Popen (ended by
        :meth:`stop` or at close); otherwise waits and returns a
        CompletedProcess (``stdout=subprocess.PIPE`` captures), ending the
        command if the wait is interrupted or ``timeout`` passes.
        """
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self._namespace(node), *map(str, argv)],
            env=self.environment(env), start_new_session=True,
            **popen_kwargs)
        self._procs.append(proc)
        if background:
            return proc
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            _stop([proc])
            raise
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def stop(self, *procs):
        """End background processes (their process groups)."""
        _stop(procs)

    def counters(self):
        """``{namespace: {"address", "tx_bytes", "rx_bytes"}}`` of every
        node's interface now, the master's included."""
        stats = f"/sys/class/net/{IFACE}/statistics/"
        counts = {}
        for ns, addr, _ in self._hosts():
            done = _sh(["ip", "netns", "exec", ns, "cat", stats + "tx_bytes",
                        stats + "rx_bytes"])
            tx, rx = map(int, done.stdout.split())
            counts[ns] = {"address": addr, "tx_bytes": tx, "rx_bytes": rx}
        return counts

    def measure_throughput(self, src=0, dst=None, nbytes=None, seconds=2.0,
                           rounds=100):
        """One TCP stream from node ``src`` to ``dst`` (node 1, or the
        master with one node), bounded by ``nbytes`` (16 MiB on shaped
        links, 256 MiB unshaped: buffers hold megabytes) and ``seconds``, and
        ``rounds`` one-byte round trips before it (Python's own time
        included). Returns a dict: from, to, bytes, seconds, mbit_per_s,
        rate_mbit_per_s (asked), rtt_ms (median), rtt_min_ms."""
        if dst is None:
            dst = 1 if self.n_nodes > 1 else "master"
        if nbytes is None:
            nbytes = 2**24 if self.rate_bits_per_s else 2**28
        python = self.python or sys.executable
        self._namespace(src)
        dst_addr = self.master_address if self._namespace(dst) == \
            self.master_namespace else self.addresses[dst]
        server = self.run([python, "-c", _PROBE, "serve", dst_addr], dst,
                          background=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
        try:
            port = server.stdout.readline().strip()
            if not port.isdigit():
                raise TestbedError("the throughput probe did not start: "
                                   f"{server.stderr.read()[-500:]}")
            sender = self.run([python, "-c", _PROBE, "send", dst_addr, port,
                               str(nbytes), str(seconds), str(rounds)], src,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=seconds + 120)
            out, err = server.communicate(timeout=120)
        finally:
            _stop([server])
        if sender.returncode != 0 or server.returncode != 0:
            raise TestbedError("the throughput probe failed: "
                               f"{(sender.stderr + err)[-500:]}")
        got, sent = json.loads(out), json.loads(sender.stdout)
        if not got["seconds"] > 0:
            raise TestbedError(f"the throughput probe received {got['bytes']}"
                               f" bytes in {got['seconds']} s")
        rate = self.rate_bits_per_s
        return {"from": self._namespace(src), "to": self._namespace(dst),
                "bytes": got["bytes"], "seconds": got["seconds"],
                "mbit_per_s": got["timed_bytes"] * 8 / got["seconds"] / 1e6,
                "rate_mbit_per_s": None if rate is None else rate / 1e6,
                "rtt_ms": sent["rtt_median_s"] * 1e3,
                "rtt_min_ms": sent["rtt_min_s"] * 1e3}

    # ---- tear-down
    def close(self):
        """End every process started and remove every namespace of the
        prefix; restore the signal handlers. Safe to call twice."""
        ignored = self._ignore_signals()
        try:
            _stop(self._procs)
            self._procs, self._daemons = [], []
            if self._touched:
                remove_namespaces(namespaces_with_prefix(self.prefix))
                self._touched = False
            if self._tmpdir:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None
        finally:
            self._restore_handlers({**ignored, **self._old_handlers})
            self._old_handlers = {}

    def _install_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return

        def _raise(signum, frame):
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)

        for sig in _SIGNALS:
            self._old_handlers.setdefault(sig, signal.signal(sig, _raise))

    def _ignore_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, signal.SIG_IGN) for sig in _SIGNALS}

    @staticmethod
    def _restore_handlers(handlers):
        for sig, handler in handlers.items():
            signal.signal(sig, handler if handler is not None
                          else signal.SIG_DFL)

    def _say(self, message):
        if self.verbose:
            print(f"testbed: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------ the CLI
def _arg(check):
    """An argparse type from a check that raises ValueError."""
    def convert(text):
        try:
            check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text
    return convert


def _nodes_arg(text):
    try:
        return _check_nodes(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be an int in the range [1, {MAX_NODES}]; got {text!r}") \
            from None


def _parser():
    parser = argparse.ArgumentParser(
        prog="testbed.py", usage="%(prog)s [options] [-- CMD ARGS...]",
        description="Nodes as network namespaces on shaped links; runs CMD "
                    "in the master node and reports what the links did.")
    parser.add_argument("--nodes", type=_nodes_arg, default=2,
                        help="nodes besides the master (default 2)")
    parser.add_argument("--rate", type=_arg(parse_rate), default="none",
                        help="each link's rate both ways: 1gbit, 300mbit, "
                             "100mbit or none (default)")
    parser.add_argument("--burst", type=_arg(parse_size),
                        help="tbf burst (default: 2 ms of the rate, at "
                             "least 64k)")
    parser.add_argument("--queue", type=_arg(parse_seconds), default="20ms",
                        help="tbf latency: the longest a packet queues "
                             "(default 20ms; adds no delay)")
    parser.add_argument("--dask", action="store_true",
                        help="a Dask scheduler in the master, a worker per "
                             "node")
    parser.add_argument("--resources", type=_arg(_check_resources),
                        help="the workers' --resources, e.g. 'GPU=1'")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the Dask workers (60)")
    parser.add_argument("--prefix", type=_arg(_check_prefix),
                        default=DEFAULT_PREFIX,
                        help="namespaces are named PREFIX-* (default dnt)")
    parser.add_argument("--no-measure", action="store_true",
                        help="skip the throughput and round-trip probe")
    parser.add_argument("--json", metavar="PATH",
                        help="write the report to PATH as JSON")
    parser.add_argument("--cleanup", action="store_true",
                        help="remove the leftovers of PREFIX and exit")
    return parser


def _split_command(argv):
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def _report_bytes(before, after):
    rows = []
    for ns, now in after.items():
        rows.append({"namespace": ns, "address": now["address"],
                     "tx_bytes": now["tx_bytes"] - before[ns]["tx_bytes"],
                     "rx_bytes": now["rx_bytes"] - before[ns]["rx_bytes"]})
        print(f"testbed: bytes {ns} ({now['address']}): sent "
              f"{rows[-1]['tx_bytes']}, received {rows[-1]['rx_bytes']}")
    return rows


def main(argv=None):
    options, command = _split_command(
        sys.argv[1:] if argv is None else list(argv))
    parser = _parser()
    args = parser.parse_args(options)
    if args.timeout <= 0:
        parser.error(f"argument --timeout: must be positive; got "
                     f"{args.timeout!r}")
    reason = unavailable_reason()
    if reason:
        print(f"testbed: cannot run: {reason}", file=sys.stderr)
        return 2
    if args.cleanup:
        removed = cleanup(args.prefix)
        print(f"testbed: removed {len(removed)} namespace(s) of prefix "
              f"{args.prefix!r}{': ' if removed else ''}{', '.join(removed)}")
        return 0
    report = {"rate": args.rate, "nodes": args.nodes, "prefix": args.prefix,
              "command": command}
    code = 0
    try:
        with Testbed(args.nodes, rate=args.rate, burst=args.burst,
                     queue=args.queue, dask=args.dask,
                     resources=args.resources, prefix=args.prefix,
                     timeout=args.timeout) as tb:
            report.update(
                rate_bits_per_s=tb.rate_bits_per_s,
                burst_bytes=tb.burst_bytes, namespaces=tb.namespaces,
                addresses=tb.addresses, master_namespace=tb.master_namespace,
                master_address=tb.master_address, interface=IFACE,
                scheduler_address=tb.scheduler_address)
            if not args.no_measure:
                m = tb.measure_throughput()
                asked = "unshaped" if m["rate_mbit_per_s"] is None else \
                    f"asked {m['rate_mbit_per_s']:g} Mbit/s: " \
                    f"{m['mbit_per_s'] / m['rate_mbit_per_s']:.0%}"
                print(f"testbed: throughput {m['from']} -> {m['to']}: "
                      f"{m['mbit_per_s']:.1f} Mbit/s over "
                      f"{m['bytes'] / 1e6:.1f} MB in {m['seconds']:.2f} s "
                      f"({asked}); idle round trip {m['rtt_ms']:.3f} ms "
                      f"(median of 100 in Python; min {m['rtt_min_ms']:.3f})",
                      flush=True)
                report["throughput"] = m
            if command:
                before, start = tb.counters(), time.perf_counter()
                done = tb.run(command)
                report["seconds"] = time.perf_counter() - start
                code = done.returncode if done.returncode >= 0 \
                    else 128 - done.returncode
                report["exit_code"] = code
                print(f"testbed: the command exited {code} after "
                      f"{report['seconds']:.1f} s", flush=True)
                report["bytes"] = _report_bytes(before, tb.counters())
    except KeyboardInterrupt:
        print("testbed: interrupted; everything removed", file=sys.stderr)
        return 130
    except SystemExit as e:
        if not isinstance(e.code, int) or e.code <= 128:
            raise
        print(f"testbed: stopped by signal {e.code - 128}; everything "
              "removed", file=sys.stderr)
        return e.code
    except TestbedError as e:
        print(f"testbed: error: {e}", file=sys.stderr)
        code = 1
        report["error"] = str(e)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
