"""Transactions and timers through the daemon, each next to its plain peer in the same run.

    python -m tests.bench.tx_timer                      # defaults below
    python -m tests.bench.tx_timer --messages 20000 --timer-rate 10000 --timer-seconds 3

1. Transactional sends (apache.rocketmq.v2: a TRANSACTION SendMessage, then EndTransaction
   COMMIT) against plain NORMAL SendMessage, ``--tasks`` concurrent senders, ``--messages``
   each kind, 1 KiB bodies: messages/s of each, the ratio, and the broker's CPU per message.
2. Timers: ``--timer-rate`` timed messages a second for ``--timer-seconds`` (the SDK's
   ``send(delay=)``, due ``--delay`` s after their send), consumed by a PushConsumer that takes
   the lateness of each (handler time - due time); peer: the end-to-end latency of plain
   messages sent at the same rate in the same run. Percentiles p50/p99/max, the count
   delivered, and the achieved send rate (the SDK may not reach the asked rate on a small box:
   the figure says so).

A program that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import uvloop
from wharf.client import Admin, ConsumeResult, Producer, PushConsumer
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc

from tests.harness import BrokerProcess

META = (("x-mq-client-id", "bench@1@0@tx"),)


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def v2_sends(endpoint: str, topic: str, count: int, tasks: int, transactional: bool) -> float:
    """Messages/s of ``count`` sends (each followed by a COMMIT when ``transactional``)."""
    body = b"t" * 1024
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        counter = iter(range(count))

        async def worker(w: int) -> None:
            for n in counter:
                m = d.Message(body=body)
                m.topic.name = topic
                m.system_properties.message_id = f"{topic}-{w}-{n}"
                m.system_properties.body_encoding = d.IDENTITY
                m.system_properties.message_type = d.TRANSACTION if transactional else d.NORMAL
                reply = await stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=META)
                assert reply.status.code == d.Code.OK, reply.status
                if transactional:
                    end = await stub.EndTransaction(
                        s.EndTransactionRequest(
                            topic=d.Resource(name=topic),
                            message_id=m.system_properties.message_id,
                            transaction_id=reply.entries[0].transaction_id,
                            resolution=d.COMMIT,
                            source=d.SOURCE_CLIENT,
                        ),
                        metadata=META,
                    )
                    assert end.status.code == d.Code.OK, end.status

        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(tasks)))
        return count / (time.perf_counter() - started)


async def paced(
    endpoint: str, topic: str, rate: float, seconds: float, delay: float | None
) -> tuple[list[float], int, float]:
    """Send at ``rate``/s for ``seconds`` (timed by ``delay`` when given) and consume: the
    latency of each message in ms (handler time - due time), count sent, achieved rate."""
    latencies: list[float] = []
    done = asyncio.Event()
    expected = [0]

    async def handler(msg: Any) -> ConsumeResult:
        due_ns = int.from_bytes(msg.body[:8], "big")
        latencies.append((time.time_ns() - due_ns) / 1e6)
        if len(latencies) >= expected[0] > 0:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(endpoint, f"bench-{topic}", handler=handler)
    consumer.subscribe(topic)
    padding = b"x" * 120
    async with consumer, Producer(endpoint) as producer:
        await asyncio.sleep(1.0)  # the consumer's first pulls are parked
        sent = 0
        in_flight: set[asyncio.Task[Any]] = set()
        started = time.monotonic()
        tick = 0.01
        while (elapsed := time.monotonic() - started) < seconds:
            want = int(elapsed * rate) - sent
            for _ in range(want):
                due_ns = time.time_ns() + int((delay or 0) * 1e9)
                body = due_ns.to_bytes(8, "big") + padding
                coro = (
                    producer.send(topic, body, delay=delay) if delay else producer.send(topic, body)
                )
                task = asyncio.ensure_future(coro)
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                sent += 1
                if len(in_flight) > 4096:  # the producer is the bottleneck: wait for it
                    await asyncio.sleep(0)
            await asyncio.sleep(tick)
        achieved = sent / (time.monotonic() - started)
        await asyncio.gather(*in_flight)
        expected[0] = sent
        if len(latencies) < sent:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), (delay or 0) + 30)
    return latencies, sent, achieved


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    broker = BrokerProcess(root, settings={"defaultTopicQueueNums": 4})
    await asyncio.to_thread(broker.start)
    out: dict[str, Any] = {}
    try:
        async with Admin(broker.endpoint) as admin:
            await admin.create_topic("Plain", queue_nums=4, attributes={"message.type": "NORMAL"})
            await admin.create_topic("Tx", queue_nums=4, attributes={"message.type": "TRANSACTION"})
            await admin.create_topic("Timed", queue_nums=4)
            await admin.create_topic("Peer", queue_nums=4)
        for name, topic, transactional in (("plain send", "Plain", False), ("half + commit", "Tx", True)):  # fmt: skip
            cpu0 = cpu_seconds(broker.pid)
            rate = await v2_sends(broker.endpoint, topic, args.messages, args.tasks, transactional)
            cpu = cpu_seconds(broker.pid) - cpu0
            out[name] = {"msg_per_s": round(rate), "broker_cpu_us_per_msg": round(cpu / args.messages * 1e6, 1)}  # fmt: skip
        out["tx_over_plain"] = round(out["half + commit"]["msg_per_s"] / out["plain send"]["msg_per_s"], 2)  # fmt: skip
        for name, topic, delay in (("timer lateness", "Timed", args.delay), ("plain e2e (peer)", "Peer", None)):  # fmt: skip
            lat, sent, achieved = await paced(broker.endpoint, topic, args.timer_rate, args.timer_seconds, delay)  # fmt: skip
            out[name] = {
                "sent": sent,
                "delivered": len(lat),
                "send_rate": round(achieved),
                "p50_ms": round(percentile(lat, 0.5), 1),
                "p99_ms": round(percentile(lat, 0.99), 1),
                "max_ms": round(max(lat), 1) if lat else None,
                "min_ms": round(min(lat), 1) if lat else None,
            }
    finally:
        await asyncio.to_thread(broker.stop)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.tx_timer", description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument(
        "--messages", type=int, default=10_000, help="sends per kind (default 10000)"
    )
    parser.add_argument("--tasks", type=int, default=32, help="concurrent v2 senders (default 32)")
    parser.add_argument("--timer-rate", type=float, default=10_000, help="timed messages/s (default 10000)")  # fmt: skip
    parser.add_argument("--timer-seconds", type=float, default=3.0, help="seconds of timed sends (default 3)")  # fmt: skip
    parser.add_argument("--delay", type=float, default=2.0, help="timer delay in s (default 2)")
    parser.add_argument("--output", default="", help="write the figures as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wharf-txtimer-") as tmp:
        out = uvloop.run(run(args, Path(tmp)))
    for name, value in out.items():
        print(f"{name:18} {value}")
    if args.output:
        Path(args.output).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
