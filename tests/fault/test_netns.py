"""tests/fault/netns.py with plain sockets: hosts talk, a partition drops (both ways or one),
heal restores, and nothing is left behind. Skips with the reason ``available()`` gives (not
root, no ``ip`` / ``nft``, namespaces refused)."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fault.netns import Host, Network, available, clean_leftovers, namespaces

PORT = 7000
# Inside a host: a TCP echo (one line) and a UDP receiver appending each datagram to a file.
SERVER = r"""
import socket, sys, threading
host, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((host, port))
def receive():
    while True:
        data, _ = udp.recvfrom(1024)
        with open(log, "ab") as f:
            f.write(data + b"\n")
threading.Thread(target=receive, daemon=True).start()
tcp = socket.create_server((host, port))
print("ready", flush=True)
while True:
    conn, _ = tcp.accept()
    threading.Thread(target=lambda c: c.sendall(c.recv(1024)), args=(conn,), daemon=True).start()
"""
# Inside a host: "tcp ADDR" prints the echo (or the error); "udp ADDR MSG" sends one datagram.
CLIENT = r"""
import socket, sys
kind, addr, port = sys.argv[1], sys.argv[2], PORT
if kind == "tcp":
    try:
        with socket.create_connection((addr, port), timeout=1.5) as s:
            s.sendall(b"ping")
            print(s.recv(1024).decode())
    except OSError as exc:
        print(type(exc).__name__)
else:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(sys.argv[3].encode(), (addr, port))
""".replace("PORT", str(PORT))


@functools.cache
def _unavailable() -> str | None:
    return available()


@pytest.fixture
def net() -> Iterator[Network]:
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    with Network() as network:
        yield network


def serve(host: Host, log: Path) -> subprocess.Popen[str]:
    proc = host.popen(
        [sys.executable, "-c", SERVER, host.address, str(PORT), str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def tcp(src: Host, dst: Host) -> str:
    """'ping' when ``src`` got its echo from ``dst``, else the error (TimeoutError, ...)."""
    out = src.run([sys.executable, "-c", CLIENT, "tcp", dst.address], capture_output=True)
    return out.stdout.decode().strip()


def udp_arrives(src: Host, dst: Host, log: Path, msg: str) -> bool:
    """Whether one datagram ``src`` sends to ``dst`` lands in ``dst``'s log (within 0.5 s)."""
    src.run([sys.executable, "-c", CLIENT, "udp", dst.address, msg], check=True)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        if log.exists() and msg.encode() in log.read_bytes().split(b"\n"):
            return True
        time.sleep(0.02)
    return False


def test_hosts_talk_to_each_other_and_to_the_root_namespace(net: Network, tmp_path: Path) -> None:
    a, b = net.host("a"), net.host("b")
    assert a.address != b.address and a.address.startswith("10.77.")
    serve(b, tmp_path / "b.udp")
    assert tcp(a, b) == "ping"
    assert net.root is not None and tcp(net.root, b) == "ping"  # the test process is a client
    with socket.create_connection((b.address, PORT), timeout=2) as s:
        s.sendall(b"hello")
        assert s.recv(1024) == b"hello"
    # Each host has its own loopback: b's server is not on a's 127.0.0.1.
    out = a.run([sys.executable, "-c", CLIENT, "tcp", "127.0.0.1"], capture_output=True)
    assert out.stdout.decode().strip() == "ConnectionRefusedError"


def test_a_partition_both_ways_drops_and_heal_restores(net: Network, tmp_path: Path) -> None:
    a, b, c = net.host("a"), net.host("b"), net.host("c")
    serve(a, tmp_path / "a.udp")
    serve(b, tmp_path / "b.udp")
    with socket.create_connection((b.address, PORT), timeout=2) as before:
        net.partition([a], [b])
        assert tcp(a, b) == "TimeoutError"  # dropped, not refused: the SYN never arrives
        assert tcp(b, a) == "TimeoutError"
        assert tcp(c, b) == "ping" and tcp(c, a) == "ping"  # others are unaffected
        assert net.root is not None and tcp(net.root, b) == "ping"
        before.sendall(b"x")  # a connection made before the partition still works (root-b)
        assert before.recv(10) == b"x"
    net.heal()
    assert tcp(a, b) == "ping" and tcp(b, a) == "ping"


