"""Where a message's time goes in ``wharf bench e2e``: hop stamps of the SDK and the broker.

    python -m tests.bench.e2e_hops [--rate 1000] [--seconds 5] [--runs 2] [--flush SYNC_FLUSH]
                                   [--transport wire|grpc|both]
                                   [--in-flight 4]

Starts a broker (``tests/harness.py``) and runs ``wharf bench e2e`` over the wire port or
gRPC (``both``: alternating, wire first, ``--runs`` of each), both
with ``WHARF_HOP_TRACE`` (``wharf.hops``), then prints, per hop, the time since ``send()``
(p50 and p99, us) of the messages of the last two thirds of the run (the first third is
warm-up). A message's hops are the first stamp of each name after its ``c.send`` and before
the next message's, within 3 ms: at 1k msg/s (one message a millisecond, ~0.8 ms each) they
rarely overlap; at high rates they do and the table blurs. ``read_path`` part 3 gives the same
split for strictly one-at-a-time messages.

The tail, which that window leaves out: the commit-log syncs' durations, and the messages
slower than 2 ms from ``send()`` to the next handler call, counted by their widest gap between
consecutive hops (a slow fdatasync shows as ``b.sync_start -> b.sync_done``, a stalled broker
loop as ``c.write -> b.send_in``).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from wharf import hops

from tests.bench.read_path import pct
from tests.harness import bench_broker

# The hops in path order (c. = client, b. = broker); names of wharf.hops stamps.
HOPS = (
    "c.send", "c.batch_run", "c.write", "b.send_in", "b.appended", "b.sync_kick",
    "b.pull_ahead", "b.sync_start", "b.sync_done", "b.sync_served", "b.reput_run",
    "b.dispatched", "b.arrival", "b.pull_woken", "b.pull_yield", "c.pull_read", "c.handler",
    "c.ack_read",
)  # fmt: skip
WINDOW_NS = 3_000_000
SLOW_NS = 2_000_000  # the tail: messages slower than this, from send() to the handler


def breakdown(stamps: list[tuple[str, int]]) -> dict[str, list[float]]:
    """Per hop, each message's time since its ``c.send`` (us); ``stamps`` in time order."""
    times = [ns for _, ns in stamps]
    sends = [ns for name, ns in stamps if name == "c.send"]
    since: dict[str, list[float]] = {name: [] for name in HOPS}
    for sent in sends[len(sends) // 3 :]:
        seen: set[str] = set()
        for name, ns in stamps[bisect.bisect_left(times, sent) :]:
            if ns - sent > WINDOW_NS or (name == "c.send" and ns != sent):
                break
            if name in since and name not in seen:
                seen.add(name)
                since[name].append((ns - sent) / 1000)
    return since


def tail(stamps: list[tuple[str, int]], slow_ns: int = SLOW_NS) -> tuple[int, int, Counter[str]]:
    """How many messages past the warm-up third took longer than ``slow_ns`` from ``c.send``
    to the next ``c.handler``, of how many, and those counted by the pair of consecutive hops
    with the largest gap between the two: where the tail goes, which ``breakdown``'s window
    leaves out. Approximate: the next handler call may be another queue's reply. ``stamps``
    in time order."""
    times = [ns for _, ns in stamps]
    sends = [ns for name, ns in stamps if name == "c.send"]
    handlers = [ns for name, ns in stamps if name == "c.handler"]
    where: Counter[str] = Counter()
    slow = 0
    measured = sends[len(sends) // 3 :]
    for sent in measured:
        i = bisect.bisect_left(handlers, sent)
        if i == len(handlers) or handlers[i] - sent <= slow_ns:
            continue
        slow += 1
        prev_name, prev_ns, widest = "c.send", sent, (0, "")
        seen = {"c.send"}
        for name, ns in stamps[
            bisect.bisect_left(times, sent) : bisect.bisect_right(times, handlers[i])
        ]:
            if name in seen:  # the next messages' stamps: the first of each name is this one's
                continue
            seen.add(name)
            widest = max(widest, (ns - prev_ns, f"{prev_name} -> {name}"))
            prev_name, prev_ns = name, ns
        where[widest[1]] += 1
    return slow, len(measured), where


def sync_times(stamps: list[tuple[str, int]]) -> list[float]:
    """Each commit-log sync's duration (us), b.sync_start to the next b.sync_done."""
    starts = sorted(ns for name, ns in stamps if name == "b.sync_start")
    dones = sorted(ns for name, ns in stamps if name == "b.sync_done")
    out = []
    for start in starts:
        i = bisect.bisect_left(dones, start)
        if i < len(dones):
            out.append((dones[i] - start) / 1000)
    return out


def run(args: argparse.Namespace, root: Path, transport: str) -> None:
    broker_trace, client_trace = root / "broker-hops.txt", root / "client-hops.txt"
    settings = {"flushDiskType": args.flush}
    env = {"WHARF_HOP_TRACE": str(broker_trace)}
    with bench_broker(root / "broker", settings=settings, env=env) as broker:
        endpoint = broker.wire_endpoint if transport == "wire" else broker.endpoint
        command = [
            sys.executable, "-m", "wharf.client.cli.main", "--endpoints", endpoint,
            "--json", "bench", "e2e", "--rate", str(args.rate), "--size", "1024",
            "--duration", str(args.seconds), "--max-in-flight", str(args.in_flight),
            "--topic", "hops",
        ]  # fmt: skip
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "WHARF_HOP_TRACE": str(client_trace)},
        )
        if done.returncode:
            raise RuntimeError(f"wharf bench e2e failed: {done.stderr[-800:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])["result"]
    print(
        f"{transport} e2e at {args.rate} msg/s, {args.flush}, load {os.getloadavg()[0]:.2f}: p50 {result['p50_ms']} ms, "
        f"p99 {result['p99_ms']} ms, max {result['max_ms']} ms"
    )
    stamps = sorted(hops.read(str(broker_trace)) + hops.read(str(client_trace)), key=lambda s: s[1])
    since = breakdown(stamps)
    print(f"  {'hop':14s} {'messages':>8s} {'p50 us':>7s} {'p99 us':>7s}")
    for name in HOPS:
        if since[name]:
            values = since[name]
            print(f"  {name:14s} {len(values):8d} {pct(values, 0.5):7.0f} {pct(values, 0.99):7.0f}")
    syncs = sync_times(stamps)
    print(
        f"  commit-log syncs: {len(syncs)}, p50 {pct(syncs, 0.5):.0f} us, "
        f"p99 {pct(syncs, 0.99):.0f} us, max {max(syncs, default=0):.0f} us"
    )
    slow, measured, where = tail(stamps)
    print(f"  slower than {SLOW_NS / 1e6:.0f} ms: {slow} of {measured}; their widest gap:")
    for gap, count in where.most_common(6):
        print(f"    {count:5d}  {gap}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--flush", default="SYNC_FLUSH", choices=("SYNC_FLUSH", "ASYNC_FLUSH"))
    parser.add_argument("--transport", default="wire", choices=("wire", "grpc", "both"))
    # 4 as compare.py's low rate; 1 as its 10k run.
    parser.add_argument("--in-flight", type=int, default=4, help="the producer's max_in_flight")
    args = parser.parse_args()
    transports = ("wire", "grpc") if args.transport == "both" else (args.transport,)
    for _ in range(args.runs):
        for transport in transports:
            with tempfile.TemporaryDirectory(prefix="wharf-e2e-hops-") as tmp:
                run(args, Path(tmp), transport)


if __name__ == "__main__":
    main()
