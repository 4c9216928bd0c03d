"""Consume throughput against redis-py's, in alternating rounds (issue 67's read target:
consume >= 1.5x redis-py).

    python -m tests.bench.consume [--rounds 12] [--messages 600000] [--pause 0]

The runs are ``make bench-compare``'s own consume runs, kept up for the whole program: one
ASYNC_FLUSH broker holding ``--messages`` messages of 1 KiB (``wharf bench produce``, 50 tasks
x send_batch(16)), read from their beginning by ``wharf bench consume`` (50 pullers, pulls of
100, one PullMessageStream over gRPC, as compare.py; then the same over the wire port, printed
beside, no target), and one redis-server (``appendfsync everysec``, a stream of 300,000)
read by redis-py's 50 tasks x ``XRANGE - + COUNT 100`` (``redis_peer.redispy_consume``) for
as many messages. The order turns every other round, so a neighbour's load falls on each alike. A round's ratio
compares runs seconds apart; the program prints every round, then the ratio's median, its
distribution-free 95% interval (``pooled.py``), the range, and a verdict only when the
interval lies on one side of 1.5.

    python -m tests.bench.consume --pool LOG [LOG ...]

judges the rounds that earlier programs printed (their output saved to LOG), pooled.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from tests.bench import pooled, redis_peer
from tests.bench.compare import PRODUCER, wharf_bench
from tests.bench.redis_peer import RedisServer
from tests.harness import BrokerProcess, bench_broker

PEERS = ("grpc", "wire", "redis")
TARGET = 1.5  # wharf over gRPC / redis-py, msgs/s
CLIENTS = 50  # compare.py's --clients
PULL = 100  # messages a pull / an XRANGE asks for


def one_run(peer: str, broker: BrokerProcess, redis: RedisServer, messages: int) -> float:
    """Messages per second of one read of ``messages``."""
    if peer == "redis":
        figures: dict[str, Any] = uvloop.run(
            redis_peer.redispy_consume(
                redis.endpoint, tasks=CLIENTS, count_per_read=PULL, reads=messages // PULL,
                pipeline=1,
            )
        )  # fmt: skip
    else:
        endpoint = broker.endpoint if peer == "grpc" else broker.wire_endpoint
        # duration: a ceiling only; the run ends when the topic is read to its end.
        figures = wharf_bench(
            endpoint, "consume", topic="bench", tasks=CLIENTS, batch=PULL, duration=60
        )  # fmt: skip
        if int(figures["messages"]) < messages:
            raise RuntimeError(f"{peer} consume read {figures['messages']} of {messages}")
    return float(figures["msgs_per_s"])


def fill(broker: BrokerProcess, redis: RedisServer, messages: int) -> None:
    """The topic of ``messages`` (compare.py's ASYNC produce, stopped by count) and a stream
    of 300,000 entries, as compare.py's produce leaves it (redis-py's XRANGE reads its first
    100; a stream of 1,000 read ~15% slower here)."""
    wharf_bench(
        broker.endpoint, "produce", topic="bench", tasks=CLIENTS, batch=16, size=1024,
        count=messages, **PRODUCER,
    )  # fmt: skip
    uvloop.run(
        redis_peer.redispy_produce(
            redis.endpoint, tasks=CLIENTS, pipeline=16, count=300_000, size=1024
        )
    )


# One round as main() prints it: "<peer> <msgs/s> msg/s" per peer, then the load.
_PRINTED = re.compile(r"([a-z]+) ([0-9]+) msg/s")


def printed_rounds(paths: list[str]) -> list[dict[str, float]]:
    """The rounds printed in these saved outputs of main(), in order."""
    return [
        {peer: float(rate) for peer, rate in _PRINTED.findall(line)}
        for line in pooled.round_lines(paths)
    ]


def judge(rounds: list[dict[str, float]], title: str) -> None:
    print(f"{title}:")
    for peer in PEERS:
        rates = [r[peer] for r in rounds]
        print(f"  {peer:5s} median {statistics.median(rates):,.0f} msg/s "
              f"({min(rates):,.0f}-{max(rates):,.0f})")  # fmt: skip
    grpc = [r["grpc"] / r["redis"] for r in rounds]
    wire = [r["wire"] / r["redis"] for r in rounds]
    print(f"  grpc/redis-py: {pooled.describe(grpc, '>=', TARGET)}")
    print(f"  wire/redis-py (no target): {pooled.describe(wire, '>=', TARGET)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--messages", type=int, default=600_000)
    # A reader right after a heavy run read ~15% slower here (tests/bench/README.md
    # "consume"): an idle pause before every run takes that out of the comparison.
    parser.add_argument("--pause", type=float, default=0.0, help="idle seconds before each run")
    parser.add_argument("--pool", nargs="+", metavar="LOG", help="judge saved rounds, pooled")
    args = parser.parse_args()
    if args.pool:
        rounds = printed_rounds(args.pool)
        judge(rounds, f"{len(rounds)} rounds pooled from {len(args.pool)} programs")
        return
    rounds = []
    with tempfile.TemporaryDirectory(prefix="wharf-consume-") as tmp:
        root = Path(tmp)
        with (
            bench_broker(root / "broker", settings={"flushDiskType": "ASYNC_FLUSH"}) as broker,
            RedisServer(root / "redis", "everysec") as redis,
        ):
            fill(broker, redis, args.messages)
            for round_ in range(args.rounds):
                order = PEERS if round_ % 2 == 0 else tuple(reversed(PEERS))
                rates = {}
                for peer in order:
                    time.sleep(args.pause)
                    rates[peer] = one_run(peer, broker, redis, args.messages)
                rounds.append(rates)
                print(
                    f"round {round_ + 1}: "
                    + "  ".join(f"{peer} {rates[peer]:.0f} msg/s" for peer in PEERS)
                    + f"  (load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    judge(rounds, f"{args.rounds} rounds of {args.messages} messages, 50 readers, pulls of 100")


if __name__ == "__main__":
    main()
