"""The connection bounds at full size (broker/kit/bounds.py): 5,000 idle connections on
each of the wire, remoting and Kafka ports, then 5 connections x 10,000 calls without
credentials on the wire port, against a broker with aclEnable and the default bounds (except
``--per-address``), while a normal client sends and receives. Reports per port how many
connections were refused at once and how many were closed later, the broker's RSS, and the
normal client's send+receive p50/p99 quiet and under the flood.

    python -m tests.bench.connection_flood [--connections 5000] [--per-address 1000]

tests/broker/test_connection_bounds.py holds the same at CI size (caps of 30/50, 2 s)."""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wharf import wire

from tests.broker.acl_helpers import ACL_SETTINGS, write_acl
from tests.broker.test_connection_bounds import _FLOOD, _rss_mib, _send_and_receive
from tests.harness import bench_broker


def _open_idle(host: str, port: int, count: int, first: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        try:
            sock = socket.create_connection((host, port), timeout=5)
            if first:
                sock.sendall(first)
            sock.setblocking(False)
            socks.append(sock)
        except OSError:
            pass
    return socks


def _still_open(socks: list[socket.socket]) -> int:
    open_ = 0
    for sock in socks:
        try:
            if sock.recv(1) == b"":
                continue
            open_ += 1  # bytes (a preface): open
        except BlockingIOError:
            open_ += 1
        except OSError:
            pass
    return open_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--per-address", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_acl(root / "store")
        settings = {**ACL_SETTINGS, "remotingListen": "127.0.0.1:0",
                    "kafkaListen": "127.0.0.1:0", "maxConnectionsPerAddress": args.per_address}  # fmt: skip
        with bench_broker(root, settings) as broker:
            assert broker.proc is not None
            pid = broker.proc.pid
            endpoint = broker.wire_endpoint
            quiet = asyncio.run(_send_and_receive(endpoint, args.rounds))[0]
            print(f"quiet: RSS {_rss_mib(pid):.0f} MiB, send+receive p50 "
                  f"{statistics.median(quiet) * 1e3:.2f} ms p99 "
                  f"{statistics.quantiles(quiet, n=100)[98] * 1e3:.2f} ms")  # fmt: skip
            ports = {
                "wire": (endpoint.removeprefix(wire.SCHEME), wire.PREFACE),
                "remoting": (broker.remoting_endpoint, b""),
                "kafka": (broker.kafka_endpoint, b""),
            }
            for name, (address, first) in ports.items():
                host, port = address.rsplit(":", 1)
                started = time.monotonic()
                socks = _open_idle(host, int(port), args.connections, first)
                time.sleep(0.5)
                kept = _still_open(socks)
                print(f"{name}: {len(socks)} connected, {kept} kept after 0.5 s, RSS "
                      f"{_rss_mib(pid):.0f} MiB")  # fmt: skip
                time.sleep(32)  # frameReadTimeoutMs (30 s) and a sweep
                print(
                    f"{name}: {_still_open(socks)} open after {time.monotonic() - started:.0f} s"
                    f" (idle connections that sent nothing: cut by the read deadline)"
                )
                for sock in socks:
                    sock.close()
            host, port = ports["wire"][0].rsplit(":", 1)
            flood = subprocess.Popen([sys.executable, "-c", _FLOOD, host, port, "120"])
            try:
                time.sleep(1.0)
                attacked = asyncio.run(_send_and_receive(endpoint, args.rounds))[0]
                print(f"flood: RSS {_rss_mib(pid):.0f} MiB, send+receive p50 "
                      f"{statistics.median(attacked) * 1e3:.2f} ms p99 "
                      f"{statistics.quantiles(attacked, n=100)[98] * 1e3:.2f} ms")  # fmt: skip
            finally:
                flood.kill()
                flood.wait()


if __name__ == "__main__":
    main()
