"""The console's brokers: one set of SDK clients per endpoint, and a sampler for the live chart.

The console reaches brokers only through the SDK's public API (``Admin``, ``Producer``,
``PullConsumer``). Each endpoint given to ``--endpoints`` (``;`` or ``,`` separated) gets its own
clients, opened once and kept for the life of the process: a page costs RPCs, never a connection.
Calls use ``rpc_timeout_s`` (3 s): a broker that is down answers UNAVAILABLE at once (gRPC fails
fast on a refused connection), so it shows as down and the other brokers keep working.

``RateSampler`` asks every broker for its status every ``interval_s`` (2 s) and keeps the last
``keep`` (180, i.e. 6 minutes) samples per broker; messages in/out per second are the difference
of the broker's ``messages_in_total`` / ``messages_out_total`` between two samples. A sample of a
broker that is down is recorded as a gap (no rate), and a counter that went backwards (a restart)
gives no rate for that step rather than a negative one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Unpack

from wharf.client import Admin, Producer, PullConsumer, WharfError
from wharf.client.channel import parse_endpoints
from wharf.client.connection import Connection, ConnectionOptions, connection_of

CONSOLE_PULL_GROUP = "WHARF_CONSOLE"  # the group named in the console's pulls (never committed)


def split_endpoints(endpoints: str) -> list[str]:
    """``host:port[;host:port...]`` (``,`` also separates) -> checked targets, in order, no
    duplicates. ValueError / InvalidArgumentError on a malformed entry or an empty list."""
    found: list[str] = []
    for part in endpoints.replace(",", ";").split(";"):
        if part.strip():
            target = parse_endpoints(part)
            if target not in found:
                found.append(target)
    if not found:
        raise ValueError("--endpoints names no broker (HOST:PORT[;HOST:PORT...])")
    return found


@dataclass
class Broker:
    """One endpoint and its SDK clients (the producer starts on the first send)."""

    index: int
    endpoint: str
    admin: Admin
    pull: PullConsumer
    connection: Connection  # this endpoint's
    _producer: Producer | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def producer(self) -> Producer:
        async with self._lock:
            if self._producer is None:
                producer = Producer(connection=self.connection, transport="unary")
                await producer.start()
                self._producer = producer
            return self._producer

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()
        await self.pull.close()
        await self.admin.close()


class BrokerPool:
    """The brokers of one console, in ``--endpoints`` order."""

    def __init__(
        self,
        endpoints: Sequence[str] | None = None,
        *,
        rpc_timeout_s: float = 3.0,
        connection: Connection | None = None,
        **connect: Unpack[ConnectionOptions],
    ) -> None:
        """``connection``: the brokers (its ``endpoints``, ``;`` or ``,`` separated) and the
        keys and TLS every broker's clients dial with (``Connection.to`` each); or the keyword
        arguments (``tls``, ``access_key`` ...) of one. ``endpoints``, when given, lists the
        brokers instead of the connection's."""
        base = connection_of(None, connection, connect)
        if endpoints is None:
            endpoints = split_endpoints(base.endpoints)
        self.brokers = [
            Broker(
                index,
                endpoint,
                Admin(connection=base.to(endpoint), rpc_timeout_s=rpc_timeout_s),
                PullConsumer(connection=base.to(endpoint), group=CONSOLE_PULL_GROUP),
                base.to(endpoint),
            )
            for index, endpoint in enumerate(endpoints)
        ]

    async def start(self) -> None:
        for broker in self.brokers:
            await broker.admin.start()
            await broker.pull.start()

    async def close(self) -> None:
        for broker in self.brokers:
            await broker.close()

    def pick(self, index: object) -> Broker:
        """The broker at ``index`` (a cookie or query value); the first one when it is not a
        valid index."""
        try:
            number = int(str(index))
        except ValueError:
            return self.brokers[0]
        return self.brokers[number] if 0 <= number < len(self.brokers) else self.brokers[0]


@dataclass(frozen=True)
class Sample:
    at: float  # time.time()
    messages_in: int | None  # None: the broker did not answer
    messages_out: int | None


class RateSampler:
    """Messages in/out per second of every broker, sampled in the background."""

    def __init__(self, pool: BrokerPool, *, interval_s: float = 2.0, keep: int = 180) -> None:
        self.pool = pool
        self.interval_s = interval_s
        self.samples: dict[int, deque[Sample]] = {b.index: deque(maxlen=keep) for b in pool.brokers}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self.sample_once()
            await asyncio.sleep(self.interval_s)

    async def sample_once(self) -> None:
        async def one(index: int, admin: Admin) -> None:
            try:
                status = await admin.broker_status()
                sample = Sample(time.time(), status.messages_in_total, status.messages_out_total)
            except WharfError:
                sample = Sample(time.time(), None, None)
            self.samples[index].append(sample)

        await asyncio.gather(*(one(b.index, b.admin) for b in self.pool.brokers))

    def series(self, index: int) -> list[dict[str, float | None]]:
        """``[{"t": epoch s, "in": msg/s | None, "out": msg/s | None}, ...]``, oldest first."""
        points: list[dict[str, float | None]] = []
        previous: Sample | None = None
        for sample in self.samples.get(index, ()):
            rate_in = rate_out = None
            if previous is not None:
                rate_in = _rate(previous.messages_in, sample.messages_in, sample.at - previous.at)
                rate_out = _rate(
                    previous.messages_out, sample.messages_out, sample.at - previous.at
                )
            points.append({"t": round(sample.at, 3), "in": rate_in, "out": rate_out})
            previous = sample
        return points[1:] if points else points

    def latest(self, index: int) -> tuple[float | None, float | None]:
        series = self.series(index)
        if not series:
            return None, None
        return series[-1]["in"], series[-1]["out"]


def _rate(before: int | None, after: int | None, seconds: float) -> float | None:
    if before is None or after is None or seconds <= 0 or after < before:
        return None
    return round((after - before) / seconds, 1)
