"""A lone message's latency against Redis's, in alternating rounds (issue 67).

    python -m tests.bench.lone [--rate 1000] [--seconds 3] [--rounds 6]

One broker (SYNC_FLUSH) and one redis-server (``appendfsync always``) stay up for the whole
program; each round runs, in turn, ``wharf bench e2e`` over the wire port, the same over gRPC
and redis-py's XADD + XREAD BLOCK (``redis_peer.redispy_e2e``), all at ``--rate`` msg/s of 1
KiB, the order reversed every other round so a neighbour's load falls on each alike. A round's
ratios (wire / redis-py p50 and p99, gRPC / wire p50) compare runs seconds apart; the program
prints every round's figures with the load average, then each ratio's median and range over
the rounds: a target is decided only if the whole range lies on one side of it. Every run
starts on a quiet disk (``compare.settle_disk``), as in ``make bench-compare``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import uvloop

from tests.bench import redis_peer
from tests.bench.compare import settle_disk, wharf_bench
from tests.bench.redis_peer import RedisServer
from tests.harness import BrokerProcess

PEERS = ("wire", "grpc", "redis")
# (name, numerator peer, denominator peer, figure, target): the latency targets.
RATIOS = (
    ("wire/redis p50", "wire", "redis", "p50_ms", 1.0),
    ("wire/redis p99", "wire", "redis", "p99_ms", 1.0),
    ("grpc/wire p50", "grpc", "wire", "p50_ms", 1.3),
)


def one_run(
    peer: str, broker: BrokerProcess, redis: RedisServer, args: argparse.Namespace
) -> dict[str, Any]:
    if peer == "redis":
        return uvloop.run(
            redis_peer.redispy_e2e(
                redis.endpoint, rate=args.rate, duration_s=args.seconds, size=1024
            )
        )
    endpoint = broker.wire_endpoint if peer == "wire" else broker.endpoint
    # 4 in flight, as compare.py's low rate: a message sent while the previous one waits for
    # its fdatasync does not wait for that ack too.
    return wharf_bench(
        endpoint, "e2e", topic=f"lone-{peer}", rate=args.rate, size=1024,
        duration=args.seconds, max_in_flight=4,
    )  # fmt: skip


def verdict(values: list[float], target: float) -> str:
    if max(values) <= target:
        return "met in every round"
    if min(values) > target:
        return "missed in every round"
    return "undecided (the range spans the target)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    rounds: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="wharf-lone-") as tmp:
        root = Path(tmp)
        settings = {"flushDiskType": "SYNC_FLUSH"}
        with (
            BrokerProcess(
                root / "broker", settings=settings, extra_args=["--log-level", "WARNING"]
            ) as broker,
            RedisServer(root / "redis", "always") as redis,
        ):
            for round_ in range(args.rounds):
                order = PEERS if round_ % 2 == 0 else tuple(reversed(PEERS))
                figures: dict[str, dict[str, Any]] = {}
                for peer in order:
                    settle_disk(root / ("redis" if peer == "redis" else "broker"), max_s=5.0)
                    figures[peer] = one_run(peer, broker, redis, args)
                    figures[peer]["load"] = os.getloadavg()[0]
                rounds.append(figures)
                print(
                    f"round {round_ + 1}: "
                    + "  ".join(
                        f"{peer} p50 {figures[peer]['p50_ms']:.2f} p99 {figures[peer]['p99_ms']:.2f} ms"
                        f" (load {figures[peer]['load']:.2f})"
                        for peer in PEERS
                    ),
                    flush=True,
                )
    print(f"{args.rounds} rounds at {args.rate} msg/s, SYNC_FLUSH / appendfsync always:")
    for peer in PEERS:
        p50s = [r[peer]["p50_ms"] for r in rounds]
        p99s = [r[peer]["p99_ms"] for r in rounds]
        print(
            f"  {peer:5s} p50 median {statistics.median(p50s):.2f} ms ({min(p50s):.2f}-{max(p50s):.2f}),"
            f" p99 median {statistics.median(p99s):.2f} ms ({min(p99s):.2f}-{max(p99s):.2f})"
        )
    for name, top, bottom, figure, target in RATIOS:
        values = [r[top][figure] / r[bottom][figure] for r in rounds]
        print(
            f"  {name}: median {statistics.median(values):.2f}x, range "
            f"{min(values):.2f}-{max(values):.2f}x, target <= {target}x: {verdict(values, target)}"
        )


if __name__ == "__main__":
    main()
