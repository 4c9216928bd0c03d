"""Controller-mode failover time, and SYNC_MASTER produce throughput in a controller-mode group
against a single SYNC_FLUSH broker, in one run.

    .venv/bin/python -m tests.bench.failover --runs 10 --ttl-ms 3000

The group is etcd, a NameServer and broker-a as two replicas (SYNC_MASTER + SYNC_FLUSH,
``controllerHeartBeatTimeoutMills`` = ``--ttl-ms``), every process on 127.0.0.1
(``tests.cluster.failover_helpers.Group``). Each run, under a light load (one producer through
the NameServer, a send every 5 ms): SIGKILL the master, then send directly to every live
replica's endpoint in a loop (no retries, a failed send tried again after 10 ms); the failover
time is from the kill to the first SEND_OK, which only a newly elected master can give. The
killed replica is restarted and the next run starts once the new master's sync-state set
(``BrokerStatus.replication.sync_state_set``) holds both replicas again. Printed: every run,
then p50 / p90 / max. The lease bounds it from below: a replica campaigns only once the dead
master's key is gone from etcd, ``ttl`` after its last renewal (renewed every ttl/3, so
2/3 ttl to ttl after the kill), plus a 200 ms poll and the election.

Throughput: ``--messages`` 1 KiB sends from ``--concurrency`` tasks on one SDK stream to the
group's master, then the same load on a single SYNC_FLUSH broker
(``tests.bench.replication``: the same ``produce`` and single-broker run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

from wharf.client import Producer, SendStatus
from wharf.client.errors import WharfError

from tests.bench.broker_send import process_cpu_seconds
from tests.bench.replication import TOPIC, produce
from tests.bench.replication import run as run_single
from tests.cluster.failover_helpers import Group, Load, create_topic, running_group
from tests.harness import BrokerProcess

SEGMENT = 256 << 20  # as tests.bench.replication's brokers


async def first_send_ok(replicas: list[BrokerProcess], killed_at: float) -> float:
    """Seconds from ``killed_at`` to the first SEND_OK from any of ``replicas``."""
    producers = [Producer(r.endpoint, retry_times=0, send_timeout=2.0) for r in replicas]
    async with contextlib.AsyncExitStack() as stack:
        for producer in producers:
            await stack.enter_async_context(producer)
        while True:
            for producer in producers:
                with contextlib.suppress(WharfError):  # a replica refuses; a fenced master
                    result = await producer.send(TOPIC, b"probe")
                    if result.status == SendStatus.SEND_OK:
                        return time.monotonic() - killed_at
            await asyncio.sleep(0.01)


async def one_failover(group: Group) -> tuple[float, float, int]:
    """(kill -> first SEND_OK s, restart -> both in the sync-state set s, light-load sends
    that failed)."""
    old = await group.master()
    await group.in_sync(old, within_s=60)
    load = Load(group.ns.endpoint, workers=1, topic=TOPIC)
    await asyncio.sleep(1.0)
    survivors = [r for r in group.replicas.values() if r is not old]
    killed_at = time.monotonic()
    old.kill()
    failover_s = await asyncio.wait_for(
        first_send_ok(survivors, killed_at), timeout=group.ttl_ms / 1000 + 30
    )
    new = await group.master(other_than=old, within_s=30)
    await asyncio.sleep(0.5)  # the light load goes on against the new master
    await load.stop()
    restarted_at = time.monotonic()
    await asyncio.to_thread(old.start)  # rejoins as a replica of the new master
    await group.in_sync(new, within_s=60)
    return failover_s, time.monotonic() - restarted_at, len(load.failed)


async def group_bench(
    group: Group, args: argparse.Namespace
) -> tuple[dict[str, float], list[tuple[float, float, int]]]:
    """(throughput figures as ``tests.bench.replication.run``'s, failover runs)."""
    master = await group.master()
    await create_topic(group, master, TOPIC)
    await group.in_sync(master, within_s=60)
    replicas = list(group.replicas.values())
    cpu_before = [process_cpu_seconds(r.pid) for r in replicas]
    seconds, latencies, not_ok = await produce(master.endpoint, args.messages, args.concurrency)
    cpu = [process_cpu_seconds(r.pid) - c for r, c in zip(replicas, cpu_before, strict=True)]
    master_cpu = cpu[replicas.index(master)]
    slave_cpu = sum(cpu) - master_cpu
    quantiles = statistics.quantiles(latencies, n=100)
    runs = []
    for i in range(args.runs):
        failover_s, rejoin_s, failed = await one_failover(group)
        runs.append((failover_s, rejoin_s, failed))
        print(f"run {i + 1:>2}: kill -9 -> first SEND_OK {failover_s:6.2f} s; restarted replica "
              f"back in the sync-state set after {rejoin_s:5.2f} s; {failed} light-load sends "
              "failed", flush=True)  # fmt: skip
    figures = {
        "msg_s": len(latencies) / seconds,
        "p50_ms": quantiles[49] * 1000,
        "p99_ms": quantiles[98] * 1000,
        "master_cpu_us": master_cpu / len(latencies) * 1e6,
        "slave_cpu_us": slave_cpu / len(latencies) * 1e6,
        "not_ok": not_ok,
    }
    return figures, runs


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (exact for the few values a run gives)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="failovers (default 10)")
    parser.add_argument("--ttl-ms", type=int, default=3000, help="controllerHeartBeatTimeoutMills")
    parser.add_argument("--messages", type=int, default=20_000, help="throughput sends")
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wharf-bench-failover-") as tmp:
        root = Path(tmp)
        settings = {"mappedFileSizeCommitLog": SEGMENT, "maxMessageSize": 4 << 20}
        with running_group(root / "group", ttl_ms=args.ttl_ms, other=False,
                           settings=settings) as group:  # fmt: skip
            grouped, runs = asyncio.run(group_bench(group, args))
        single = run_single(False, args, root)
    times = [r[0] for r in runs]
    print(f"\nfailover, controllerHeartBeatTimeoutMills={args.ttl_ms}, {args.runs} runs: "
          f"p50 {percentile(times, 0.5):.2f} s, p90 {percentile(times, 0.9):.2f} s, "
          f"max {max(times):.2f} s")  # fmt: skip
    print(f"\n{args.messages} x 1 KiB, {args.concurrency} concurrent send() on one stream")
    print(f"{'':40}{'msg/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'CPU us/msg (master, slave)':>30}")
    for name, r in (("single broker SYNC_FLUSH", single),
                    ("controller group SYNC_MASTER+SYNC_FLUSH", grouped)):  # fmt: skip
        cpu = f"{r['master_cpu_us']:.1f}" + (
            f", {r['slave_cpu_us']:.1f}" if r["slave_cpu_us"] else ""
        )
        print(f"{name:40}{r['msg_s']:>10,.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{cpu:>30}")
        if r["not_ok"]:
            print(f"  {r['not_ok']:.0f} sends not SEND_OK")
    print(f"ratio group / single: {grouped['msg_s'] / single['msg_s']:.2f}x throughput, "
          f"{grouped['p50_ms'] / single['p50_ms']:.2f}x p50 latency")  # fmt: skip


if __name__ == "__main__":
    main()
