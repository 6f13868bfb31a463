"""Two emulated machines on this host, joined by a link of limited bandwidth (network namespaces).

    python bench/netns.py [--rate-mbit 200] [--delay-ms 0] [--seconds 2.5]   # the self-check (root)

A benchmark imports it (bench scripts run with ``bench/`` on ``sys.path``)::

    from netns import TwoNodeNetwork

    with TwoNodeNetwork(rate_mbit=1000, delay_ms=0.0) as net:
        net.addresses          # ("10.231.0.1", "10.231.0.2"): node 0's and node 1's address
        net.namespaces         # ("hxnode0-<pid>", "hxnode1-<pid>")
        net.interface(0)       # "hxveth0": node 0's end of the link (GLOO_SOCKET_IFNAME)
        p = net.popen(0, argv, env=env)   # subprocess.Popen inside node 0, in a new session
        net.run(1, argv, check=True)      # subprocess.run inside node 1
        net.set_rate(100)                 # 100 Mbit/s from now on, both directions; None: unlimited

The network
-----------
Each node is a network namespace, ``hxnode0-<pid>`` and ``hxnode1-<pid>`` (``-<k>`` appended
when those names exist already: a second network in the same process, or one left behind by an
earlier process of the same pid that was killed with SIGKILL). A veth pair is created with its
ends directly inside them (``hxveth0`` in node 0, ``hxveth1`` in node 1), so it never appears
among the host's interfaces, and the host's own interfaces, addresses and routes are never
touched. The two ends get the two host addresses of a private /30: the first /30 of
10.231.0.0/16 that overlaps no IPv4 network configured on the host (``ip -o -4 addr``), so
10.231.0.1/30 and 10.231.0.2/30 unless the host uses that range. The addresses exist only inside
the namespaces, so networks of other processes cannot collide with them. ``lo`` is up in each
namespace: processes of one node talk to each other, including through their own veth address
(the kernel routes a namespace's own addresses through ``lo``), at loopback speed, and only
traffic between the two nodes crosses the limited link.

The limit
---------
Each end's egress gets a token bucket filter (``tbf``) qdisc at the rate, so the limit holds in
both directions. Of the two ways of limiting a rate, ``tbf`` is the one used, because:

- it is exact over any interval longer than a burst: a packet leaves only when the bucket holds
  its size in tokens, which refill at the rate, so the long-run throughput is the rate to within
  the clock's accuracy. The rate counts whole Ethernet frames (headers included), as a NIC's
  does, so one TCP stream's payload gets 1448/1514 = 0.956 of it (the self-check measures
  0.955-0.957 at 200 Mbit/s; a real gigabit link, with its preamble and gaps, gives 0.94);
- it is in every kernel: ``netem``'s ``rate`` needs the ``sch_netem`` module, which many kernels
  and containers lack (this development machine's among them).

The bucket (``burst``) is 4 ms at the rate, and never less than 128 KiB: veth hands the qdisc
segmentation-offload packets of up to 64 KiB, which ``tbf`` would otherwise cut into MTU-sized
packets (costly); the excess a full bucket lets through at the start is negligible against a
transfer of seconds above 100 Mbit/s (at 10 Mbit/s it adds about 2% to a 4 s transfer). The
queue (``limit``) holds the burst plus 20 ms at the rate, as a switch's buffer would, before it
drops: a bulk TCP flow loses no packets at 200 Mbit/s or 1 Gbit/s and a few tenths of a percent
at 10-50 Mbit/s, which do not lower its throughput (a 1 MiB queue, with no losses, measures the
same while adding up to 0.8 s of queueing delay at 10 Mbit/s).

With ``delay_ms > 0`` each end's root is a ``netem`` qdisc adding that one-way delay (so the
round trip gains twice that), with the ``tbf`` as its child (the recipe of netem's
documentation); this needs ``sch_netem``, and without it the setup fails with
:class:`NetnsError` (that path is untested here, for want of the module).

Cleanup
-------
The network is removed when the ``with`` block ends, normally or by an exception, including
Ctrl-C (SIGINT), SIGTERM and SIGHUP: for the duration of the ``with`` those signals raise
:class:`KeyboardInterrupt` (SIGINT) or :class:`SystemExit` (128 + the signal's number), so the
cleanup runs, and the previous handlers are restored afterwards (a signal whose handler was
``SIG_IGN``, as under ``nohup``, stays ignored; handlers are installed only from the main
thread). An :mod:`atexit` hook removes it as a last resort. The cleanup kills the process group
of every process started with :meth:`~TwoNodeNetwork.popen` (or :meth:`~TwoNodeNetwork.run`)
that is still running (SIGTERM, SIGKILL after 3 s), then any other process left inside either
namespace (SIGKILL), deletes the veth pair and the two namespaces. It is idempotent, never
raises, and reports each failure on one line of stderr. Only SIGKILL of this process (or
``os._exit``) leaves the namespaces behind: ``ip netns del hxnode0-<pid>; ip netns del hxnode1-<pid>`` removes them.
"""

