"""The three benchmark workloads, driving the public SDK (Producer / PullConsumer)."""

from __future__ import annotations

import asyncio
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from wharf import hops
from wharf.client.bench.pacing import WARMUP_S, due_batches
from wharf.client.bench.stats import BenchStats
from wharf.client.connection import Connection
from wharf.client.consumer.pull import PullConsumer
from wharf.client.message import MessageQueue
from wharf.client.producer import Producer

_STAMP = struct.Struct(">q")  # e2e bodies start with the send time (ns since the epoch)


@dataclass
class BenchOptions:
    endpoints: str
    topic: str
    tasks: int = 64
    size: int = 1024
    batch: int = 1
    duration_s: float = 10.0
    count: int = 0  # 0 = run for duration_s
    streams: int = 2
    linger_ms: float = 0.0
    max_in_flight: int = 8  # producer requests in flight per stream
    rate: int = 10_000  # e2e: target messages per second
    group: str = "wharf-bench"
    stream_pulls: bool = True  # pulls over PullMessageStream (False: unary PullMessage)
    # How every client dials: the CLI's Connection (None: ``endpoints`` with ``connect``, the
    # Connection keyword arguments, e.g. ``tls``).
    connection: Connection | None = None
    connect: dict[str, Any] = field(default_factory=dict)

    def client_connection(self) -> Connection:
        return self.connection or Connection.build(self.endpoints, **self.connect)


class _Budget:
    """Shared stop condition: a message count and/or a deadline."""

    def __init__(self, options: BenchOptions) -> None:
        self.remaining = options.count or -1
        self.deadline = time.perf_counter() + options.duration_s if not options.count else None
        self.stop = asyncio.Event()

    def claim(self, n: int) -> int:
        if self.stop.is_set():
            return 0
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.stop.set()
            return 0
        if self.remaining < 0:
            return n
        take = min(n, self.remaining)
        self.remaining -= take
        if self.remaining == 0:
            self.stop.set()
        return take


async def run_produce(options: BenchOptions, stats: BenchStats) -> None:
    """``tasks`` coroutines each await ``send`` (auto-batched) or ``send_batch`` of ``batch``."""
    body = os.urandom(options.size)
    budget = _Budget(options)
    async with Producer(
        connection=options.client_connection(),
        streams=options.streams,
        linger_ms=options.linger_ms,
        max_in_flight=options.max_in_flight,
        compress_threshold=1 << 30,  # measure the transport, not zlib
        send_timeout=30.0,
    ) as producer:

        async def worker() -> None:
            while (n := budget.claim(options.batch)) > 0:
                started = time.perf_counter()
                try:
                    if options.batch == 1:
                        await producer.send(options.topic, body)
                    else:
                        await producer.send_batch(options.topic, [body] * n)
                except Exception:
                    stats.errors += 1
                    continue
                stats.record(n, n * options.size, (time.perf_counter() - started) * 1000)

        await asyncio.gather(*(worker() for _ in range(options.tasks)))


async def run_consume(options: BenchOptions, stats: BenchStats) -> None:
    """Read the topic from its beginning with ``tasks`` pullers, ``batch`` messages per pull,
    until caught up (or the budget ends). Each queue's range is cut into chunks so that more
    pullers than queues still work in parallel (like parallel range readers, or Redis clients
    issuing XRANGE side by side)."""
    budget = _Budget(options)
    async with PullConsumer(
        connection=options.client_connection(),
        group=options.group,
        stream_pulls=options.stream_pulls,
    ) as consumer:
        queues = await consumer.queues(options.topic)
        chunk = options.batch * 16
        work: list[tuple[MessageQueue, int, int]] = []
        for queue in queues:
            low, high = await consumer.bounds(queue)
            work.extend((queue, lo, min(lo + chunk, high)) for lo in range(low, high, chunk))
        work.reverse()  # pop() from the end: queues' ranges in ascending order

        async def worker() -> None:
            while work:
                queue, offset, end = work.pop()
                while offset < end and budget.claim(1):
                    started = time.perf_counter()
                    result = await consumer.pull(
                        queue, offset, max_messages=min(options.batch, end - offset)
                    )
                    # Honest consumption: every message's body and UNIQ_KEY msg_id is read
                    # (what an application does at the least), not just counted.
                    nbytes = 0
                    for message in result.messages:
                        nbytes += len(message.body)
                        if not message.msg_id:
                            stats.errors += 1
                    elapsed = (time.perf_counter() - started) * 1000
                    stats.record(len(result.messages), nbytes, elapsed)
                    if result.next_begin_offset <= offset:
                        break
                    offset = result.next_begin_offset

        await asyncio.gather(*(worker() for _ in range(max(1, options.tasks))))


