"""Real network partitions for fault tests: every process in a network namespace of its own.

    with Network() as net:                      # skip first if available() gives a reason
        a, b = net.host("a"), net.host("b")      # 10.77.<n>.2, 10.77.<n>.3
        server = b.popen(["python3", "-m", "http.server", "--bind", b.address, "8000"])
        net.partition([a], [b])                  # both ways; one_way=True: a -> b only
        net.isolate(a)                           # a reaches nothing but its own loopback
        net.heal()                               # every rule gone
    etcd(tmp / "etcd", a).start()            # an etcd member in a (tests.harness.EtcdProcess)

How it works (needs root, iproute2's ``ip`` and ``nft`` from nftables: ``make system-deps``):

- A *hub* namespace ``wfn<pid>-hub`` holds a bridge ``br0``. The pid in every name keeps
  parallel runs apart; ``Network`` deletes leftovers of dead runs (names whose pid is gone).
- ``host(name)`` makes namespace ``wfn<pid>-<name>`` with loopback up and a veth pair: ``eth0``
  inside, with address ``10.77.<n>.<k>/24``, its peer a port of the bridge in the hub.
- The root namespace reaches the bridge too (``Network.root``, address ``10.77.<n>.1``, through
  the veth ``wfn<pid>r``), so a test process can be the client of every host. ``<n>`` is the
  first /24 of 10.77.0.0/16 no address of the root namespace is in, chosen under a lock.
- Partitions are nftables rules on the bridge (family ``bridge``, table ``wharf_fault`` in the
  hub, ``forward`` hook): a blocked direction ``x -> y`` drops the IP packets from x's address to
  y's as a switch would, silently (the sender gets no error, a TCP connect times out), every
  packet, established connections included; ``isolate`` drops every frame of the host's bridge
  port. ``heal`` deletes the table. No rule is ever set in a host or the root namespace, so
  ``Network.root`` can be partitioned like any host.
- On exit (even after a failure) every process still running in a namespace of the run is
  killed and the namespaces deleted; the bridge, the veths and the root's veth go with them.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.harness import EtcdProcess

PREFIX = "wfn"
SUBNETS = ipaddress.ip_network("10.77.0.0/16")
TABLE = "wharf_fault"
LOCK = "/run/wharf-netns.lock"
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380


def _run(*cmd: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def available() -> str | None:
    """None when namespaces can be used here, else why not (a reason to skip with)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"`{tool}` not found: install Debian's {package} (make system-deps)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "nft", "list", "ruleset")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot use network namespaces / nftables: {exc}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def namespaces() -> list[str]:
    return [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()]


def _kill_inside(ns: str) -> None:
    """SIGKILL every process of namespace ``ns`` and wait (a bounded while) until they are gone."""
    pids = [int(p) for p in _run("ip", "netns", "pids", ns, check=False).split()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # a paused one dies only once resumed
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p) and not _zombie(p)]
        time.sleep(0.02)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def clean_leftovers() -> list[str]:
    """Delete the namespaces and root veths of runs whose process is gone; returns their names."""
    gone = []
    for ns in namespaces():
        m = re.fullmatch(rf"{PREFIX}(\d+)-.+", ns)
        if m and not _alive(int(m.group(1))):
            _kill_inside(ns)
            _run("ip", "netns", "del", ns, check=False)
            gone.append(ns)
    for line in _run("ip", "-o", "link", "show").splitlines():
        m = re.match(rf"\d+: ({PREFIX}(\d+)r)[@:]", line)
        if m and not _alive(int(m.group(2))):
            _run("ip", "link", "del", m.group(1), check=False)
            gone.append(m.group(1))
    return gone


