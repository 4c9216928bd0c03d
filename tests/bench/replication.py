"""SYNC_MASTER (+ SYNC_FLUSH, one slave) against a single SYNC_FLUSH broker, in one run: produce
throughput, per-send latency percentiles and broker CPU per message; and the slave's lag.

    .venv/bin/python -m tests.bench.replication --messages 20000 --concurrency 64 [--tls]

Each setting runs the same load: ``concurrency`` tasks each awaiting ``send()`` of a 1 KiB
message (the SDK batches concurrent sends on one stream), every process on 127.0.0.1 with
ephemeral ports. SYNC_MASTER acknowledges a batch once it is flushed locally AND the slave
reported it, both in parallel: the extra cost is a round trip to the slave and its append.
``--tls`` adds a third run: the same group with its replication link over TLS
(``haTlsEnable``, the slave trusting the master's development certificate).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from wharf.client import Producer, SendStatus

from tests.bench.broker_send import process_cpu_seconds
from tests.harness import Daemons, free_port

TOPIC = "bench"
BODY = b"x" * 1024


async def produce(endpoint: str, count: int, concurrency: int) -> tuple[float, list[float], int]:
    """(seconds, per-send latencies, sends not SEND_OK)."""
    latencies: list[float] = []
    not_ok = 0
    async with Producer(endpoint, send_timeout=30.0) as producer:
        await producer.send(TOPIC, b"warm-up")
        per_task = count // concurrency
        started = time.perf_counter()

        async def worker() -> None:
            nonlocal not_ok
            for _ in range(per_task):
                began = time.perf_counter()
                result = await producer.send(TOPIC, BODY)
                latencies.append(time.perf_counter() - began)
                if result.status != SendStatus.SEND_OK:
                    not_ok += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started, latencies, not_ok


def run(
    replicated: bool, args: argparse.Namespace, root: Path, tls: bool = False
) -> dict[str, float]:
    common = {"flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": 256 << 20}
    brokers = []
    daemons = Daemons(root)
    if replicated:
        link: dict[str, object] = {"haTlsEnable": True} if tls else {}
        master = daemons.broker(
            "master", {**common, **link, "brokerRole": "SYNC_MASTER", "haListenPort": free_port()}
        )
        if tls:  # the master's development certificate, generated at its start
            link["haTlsCaFile"] = str(master.store_dir / "config" / "tls" / "broker.crt")
        slave = daemons.broker(
            "slave",
            {**common, **link, "brokerRole": "SLAVE", "brokerId": 1,
             "haMasterAddress": master.ha_endpoint},
        )  # fmt: skip
        brokers = [master, slave]
        time.sleep(1.0)  # the slave connects
    else:
        master = daemons.broker("single", common)
        brokers = [master]
    try:
        cpu_before = [process_cpu_seconds(b.pid) for b in brokers]
        seconds, latencies, not_ok = asyncio.run(
            produce(master.endpoint, args.messages, args.concurrency)
        )
        cpu = [process_cpu_seconds(b.pid) - c for b, c in zip(brokers, cpu_before, strict=True)]
    finally:
        for broker in brokers:
            broker.stop()
    sent = len(latencies)
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "msg_s": sent / seconds,
        "p50_ms": quantiles[49] * 1000,
        "p99_ms": quantiles[98] * 1000,
        "master_cpu_us": cpu[0] / sent * 1e6,
        "slave_cpu_us": (cpu[1] / sent * 1e6) if replicated else 0.0,
        "not_ok": not_ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--tls", action="store_true", help="also the replication link over TLS")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wharf-bench-ha-") as tmp:
        single = run(False, args, Path(tmp) / "plain")
        replicated = run(True, args, Path(tmp) / "replicated")
        over_tls = run(True, args, Path(tmp) / "tls", tls=True) if args.tls else None
    print(f"{args.messages} x 1 KiB, {args.concurrency} concurrent send() on one stream")
    print(f"{'':34}{'msg/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'CPU us/msg (master, slave)':>30}")
    rows = [("single broker SYNC_FLUSH", single), ("SYNC_MASTER+SYNC_FLUSH, 1 slave", replicated)]
    if over_tls is not None:
        rows.append(("the same, replication over TLS", over_tls))
    for name, r in rows:
        cpu = f"{r['master_cpu_us']:.1f}" + (
            f", {r['slave_cpu_us']:.1f}" if r["slave_cpu_us"] else ""
        )
        print(f"{name:34}{r['msg_s']:>10,.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{cpu:>30}")
        if r["not_ok"]:
            print(f"  {r['not_ok']:.0f} sends not SEND_OK")
    print(f"ratio SYNC_MASTER / single: {replicated['msg_s'] / single['msg_s']:.2f}x throughput, "
          f"{replicated['p50_ms'] / single['p50_ms']:.2f}x p50 latency")  # fmt: skip
    if over_tls is not None:
        print(f"ratio replication over TLS / plain: {over_tls['msg_s'] / replicated['msg_s']:.2f}x "
              f"throughput, {over_tls['master_cpu_us'] / replicated['master_cpu_us']:.2f}x master "
              f"CPU, {over_tls['slave_cpu_us'] / replicated['slave_cpu_us']:.2f}x slave CPU")  # fmt: skip


if __name__ == "__main__":
    main()