async def run_e2e(options: BenchOptions, stats: BenchStats) -> None:
    """Send at ``rate`` msg/s and long-poll every queue; latency = receive time - send time.

    The first ``WARMUP_S`` at the target rate are not recorded (streams opening, long polls
    parking, first segment pages): the figures are the steady state, as load generators
    report them; the redis-py peer does the same."""
    async with (
        Producer(
            connection=options.client_connection(),
            linger_ms=options.linger_ms,
            max_in_flight=options.max_in_flight,
            send_timeout=30.0,
        ) as producer,
        PullConsumer(
            connection=options.client_connection(),
            group=options.group,
            stream_pulls=options.stream_pulls,
        ) as consumer,
    ):
        await producer.send(options.topic, b"warm-up")  # auto-creates the topic
        queues = await consumer.queues(options.topic)
        starts = {q: (await consumer.bounds(q))[1] for q in queues}
        stop = asyncio.Event()
        measured_from_ns = time.time_ns() + 10**18  # set when the warm-up ends
        padding = b"\0" * max(0, options.size - _STAMP.size)
        rate = max(options.rate, 1)

        async def receiver(queue: MessageQueue) -> None:
            offset = starts[queue]
            while not stop.is_set():
                result = await consumer.pull(queue, offset, max_messages=256, max_wait_ms=500)
                if hops.ENABLED:
                    hops.stamp("c.handler")
                now = time.time_ns()
                stamps = [
                    _STAMP.unpack_from(m.body)[0]
                    for m in result.messages
                    if len(m.body) >= _STAMP.size
                ]
                latencies = [(now - stamp) / 1e6 for stamp in stamps if stamp >= measured_from_ns]
                stats.record(len(latencies), len(latencies) * options.size)
                stats.record_latencies(latencies)
                offset = result.next_begin_offset

        async def send_one() -> object:
            # Stamped when send() is called, in the message's own task: the redis-py peer
            # stamps inside its XADD task too (tests/bench/redis_peer.py), so both measure
            # from the client API call, not from the pacing loop's ensure_future.
            if hops.ENABLED:
                hops.stamp("c.send")
            body = _STAMP.pack(time.time_ns()) + padding
            return await producer.send(options.topic, body)

        def send(in_flight: set[asyncio.Task[object]]) -> None:
            task = asyncio.ensure_future(send_one())
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)

        async def sender() -> None:
            nonlocal measured_from_ns
            in_flight: set[asyncio.Task[object]] = set()
            async for due in due_batches(rate, WARMUP_S):
                for _ in range(due):
                    send(in_flight)
            measured_from_ns = time.time_ns()
            stats.restart_clock()
            budget = _Budget(options)
            duration = float("inf") if options.count else options.duration_s
            async for due in due_batches(rate, duration):
                n = budget.claim(due)
                for _ in range(n):
                    send(in_flight)
                if n < due:
                    break
            await asyncio.gather(*in_flight, return_exceptions=True)
            await asyncio.sleep(0.5)  # let the receivers drain
            stop.set()

        await asyncio.gather(sender(), *(receiver(q) for q in queues))