class Host:
    """A namespace on the bridge (``ns`` None: ``Network.root``, the root namespace); ``port``
    is its veth's name on the bridge."""

    def __init__(self, name: str, ns: str | None, address: str, port: str) -> None:
        self.name = name
        self.ns = ns
        self.address = address
        self.port = port

    def command(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` as run inside this host (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns, *cmd] if self.ns else list(cmd)

    def popen(self, cmd: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.command(cmd), **kw)

    def run(self, cmd: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.command(cmd), **kw)

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address})"


def etcd(root: Path, host: Host, members: Sequence[Host] = ()) -> EtcdProcess:
    """An etcd member (not started) inside ``host``: clients on ``host:2379``, peers on
    ``host:2380``, named after the host. ``members``: every host of its cluster, ``host``
    included (each runs one member; ``launch`` them all, then ``wait_healthy`` each); none:
    a one-member cluster (``start`` it)."""
    cluster = {m.name: f"http://{m.address}:{ETCD_PEER_PORT}" for m in members} or None
    if cluster is not None and host.name not in cluster:
        raise ValueError(f"{host} is not one of the members {list(cluster)}")
    return EtcdProcess(root, address=host.address, port=ETCD_CLIENT_PORT,
                       peer_port=ETCD_PEER_PORT, prefix=host.command([]), name=host.name,
                       initial_cluster=cluster)  # fmt: skip


class Network:
    def __init__(self) -> None:
        self.tag = f"{PREFIX}{os.getpid()}"
        self.hub = f"{self.tag}-hub"
        self.hosts: dict[str, Host] = {}
        self.subnet: ipaddress.IPv4Network | None = None
        self.root: Host | None = None

    # --- life cycle -------------------------------------------------------------------------------
    def __enter__(self) -> Network:
        clean_leftovers()
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self) -> None:
        with open(LOCK, "w") as lock:  # two runs never pick the same subnet
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.subnet = self._free_subnet()
            _run("ip", "netns", "add", self.hub)
            self._ip_in(self.hub, "link", "set", "lo", "up")
            self._ip_in(self.hub, "link", "add", "br0", "type", "bridge")
            self._ip_in(self.hub, "link", "set", "br0", "up")
            root_if = f"{self.tag}r"
            _run("ip", "link", "add", root_if, "type", "veth", "peer", "name", "up0",
                 "netns", self.hub)  # fmt: skip
            self._ip_in(self.hub, "link", "set", "up0", "master", "br0", "up")
            _run("ip", "addr", "add", f"{self._address(1)}/24", "dev", root_if)
            _run("ip", "link", "set", root_if, "up")
        self.root = Host("root", None, self._address(1), "up0")

    def close(self) -> None:
        """Kill what runs inside, delete every namespace of this run (idempotent)."""
        mine = [ns for ns in namespaces() if ns.startswith(f"{self.tag}-")]
        for ns in mine:
            _kill_inside(ns)
        for ns in mine:
            _run("ip", "netns", "del", ns, check=False)
        _run("ip", "link", "del", f"{self.tag}r", check=False)  # gone with the hub already
        self.hosts.clear()

    def _free_subnet(self) -> ipaddress.IPv4Network:
        used = [
            ipaddress.ip_interface(word).network
            for line in _run("ip", "-4", "-o", "addr", "show").splitlines()
            for word in line.split()[3:4]
        ]
        candidates = list(SUBNETS.subnets(new_prefix=24))
        start = os.getpid() % len(candidates)
        for subnet in candidates[start:] + candidates[:start]:
            if subnet.network_address.packed[2] and not any(subnet.overlaps(u) for u in used):
                return subnet
        raise RuntimeError(f"no free /24 left in {SUBNETS}")

    def _address(self, k: int) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + k)

    def _ip_in(self, ns: str, *args: str) -> None:
        _run("ip", "-n", ns, *args)

    # --- hosts -----------------------------------------------------------------------------------
    def host(self, name: str) -> Host:
        """A new namespace on the bridge, address ``10.77.<n>.<k>`` (k = 2, 3, ...)."""
        if name in self.hosts or not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,30}", name):
            raise ValueError(f"bad or duplicate host name {name!r}")
        k = len(self.hosts) + 2
        ns = f"{self.tag}-{name}"
        _run("ip", "netns", "add", ns)
        self._ip_in(ns, "link", "set", "lo", "up")
        self._ip_in(self.hub, "link", "add", f"p{k}", "type", "veth", "peer", "name", "eth0",
                    "netns", ns)  # fmt: skip
        self._ip_in(self.hub, "link", "set", f"p{k}", "master", "br0", "up")
        self._ip_in(ns, "addr", "add", f"{self._address(k)}/24", "dev", "eth0")
        self._ip_in(ns, "link", "set", "eth0", "up")
        host = self.hosts[name] = Host(name, ns, self._address(k), f"p{k}")
        return host

    # --- partitions ------------------------------------------------------------------------------
    def _rules(self, *rules: str) -> None:
        script = [
            f"add table bridge {TABLE}",
            f"add chain bridge {TABLE} forward {{ type filter hook forward priority 0; }}",
            *(f"add rule bridge {TABLE} forward {rule} drop" for rule in rules),
        ]
        _run("ip", "netns", "exec", self.hub, "nft", "-f", "-", stdin="\n".join(script) + "\n")

    def block(self, src: Iterable[Host], dst: Iterable[Host]) -> None:
        """Drop every packet from a host of ``src`` to a host of ``dst`` (that direction only)."""
        since = ", ".join(h.address for h in src)
        to = ", ".join(h.address for h in dst)
        self._rules(f"ip saddr {{ {since} }} ip daddr {{ {to} }}")

    def partition(self, a: Iterable[Host], b: Iterable[Host], one_way: bool = False) -> None:
        """No packet between ``a`` and ``b``; ``one_way``: only those from ``a`` to ``b``."""
        a, b = list(a), list(b)
        self.block(a, b)
        if not one_way:
            self.block(b, a)

    def isolate(self, host: Host) -> None:
        """No frame to or from ``host`` (ARP included); its own loopback still works."""
        self._rules(f'iifname "{host.port}"', f'oifname "{host.port}"')

    def heal(self) -> None:
        """Every partition gone."""
        _run("ip", "netns", "exec", self.hub, "nft", "delete", "table", "bridge", TABLE,
             check=False)  # fmt: skip
