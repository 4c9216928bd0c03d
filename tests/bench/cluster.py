"""Produce and consume through the SDK's cluster clients (``namesrv=``) with one broker group and
with two, in one run: messages/s and broker CPU per message (the figure that says whether the
work spreads: on this 2-core box both brokers and the client share the cores, so the rate
cannot double here, but the CPU per message per broker should halve).

    .venv/bin/python -m tests.bench.cluster --messages 40000

Every process runs on 127.0.0.1 with ephemeral ports (tests/harness.py): one NameServer and the
brokers of the run, topic ``bench`` with 4 queues per group created with ``--cluster``.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wharf.client import ConsumeResult, Producer, PushConsumer, ReceivedMessage

from tests.bench.broker_send import process_cpu_seconds
from tests.harness import REPO_ROOT, Daemons, NamesrvProcess

TOPIC = "bench"


def create_topic(namesrv: str, groups: int) -> None:
    cmd = [sys.executable, "-m", "wharf.client.cli.main", "--namesrv", namesrv, "--json"]
    deadline = time.monotonic() + 20
    while True:  # registration takes one heartbeat
        listing = subprocess.run([*cmd, "cluster", "list"], capture_output=True, text=True,
                                 cwd=REPO_ROOT, check=True)  # fmt: skip
        if listing.stdout.count('"broker_name"') >= groups or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    subprocess.run([*cmd, "topic", "create", TOPIC, "--cluster", "C", "--queues", "4"],
                   capture_output=True, cwd=REPO_ROOT, check=True)  # fmt: skip
    time.sleep(1.5)  # the NameServers learn the topic within a heartbeat


async def produce(namesrv: str, count: int, body: bytes, concurrency: int) -> float:
    async with Producer(namesrv=namesrv, send_timeout=10.0) as producer:
        started = time.perf_counter()
        per_task = count // concurrency

        async def worker() -> None:
            for _ in range(per_task):
                await producer.send(TOPIC, body)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started


async def consume(namesrv: str, count: int) -> float:
    done = asyncio.Event()
    seen = 0

    async def handle(msg: ReceivedMessage) -> ConsumeResult:
        nonlocal seen
        seen += 1
        if seen >= count:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        namesrv=namesrv, group="bench", handler=handle, consume_from_where="FIRST",
        pull_batch_size=256, consume_concurrency=64,
    )  # fmt: skip
    consumer.subscribe(TOPIC)
    started = time.perf_counter()
    await consumer.start()
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.perf_counter() - started
    await consumer.close()
    return elapsed


def run(groups: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    with NamesrvProcess(root / "ns") as ns:
        daemons = Daemons(root)
        brokers = [
            daemons.broker(
                f"broker-{i}",
                start=False,
                settings={
                    "namesrvAddr": ns.endpoint, "brokerClusterName": "C",
                    "brokerName": f"broker-{i}", "autoCreateTopicEnable": False,
                },
            )
            for i in range(groups)
        ]  # fmt: skip
        for b in brokers:
            b.start()
        try:
            create_topic(ns.endpoint, groups)
            body = b"x" * args.body_size
            cpu0 = sum(process_cpu_seconds(b.pid) for b in brokers)
            own0 = time.process_time()
            send_s = asyncio.run(produce(ns.endpoint, args.messages, body, args.concurrency))
            own1 = time.process_time()
            cpu1 = sum(process_cpu_seconds(b.pid) for b in brokers)
            recv_s = asyncio.run(consume(ns.endpoint, args.messages))
            own2 = time.process_time()
            cpu2 = sum(process_cpu_seconds(b.pid) for b in brokers)
        finally:
            for b in brokers:
                b.stop()
    n = args.messages
    return {
        "produce_rate": n / send_s,
        "produce_cpu_us": (cpu1 - cpu0) / n * 1e6,
        "produce_client_us": (own1 - own0) / n * 1e6,
        "consume_rate": n / recv_s,
        "consume_cpu_us": (cpu2 - cpu1) / n * 1e6,
        "consume_client_us": (own2 - own1) / n * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--body-size", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=200, help="concurrent send() tasks")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="wharf-cluster-bench-") as tmp:
        for groups in (1, 2):
            results[groups] = run(groups, args, Path(tmp) / f"g{groups}")
    one, two = results[1], results[2]
    print(f"\nSDK over a cluster (namesrv=), {args.messages} x {args.body_size} B, "
          f"{args.concurrency} send tasks")  # fmt: skip
    print(f"{'what':34} {'1 group':>12} {'2 groups':>12} {'2/1':>6}")
    rows = (
        ("produce msg/s", "produce_rate"),
        ("  broker CPU us/msg (all brokers)", "produce_cpu_us"),
        ("  client CPU us/msg", "produce_client_us"),
        ("consume msg/s", "consume_rate"),
        ("  broker CPU us/msg (all brokers)", "consume_cpu_us"),
        ("  client CPU us/msg", "consume_client_us"),
    )
    for label, key in rows:
        print(f"{label:34} {one[key]:>12,.1f} {two[key]:>12,.1f} {two[key] / one[key]:>6.2f}")


if __name__ == "__main__":
    main()