from __future__ import annotations

import argparse
import atexit
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Self

__all__ = ["NetnsError", "TwoNodeNetwork"]

#: The range the link's /30 is taken from (the first /30 in it that the host does not use).
ADDRESS_RANGE = ipaddress.IPv4Network("10.231.0.0/16")
#: The veth end inside node ``i``'s namespace is ``INTERFACE_PREFIX + str(i)``.
INTERFACE_PREFIX = "hxveth"
#: The signals that end the ``with`` block through its cleanup.
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Where ``ip netns`` keeps a file (a bind mount) per named namespace, as iproute2 does.
NETNS_DIR = "/var/run/netns"
_KILL_GRACE_S = 3.0
_CREATE_LOCK = threading.Lock()  # choosing free names and creating them is one step


class NetnsError(RuntimeError):
    """The network cannot be set up or used: not root, no ``ip netns``, a command that failed."""


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def tbf_parameters(rate_mbit: float) -> tuple[int, int, int]:
    """``(rate in bit/s, burst in bytes, limit in bytes)`` of the ``tbf`` qdisc for ``rate_mbit``
    (the module docstring says why these)."""
    rate_bit = round(rate_mbit * 1e6)
    bytes_per_s = rate_bit / 8
    burst = max(128 * 1024, int(bytes_per_s * 0.004))
    limit = burst + int(bytes_per_s * 0.020)
    return rate_bit, burst, limit


