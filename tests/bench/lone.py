"""A lone message's latency against Redis's, in alternating rounds (issue 67).

    python -m tests.bench.lone [--rate 1000] [--high-rate 10000] [--seconds 3] [--rounds 6]

One broker (SYNC_FLUSH) and one redis-server (``appendfsync always``) stay up for the whole
program; each round runs, in turn, ``wharf bench e2e`` over the wire port, the same over gRPC
and redis-py's XADD + XREAD BLOCK (``redis_peer.redispy_e2e``), all at ``--rate`` msg/s of 1
KiB, then (``--high-rate``, 0 skips it) the wire port at that rate with one request in flight
as ``compare`` runs it, and the disk's floor at that rate (``disk_floor.sync_loop`` in the
broker's file system: the wait for a group commit with no software at all); the order
reversed every other round so a neighbour's load falls on each alike. A round's ratios (wire
/ redis-py p50 and p99, gRPC / wire p50) compare runs seconds apart; the program prints
every round's figures with the load average, then each target's per-round values: their
median, its distribution-free 95% interval (``pooled.py``) and the range, and a verdict only
when the interval lies on one side of the target. The high rate's p99 over the floor's is
printed the same way, without a target: what Wharf adds to the disk at the same moments. Each
round also sends at ``--rate`` through a relay that stores nothing, over grpc.aio and over the
wire port (``relay_floor``, one relay process for the program): what gRPC's two hops cost
over the wire port's, added to the wire port's p50, is the least gRPC / wire p50 any broker
could reach, judged against the gRPC target the same way (above it: out of reach).
Every run starts on a quiet disk (``compare.settle_disk``), as in ``make bench-compare``.

    python -m tests.bench.lone --pool LOG [LOG ...]

judges the rounds that earlier programs printed (their output saved to LOG), pooled, the same
way: more rounds of the same program for a target one program left undecided, never a
program chosen among several.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

import uvloop

from tests.bench import disk_floor, pooled, redis_peer, relay_floor
from tests.bench.compare import settle_disk, wharf_bench
from tests.bench.read_path import pct
from tests.bench.redis_peer import RedisServer
from tests.harness import BrokerProcess, bench_broker

PEERS = ("wire", "grpc", "redis", "wire-relay", "grpc-relay", "wire-high", "floor-high")
LOW_PEERS = tuple(p for p in PEERS if not p.endswith("-high"))  # without --high-rate
# (name, numerator peer, denominator peer or None for an absolute figure, figure, target):
# the latency targets.
RATIOS = (
    ("wire/redis p50", "wire", "redis", "p50_ms", 1.0),
    ("wire/redis p99", "wire", "redis", "p99_ms", 1.0),
    ("grpc/wire p50", "grpc", "wire", "p50_ms", 1.3),
    ("wire at the high rate, p99 ms", "wire-high", None, "p99_ms", 5.0),
)
# (name, numerator, denominator, figure): printed with their interval, no target.
FLOOR_RATIOS = (
    ("wire / the disk's floor at the high rate, p99", "wire-high", "floor-high", "p99_ms"),
)
# The least gRPC / wire p50 the transports allow: the wire port's whole p50 plus what gRPC's two
# hops cost over the wire port's in the relay (``relay_floor``: the same handlers, no store),
# over the wire port's p50. Judged against gRPC's target: above it, the target is out of reach
# for grpc.aio whatever the broker does.
GRPC_FLOOR = ("the transports' floor for grpc/wire p50", 1.3)


def grpc_floor(round_: dict[str, dict[str, Any]]) -> float:
    extra = round_["grpc-relay"]["p50_ms"] - round_["wire-relay"]["p50_ms"]
    return 1.0 + extra / round_["wire"]["p50_ms"]


def one_run(
    peer: str,
    broker: BrokerProcess,
    redis: RedisServer,
    relay_ports: dict[str, int],
    args: argparse.Namespace,
) -> dict[str, Any]:
    if peer.endswith("-relay"):
        kind = peer.removesuffix("-relay")
        return relay_floor.run(kind, relay_ports[kind], args.rate, args.seconds)
    if peer == "floor-high":
        # The disk alone at the high rate, in the broker's file system, seconds apart from
        # the wire-high run: what a message would wait for a group commit with no software.
        syncs = disk_floor.sync_loop(broker.root / "floor.log", args.high_rate, args.seconds)
        waits = disk_floor.waits(syncs, args.high_rate)
        (broker.root / "floor.log").unlink()
        return {"p50_ms": pct(waits, 0.5), "p99_ms": pct(waits, 0.99)}
    if peer == "redis":
        return uvloop.run(
            redis_peer.redispy_e2e(
                redis.endpoint, rate=args.rate, duration_s=args.seconds, size=1024
            )
        )
    endpoint = broker.endpoint if peer == "grpc" else broker.wire_endpoint
    # 4 in flight at the low rate, as compare.py: a message sent while the previous one waits
    # for its fdatasync does not wait for that ack too; 1 at the high rate, as compare.py.
    high = peer == "wire-high"
    return wharf_bench(
        endpoint, "e2e", topic=f"lone-{peer}", rate=args.high_rate if high else args.rate,
        size=1024, duration=args.seconds, max_in_flight=1 if high else 4,
    )  # fmt: skip


# One round as main() prints it: "<peer> p50 <ms> p99 <ms> ms (load <x>)" per peer.
_PRINTED = re.compile(r"([a-z-]+) p50 ([0-9.]+) p99 ([0-9.]+) ms \(load [0-9.]+\)")


def printed_rounds(paths: list[str]) -> list[dict[str, dict[str, Any]]]:
    """The rounds printed in these saved outputs of main(), in order."""
    return [
        {
            peer: {"p50_ms": float(p50), "p99_ms": float(p99)}
            for peer, p50, p99 in _PRINTED.findall(line)
        }
        for line in pooled.round_lines(paths)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--high-rate", type=int, default=10_000)
    parser.add_argument("--pool", nargs="+", metavar="LOG", help="judge saved rounds, pooled")
    args = parser.parse_args()
    if args.pool:
        pooled_rounds = printed_rounds(args.pool)
        peers = tuple(p for p in PEERS if all(p in r for r in pooled_rounds))
        judge(
            pooled_rounds,
            peers,
            f"{len(pooled_rounds)} rounds pooled from {len(args.pool)} programs",
        )
        return
    peers = PEERS if args.high_rate else LOW_PEERS
    rounds: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="wharf-lone-") as tmp:
        root = Path(tmp)
        settings = {"flushDiskType": "SYNC_FLUSH"}
        with (
            bench_broker(root / "broker", settings=settings) as broker,
            RedisServer(root / "redis", "always") as redis,
            relay_floor.relay(root / "relay") as relay_ports,
        ):
            for round_ in range(args.rounds):
                order = peers if round_ % 2 == 0 else tuple(reversed(peers))
                figures: dict[str, dict[str, Any]] = {}
                for peer in order:
                    settle_disk(root / ("redis" if peer == "redis" else "broker"), max_s=5.0)
                    figures[peer] = one_run(peer, broker, redis, relay_ports, args)
                    figures[peer]["load"] = os.getloadavg()[0]
                rounds.append(figures)
                print(
                    f"round {round_ + 1}: "
                    + "  ".join(
                        f"{peer} p50 {figures[peer]['p50_ms']:.2f} p99 {figures[peer]['p99_ms']:.2f} ms"
                        f" (load {figures[peer]['load']:.2f})"
                        for peer in peers
                    ),
                    flush=True,
                )
    judge(
        rounds, peers, f"{args.rounds} rounds at {args.rate} msg/s, SYNC_FLUSH / appendfsync always"
    )


def judge(rounds: list[dict[str, dict[str, Any]]], peers: tuple[str, ...], title: str) -> None:
    """Each peer's medians and ranges, then each target's verdict (``pooled.describe``)."""
    print(f"{title}:")
    for peer in peers:
        p50s = [r[peer]["p50_ms"] for r in rounds]
        p99s = [r[peer]["p99_ms"] for r in rounds]
        print(
            f"  {peer:5s} p50 median {statistics.median(p50s):.2f} ms ({min(p50s):.2f}-{max(p50s):.2f}),"
            f" p99 median {statistics.median(p99s):.2f} ms ({min(p99s):.2f}-{max(p99s):.2f})"
        )
    for name, top, bottom, figure, target in RATIOS:
        if top not in peers:
            continue
        values = [r[top][figure] / (r[bottom][figure] if bottom else 1.0) for r in rounds]
        unit = "x" if bottom else " ms"
        print(f"  {name}: {pooled.describe(values, '<=', target, unit)}")
    if {"wire", "wire-relay", "grpc-relay"} <= set(peers):
        name, target = GRPC_FLOOR
        values = [grpc_floor(r) for r in rounds]
        reach = " (out of reach)" if pooled.decide(values, "<=", target) == "missed" else ""
        print(f"  {name}: {pooled.describe(values, '<=', target)}{reach}")
    for name, top, bottom, figure in FLOOR_RATIOS:
        if top in peers and bottom in peers:
            values = [r[top][figure] / r[bottom][figure] for r in rounds]
            low, high = pooled.median_interval(values)
            print(
                f"  {name}: median {statistics.median(values):.2f}x, 95% interval "
                f"{low:.2f}-{high:.2f}x, range {min(values):.2f}-{max(values):.2f}x (no target)"
            )


if __name__ == "__main__":
    main()