def test_a_one_way_partition_drops_one_direction_only(net: Network, tmp_path: Path) -> None:
    a, b = net.host("a"), net.host("b")
    serve(a, tmp_path / "a.udp")
    serve(b, tmp_path / "b.udp")
    net.partition([a], [b], one_way=True)  # a -> b dropped, b -> a delivered
    assert not udp_arrives(a, b, tmp_path / "b.udp", "a-to-b")
    assert udp_arrives(b, a, tmp_path / "a.udp", "b-to-a")
    # TCP needs both directions: b's SYN reaches a, a's SYN-ACK is dropped.
    assert tcp(b, a) == "TimeoutError" and tcp(a, b) == "TimeoutError"
    net.heal()
    assert udp_arrives(a, b, tmp_path / "b.udp", "a-to-b-healed")
    assert tcp(a, b) == "ping"


def test_isolate_cuts_a_host_from_everyone_the_root_included(net: Network, tmp_path: Path) -> None:
    a, b = net.host("a"), net.host("b")
    serve(b, tmp_path / "b.udp")
    net.isolate(b)
    assert tcp(a, b) == "TimeoutError"
    assert net.root is not None and tcp(net.root, b) == "TimeoutError"
    # b's own loopback still works.
    assert b.run([sys.executable, "-c", CLIENT, "udp", "127.0.0.1", "x"]).returncode == 0
    net.heal()
    assert tcp(a, b) == "ping" and tcp(net.root, b) == "ping"


def test_the_root_namespace_is_partitioned_on_the_bridge_not_in_its_own_firewall(
    net: Network, tmp_path: Path
) -> None:
    b = net.host("b")
    serve(b, tmp_path / "b.udp")
    assert net.root is not None
    net.partition([net.root], [b])
    assert tcp(net.root, b) == "TimeoutError"
    assert subprocess.run(["nft", "list", "table", "bridge", "wharf_fault"],
                          capture_output=True).returncode != 0  # fmt: skip
    net.heal()
    assert tcp(net.root, b) == "ping"


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_cleanup_leaves_no_namespace_veth_or_bridge_even_after_a_failure(tmp_path: Path) -> None:
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    tag = f"wfn{os.getpid()}"
    proc = None
    with pytest.raises(RuntimeError, match="boom"), Network() as net:
        a = net.host("a")
        net.host("b")
        net.partition([a], [net.hosts["b"]])
        proc = serve(a, tmp_path / "a.udp")  # still running at exit: killed
        assert {f"{tag}-hub", f"{tag}-a", f"{tag}-b"} <= set(namespaces())
        assert f"{tag}r" in _links()
        raise RuntimeError("boom")
    assert proc is not None and proc.wait(5) == -9
    assert not [ns for ns in namespaces() if ns.startswith(tag)]
    assert f"{tag}r" not in _links()
    assert tag not in _links()  # the bridge and the veths died with the hub


def test_leftovers_of_a_dead_run_are_removed(tmp_path: Path) -> None:
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is free now: a run that died without cleaning up
    stale = f"wfn{dead.pid}-hub"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    subprocess.run(["ip", "link", "add", f"wfn{dead.pid}r", "type", "veth"], check=True)
    try:
        assert stale in namespaces()
        gone = clean_leftovers()
        assert stale in gone and f"wfn{dead.pid}r" in gone
        assert stale not in namespaces() and f"wfn{dead.pid}r" not in _links()
        assert f"wfn{os.getpid()}" not in " ".join(gone)  # live runs are kept
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)
        subprocess.run(["ip", "link", "del", f"wfn{dead.pid}r"], capture_output=True)