class TwoNodeNetwork:
    """Two network namespaces ("nodes") joined by a veth pair limited to ``rate_mbit`` Mbit/s in
    each direction (``None``: unlimited), with ``delay_ms`` of added one-way delay (0: none).

    Use it as a context manager: entering creates the network (or raises :class:`NetnsError`,
    leaving nothing behind), leaving removes it. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and
    ``ip``/``tc`` from iproute2.
    """

    def __init__(self, rate_mbit: float | None = 1000.0, delay_ms: float = 0.0) -> None:
        if rate_mbit is not None and not rate_mbit > 0:
            raise ValueError(f"rate_mbit must be positive or None, not {rate_mbit!r}")
        if not delay_ms >= 0:
            raise ValueError(f"delay_ms must be >= 0, not {delay_ms!r}")
        self.rate_mbit: float | None = rate_mbit  # the limit now in force (set_rate changes it)
        self.delay_ms = float(delay_ms)
        self._namespaces: tuple[str, str] | None = None
        self._addresses: tuple[str, str] | None = None
        self._prefixlen = 30
        self._ip = "ip"
        self._tc = "tc"
        self._live: list[str] = []  # namespaces created and not yet deleted
        self._procs: list[subprocess.Popen] = []
        self._tbf_on = False  # whether the tbf qdiscs exist now
        self._entered = False
        self._closed = False
        self._previous_handlers: dict[int, Any] = {}
        self._defer = False  # while True, a signal is noted in _deferred_signal, not raised
        self._deferred_signal: int | None = None

    # -- the network's description -----------------------------------------------------------

    @property
    def namespaces(self) -> tuple[str, str]:
        """The names of node 0's and node 1's network namespaces."""
        self._check_open()
        assert self._namespaces is not None
        return self._namespaces

    @property
    def addresses(self) -> tuple[str, str]:
        """Node 0's and node 1's IPv4 address on the link (without the prefix length)."""
        self._check_open()
        assert self._addresses is not None
        return self._addresses

    def interface(self, node: int) -> str:
        """The name of the veth end inside ``node``'s namespace (what ``GLOO_SOCKET_IFNAME``
        names for a process of that node)."""
        self._check_node(node)
        return f"{INTERFACE_PREFIX}{node}"

    # -- processes inside a node ----------------------------------------------------------------

    def popen(self, node: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """:class:`subprocess.Popen` of ``argv`` inside ``node``'s namespace (through
        ``ip netns exec``), in a new session (``start_new_session=True`` unless given) so that
        Ctrl-C at the terminal reaches this process only and the cleanup can kill the process's
        whole group. ``kwargs`` go to :class:`subprocess.Popen` (``env``, ``stdout``, ``cwd``...).
        A process still running when the network is removed is killed then."""
        self._check_node(node)
        self._check_open()
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv must be a sequence of arguments, not a string")
        kwargs.setdefault("start_new_session", True)
        cmd = [self._ip, "netns", "exec", self.namespaces[node], *map(os.fspath, argv)]
        proc = subprocess.Popen(cmd, **kwargs)
        self._procs = [p for p in self._procs if p.poll() is None] + [proc]
        return proc

    def run(self, node: int, argv: Sequence[str], *, input: Any = None, timeout: float | None = None,
            check: bool = False, capture_output: bool = False, **kwargs: Any) -> subprocess.CompletedProcess:
        """Like :func:`subprocess.run`, inside ``node``'s namespace (through :meth:`popen`): waits
        for ``argv`` to end and returns its :class:`subprocess.CompletedProcess`; on a timeout, an
        exception or Ctrl-C while waiting, kills its process group first. ``check=True`` raises
        :class:`subprocess.CalledProcessError` on a non-zero exit status."""
        if input is not None:
            kwargs.setdefault("stdin", subprocess.PIPE)
        if capture_output:
            kwargs.setdefault("stdout", subprocess.PIPE)
            kwargs.setdefault("stderr", subprocess.PIPE)
        proc = self.popen(node, argv, **kwargs)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except BaseException:
            self._kill_group(proc, signal.SIGKILL)
            proc.wait()
            raise
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check:
            result.check_returncode()
        return result

    # -- the limit ---------------------------------------------------------------------------

    def set_rate(self, rate_mbit: float | None) -> None:
        """Limit the link to ``rate_mbit`` Mbit/s in each direction from now on (``None``: no
        limit; the added delay, if any, stays). Raises :class:`NetnsError` if ``tc`` fails."""
        if rate_mbit is not None and not rate_mbit > 0:
            raise ValueError(f"rate_mbit must be positive or None, not {rate_mbit!r}")
        self._check_open()
        self._apply_rate(rate_mbit)

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> Self:
        if self._entered:
            raise NetnsError("a TwoNodeNetwork can be entered once; make a new one")
        self._entered = True
        atexit.register(self.close)
        self._install_signal_handlers()
        try:
            self._setup()
        except BaseException:
            self._exit_cleanup()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._exit_cleanup()
        signum, self._deferred_signal = self._deferred_signal, None
        if signum is not None and exc_info[0] is None:  # a signal came during the cleanup
            _raise_for(signum)

    def close(self) -> None:
        """Remove the network now: kill what :meth:`popen` started and is still running, then
        anything else inside the namespaces, delete the veth pair and the namespaces. Idempotent
        (a second call retries only what failed); never raises; each failure is one line of
        stderr."""
        self._closed = True
        try:
            self._kill_processes()
        except Exception as e:  # noqa: BLE001 - the cleanup must go on
            _log(f"killing the network's processes failed: {e}")
        for ns in list(self._live):
            self._kill_namespace_pids(ns)
        if self._live and self._namespaces is not None and self._namespaces[0] in self._live:
            # Deleting the veth is synchronous; a namespace's deletion removes its interfaces
            # later, in a kernel work queue, so `ip link` could still show them for a moment.
            self._quiet([self._ip, "-n", self._namespaces[0], "link", "del", self.interface(0)])
        for ns in list(self._live):
            try:
                if not os.path.exists(os.path.join(NETNS_DIR, ns)):  # never made (setup stopped before it)
                    self._live.remove(ns)
                    continue
                r = self._tool([self._ip, "netns", "del", ns])
                if r.returncode == 0 or not os.path.exists(os.path.join(NETNS_DIR, ns)):
                    self._live.remove(ns)
                else:
                    _log(f"ip netns del {ns} failed: {_first_line(r.stderr) or f'exit {r.returncode}'}")
            except Exception as e:  # noqa: BLE001
                _log(f"ip netns del {ns} failed: {e}")
        self._tbf_on = False

    # -- internals ---------------------------------------------------------------------------

    def _check_node(self, node: int) -> None:
        if node not in (0, 1):
            raise ValueError(f"node must be 0 or 1, not {node!r}")

    def _check_open(self) -> None:
        if self._closed or self._namespaces is None:
            raise NetnsError("the network is not set up (use TwoNodeNetwork in a with statement)")

    def _setup(self) -> None:
        if not sys.platform.startswith("linux"):
            raise NetnsError("network namespaces need Linux")
        if os.geteuid() != 0:
            raise NetnsError("TwoNodeNetwork needs root (to create network namespaces and qdiscs); run as root")
        ip, tc = shutil.which("ip"), shutil.which("tc")
        if ip is None or tc is None:
            raise NetnsError(f"{'ip' if ip is None else 'tc'} not found on PATH (install iproute2)")
        self._ip, self._tc = ip, tc
        r = self._tool([ip, "netns", "list"])
        if r.returncode != 0:
            raise NetnsError(f"`ip netns` is not available: {_first_line(r.stderr) or f'exit {r.returncode}'}")
        net = self._free_network()
        host0, host1 = (str(a) for a in net.hosts())
        self._addresses, self._prefixlen = (host0, host1), net.prefixlen
        with _CREATE_LOCK:
            names = self._free_names()
            for ns in names:
                self._live.append(ns)  # first: the cleanup deletes it if it exists, however far this got
                self._cmd([ip, "netns", "add", ns], f"cannot create network namespace {ns}")
        self._namespaces = names
        v0, v1 = self.interface(0), self.interface(1)
        self._cmd([ip, "link", "add", v0, "netns", names[0], "type", "veth", "peer", "name", v1,
                   "netns", names[1]], "cannot create the veth pair")
        for node, ns in enumerate(names):
            self._cmd([ip, "-n", ns, "link", "set", "lo", "up"], f"cannot bring lo up in {ns}")
            self._cmd([ip, "-n", ns, "addr", "add", f"{self._addresses[node]}/{self._prefixlen}",
                       "dev", self.interface(node)], f"cannot address {self.interface(node)} in {ns}")
            self._cmd([ip, "-n", ns, "link", "set", self.interface(node), "up"],
                      f"cannot bring {self.interface(node)} up in {ns}")
        if self.delay_ms > 0:
            for node, ns in enumerate(names):
                self._cmd([ip, "netns", "exec", ns, tc, "qdisc", "add", "dev", self.interface(node), "root",
                           "handle", "1:", "netem", "delay", f"{self.delay_ms:g}ms", "limit", "100000"],
                          f"cannot add the netem qdisc for delay_ms={self.delay_ms:g} "
                          "(the kernel needs sch_netem)")
        self._apply_rate(self.rate_mbit)

    def _free_network(self) -> ipaddress.IPv4Network:
        """The first /30 of :data:`ADDRESS_RANGE` that overlaps no IPv4 network of the host."""
        r = self._tool([self._ip, "-o", "-4", "addr", "show"])
        if r.returncode != 0:
            raise NetnsError(f"ip -o -4 addr failed: {_first_line(r.stderr) or f'exit {r.returncode}'}")
        used = []
        for line in r.stdout.splitlines():
            words = line.split()
            if "inet" in words and words.index("inet") + 1 < len(words):
                used.append(ipaddress.IPv4Interface(words[words.index("inet") + 1]).network)
        for net in ADDRESS_RANGE.subnets(new_prefix=30):
            if not any(net.overlaps(u) for u in used):
                return net
        raise NetnsError(f"every /30 of {ADDRESS_RANGE} overlaps an address of this host")

    def _free_names(self) -> tuple[str, str]:
        r = self._tool([self._ip, "netns", "list"])
        existing = {line.split()[0] for line in r.stdout.splitlines() if line.strip()}
        existing |= set(os.listdir(NETNS_DIR)) if os.path.isdir(NETNS_DIR) else set()
        pid = os.getpid()
        for k in range(1000):
            suffix = f"{pid}" if k == 0 else f"{pid}-{k}"
            names = (f"hxnode0-{suffix}", f"hxnode1-{suffix}")
            if not existing & set(names):
                return names
        raise NetnsError(f"no free namespace names hxnode0-{pid}-<k> (remove old ones with ip netns del)")

    def _apply_rate(self, rate_mbit: float | None) -> None:
        assert self._namespaces is not None
        netem = self.delay_ms > 0
        where = ["parent", "1:1", "handle", "10:"] if netem else ["root", "handle", "1:"]
        for node, ns in enumerate(self._namespaces):
            dev = self.interface(node)
            base = [self._ip, "netns", "exec", ns, self._tc, "qdisc"]
            if rate_mbit is None:
                if self._tbf_on:
                    self._cmd([*base, "del", "dev", dev, *where], f"cannot remove the rate limit of {dev} in {ns}")
            else:
                rate_bit, burst, limit = tbf_parameters(rate_mbit)
                self._cmd([*base, "replace", "dev", dev, *where, "tbf", "rate", f"{rate_bit}bit",
                           "burst", str(burst), "limit", str(limit)],
                          f"cannot limit {dev} in {ns} to {rate_mbit:g} Mbit/s")
        self._tbf_on = rate_mbit is not None
        self.rate_mbit = rate_mbit

    def _tool(self, cmd: list[str]) -> subprocess.CompletedProcess:
        """Run an ``ip`` or ``tc`` command to its end: in its own session, so that a signal sent
        to this process's group (Ctrl-C at a terminal, ``timeout``) cannot kill it halfway, and
        with this process's signals deferred while it runs (raised after it, unless a cleanup is
        under way), so that one cannot abandon it halfway either."""
        deferring = self._defer
        self._defer = True
        try:
            return subprocess.run(cmd, check=False, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  start_new_session=True)
        finally:
            self._defer = deferring
            if not deferring and self._deferred_signal is not None:
                signum, self._deferred_signal = self._deferred_signal, None
                _raise_for(signum)

    def _cmd(self, cmd: list[str], what: str) -> None:
        """Run a setup command; :class:`NetnsError` naming ``what`` failed if it fails."""
        r = self._tool(cmd)
        if r.returncode != 0:
            raise NetnsError(f"{what}: {_first_line(r.stderr) or _first_line(r.stdout) or f'exit {r.returncode}'}"
                             f" ({' '.join(cmd)})")

    def _quiet(self, cmd: list[str]) -> None:
        """Run a cleanup command; a failure is logged, never raised."""
        try:
            r = self._tool(cmd)
            if r.returncode != 0:
                _log(f"{' '.join(cmd)} failed: {_first_line(r.stderr) or f'exit {r.returncode}'}")
        except Exception as e:  # noqa: BLE001
            _log(f"{' '.join(cmd)} failed: {e}")

    @staticmethod
    def _kill_group(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill_processes(self) -> None:
        """SIGTERM to the group of every process popen started, SIGKILL to those still there
        after the grace time. A group is signalled even if its leader has ended, since the
        leader's children may remain."""
        procs, self._procs = self._procs, []
        for p in procs:
            p.poll()
            self._kill_group(p, signal.SIGTERM)
        deadline = time.monotonic() + _KILL_GRACE_S
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs:
            self._kill_group(p, signal.SIGKILL)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _log(f"process {p.pid} ({' '.join(map(str, p.args[4:]))[:80]}) did not end after SIGKILL")

    def _kill_namespace_pids(self, ns: str) -> None:
        """SIGKILL every process still inside ``ns`` (one not started by popen, or one that left
        its group): a process inside keeps the namespace and its veth alive after deletion."""
        try:
            if not os.path.exists(os.path.join(NETNS_DIR, ns)):
                return
            r = self._tool([self._ip, "netns", "pids", ns])
            pids = [int(w) for w in r.stdout.split() if w.isdigit()]
            for pid in pids:
                if pid != os.getpid():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            if pids:
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and any(_running(p) for p in pids):
                    time.sleep(0.02)
        except Exception as e:  # noqa: BLE001
            _log(f"killing the processes inside {ns} failed: {e}")

    def _exit_cleanup(self) -> None:
        """The cleanup of ``__exit__`` (and of a failed ``__enter__``): a signal arriving during it
        is noted, not raised, so it cannot cut the cleanup short; then the previous handlers."""
        self._defer = True
        try:
            self.close()
        finally:
            self._restore_signal_handlers()
            self._defer = False
            try:
                atexit.unregister(self.close)
            except Exception:  # noqa: BLE001, S110
                pass

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._defer:
            self._deferred_signal = signum
        else:
            _raise_for(signum)

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in _SIGNALS:
            previous = signal.getsignal(sig)
            if previous == signal.SIG_IGN:
                continue
            self._previous_handlers[sig] = previous
            signal.signal(sig, self._on_signal)

    def _restore_signal_handlers(self) -> None:
        handlers, self._previous_handlers = self._previous_handlers, {}
        for sig, previous in handlers.items():
            try:
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
            except Exception as e:  # noqa: BLE001
                _log(f"restoring the handler of signal {sig} failed: {e}")


def _raise_for(signum: int) -> None:
    """What a signal of :data:`_SIGNALS` becomes inside the ``with``."""
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a zombie has already left its namespaces)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _log(message: str) -> None:
    try:
        print(f"netns: cleanup: {message}", file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001, S110 - stderr itself may be gone
        pass


# -- the self-check ----------------------------------------------------------------------------

_CHUNK = 1 << 20


def _receiver(host: str) -> None:
    """Accept one TCP connection on ``host`` (a free port, printed as ``port N``), read it to its
    end and print ``{"bytes": .., "seconds": ..}`` (first byte to end of stream)."""
    with socket.create_server((host, 0)) as srv:
        print(f"port {srv.getsockname()[1]}", flush=True)
        conn, _ = srv.accept()
        with conn:
            buf = memoryview(bytearray(_CHUNK))
            total, first = 0, None
            while True:
                n = conn.recv_into(buf)
                if n == 0:
                    break
                if first is None:
                    first = time.perf_counter()
                total += n
            end = time.perf_counter()
    print(json.dumps({"bytes": total, "seconds": end - (first if first is not None else end)}), flush=True)


def _sender(host: str, port: int, seconds: float) -> None:
    """Send zeros to ``host:port`` for ``seconds``, then close."""
    data = bytes(_CHUNK)
    with socket.create_connection((host, port)) as s:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            s.sendall(data)


def _throughput(net: TwoNodeNetwork, send_node: int, recv_node: int, seconds: float) -> float:
    """Mbit/s of one TCP stream from a process in ``send_node`` to one in ``recv_node`` listening
    on ``recv_node``'s link address, sending for ``seconds``."""
    host = net.addresses[recv_node]
    me = os.path.abspath(__file__)
    recv = net.popen(recv_node, [sys.executable, me, "_recv", host], stdout=subprocess.PIPE, text=True)
    assert recv.stdout is not None
    line = recv.stdout.readline().split()
    if len(line) != 2 or line[0] != "port":
        raise NetnsError(f"the receiver in node {recv_node} did not start (said {' '.join(line)!r})")
    net.run(send_node, [sys.executable, me, "_send", host, line[1], str(seconds)], check=True,
            timeout=seconds * 4 + 30)
    out, _ = recv.communicate(timeout=seconds * 4 + 30)
    result = json.loads(out)
    return result["bytes"] * 8 / result["seconds"] / 1e6


def self_check(rate_mbit: float, delay_ms: float, seconds: float) -> int:
    """Measure the limited link and the loopback inside node 0, print both and their ratio;
    0 if the link is within 15% of ``rate_mbit`` and loopback at least 5x faster, else 1."""
    with TwoNodeNetwork(rate_mbit=rate_mbit, delay_ms=delay_ms) as net:
        print(f"nodes {net.namespaces[0]} ({net.addresses[0]} on {net.interface(0)}) and "
              f"{net.namespaces[1]} ({net.addresses[1]} on {net.interface(1)}), "
              f"tbf {rate_mbit:g} Mbit/s each way, delay {delay_ms:g} ms", flush=True)
        link = _throughput(net, 0, 1, seconds)
        loop = _throughput(net, 0, 0, min(seconds, 1.0))
        ns = net.namespaces
    print(f"node 0 -> node 1 over the link:          {link:10.1f} Mbit/s ({link / rate_mbit:.3f} of the set rate)")
    print(f"node 0 -> its own address (loopback):    {loop:10.1f} Mbit/s")
    print(f"loopback / link: {loop / link:.1f}x")
    left = subprocess.run(["ip", "netns", "list"], check=False, capture_output=True, text=True).stdout
    ok = True
    if abs(link / rate_mbit - 1) > 0.15:
        print(f"FAIL: the link's throughput is not within 15% of {rate_mbit:g} Mbit/s")
        ok = False
    if loop < 5 * link:
        print("FAIL: loopback is not at least 5x faster than the link")
        ok = False
    if any(n in left.split() for n in ns):
        print(f"FAIL: namespaces left behind: {left.strip()}")
        ok = False
    print("ok" if ok else "self-check failed")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_recv"]:
        _receiver(argv[1])
        return 0
    if argv[:1] == ["_send"]:
        _sender(argv[1], int(argv[2]), float(argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate-mbit", type=float, default=200.0)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--seconds", type=float, default=2.5, help="how long the link's measurement sends")
    args = ap.parse_args(argv)
    try:
        return self_check(args.rate_mbit, args.delay_ms, args.seconds)
    except NetnsError as e:
        print(f"netns: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("netns: interrupted; the network was removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
