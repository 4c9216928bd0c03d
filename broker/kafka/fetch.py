"""Fetch: read each requested partition (queue) from its fetch offset through the core's read
(the port's ``read``, no filter, the stored records' bytes),
answer the stored messages as one uncompressed record batch v2 per partition (offset =
ConsumeQueue offset, key/value/headers per convert.py, a COMPRESSED body inflated by the
core's ``bodies.py``; built in C by fast.py when it can).

- high watermark = the queue's max offset as the store reports it (the store hides what is
  not yet durable or committed), log start offset = its min offset, last stable offset = the
  high watermark (no transactions). An offset outside [log start, high watermark] is
  OFFSET_OUT_OF_RANGE (the client resets per its auto.offset.reset).
- Sizes: ``partition_max_bytes`` per partition (capped by maxPullBytes, 3 MiB, and at most
  maxPullBatchSize messages a read) and ``max_bytes`` for the whole response; partitions
  after the budget is spent are answered empty. The first partition with data always
  returns at least one record, as Kafka does, so a record larger than the limits is not stuck.
- Long polling: when the answer holds fewer than ``min_bytes`` and ``max_wait_ms`` > 0, the
  fetch parks on every caught-up partition in the core's long poll (``ctx.long_poll``: woken
  by the store's dispatch of a new message on that queue, never by a timer loop) and reads
  again when one wakes, until ``min_bytes`` or the deadline (at most 60 s).
- A partition another broker leads (a cluster, ``env.queue_of``): NOT_LEADER_OR_FOLLOWER.
- Fetch sessions (KIP-227, v7+) are not kept: the answer's session id is 0, which tells the
  client to send full fetches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from wharf.broker.acl.rules import Perm
from wharf.broker.core.read import MAX_WAIT_MS
from wharf.broker.errors import ResourceExhaustedError, UnavailableError
from wharf.broker.kafka import fast
from wharf.broker.kafka.convert import to_record_fields
from wharf.broker.kafka.env import KAFKA_REQUEST, KafkaEnv
from wharf.broker.kafka.errors import Code, code_for
from wharf.broker.kafka.records import Record, encode_batch
from wharf.broker.kafka.server import KafkaConnection
from wharf.store.codec.layout import TOTAL_SIZE
from wharf.store.codec.records import decode_records
from wharf.store.model import RawGetResult, TagFilter

__all__ = ["FetchHandler", "encode_messages", "encode_stored"]

log = logging.getLogger("broker.kafka")
MAX_RESPONSE = 64 * 1024 * 1024
MATCH_ALL = TagFilter(frozenset(), frozenset())
_TOTAL_SIZE = TOTAL_SIZE.unpack_from


@dataclass(slots=True)
class _Part:
    topic: str
    index: int  # the Kafka partition
    offset: int
    max_bytes: int
    queue: int = -1  # this broker's queue of it
    code: Code = Code.NONE
    high_watermark: int = -1
    log_start: int = -1
    records: bytes | None = None
    count: int = 0
    body_bytes: int = 0

    @property
    def size(self) -> int:
        return len(self.records) if self.records else 0


def encode_stored(records: bytes, count: int) -> bytes:
    """``count`` whole stored records (the store's raw read) as one record batch v2: by the
    compiled converter (fast.py) in one call, else decoded and through ``encode_messages``.
    The raw read skips the store's decode into StoredMessages (~28 us of the ~85 a record
    a Fetch cost under cProfile before the converter)."""
    batch = fast.fetch_batch(records, count)
    if batch is not None:
        return batch
    positions = []
    pos = 0
    for _ in range(count):
        positions.append(pos)
        pos += _TOTAL_SIZE(records, pos)[0]
    return encode_messages(decode_records(records, positions, 0))


def encode_messages(messages: list[Any]) -> bytes:
    """Stored messages (consecutive queue offsets or not) as one record batch v2."""
    base = messages[0].queue_offset
    records = []
    for m in messages:
        key, value, headers = to_record_fields(m)
        stamp = m.born_timestamp or m.store_timestamp
        records.append(Record(m.queue_offset - base, stamp, key, value, headers))
    return encode_batch(records, base)


class FetchHandler:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env

    async def fetch(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        parts = [
            _Part(t["topic"], p["partition"], p["fetch_offset"], p["partition_max_bytes"])
            for t in body["topics"]
            for p in t["partitions"]
        ]
        max_wait = min(max(body["max_wait_ms"], 0), MAX_WAIT_MS)
        min_bytes = body["min_bytes"]
        # The whole answer: the client's max_bytes, at most MAX_RESPONSE (a fetch of many
        # partitions at maxPullBytes each could otherwise build hundreds of MiB).
        max_bytes = min(body["max_bytes"] if version >= 3 else MAX_RESPONSE, MAX_RESPONSE)
        deadline = time.monotonic() + max_wait / 1000
        for part in parts:
            await self._check(conn, part)
        waited_for_dispatch = False
        while True:
            total = await self._read_all(parts, max_bytes)
            ahead = any(
                p.code == Code.OFFSET_OUT_OF_RANGE and p.offset > p.high_watermark for p in parts
            )
            if ahead and not waited_for_dispatch:
                # An offset taken from a produce's ack waits for it to be readable (the core's
                # read-your-writes wait) instead of being out of range.
                waited_for_dispatch = True
                if await self.env.ctx.port.wait_own_writes(KAFKA_REQUEST):
                    continue
            remaining = deadline - time.monotonic()
            if total >= max(min_bytes, 1) or remaining <= 0 or self.env.ctx.long_poll.closed:
                break
            if not await self._park(parts, remaining):
                total = await self._read_all(parts, max_bytes)
                break
        return self._response(parts)

    async def _check(self, conn: KafkaConnection, part: _Part) -> None:
        env = self.env
        if not env.allowed(conn, "topic", part.topic, Perm.SUB):
            part.code = Code.TOPIC_AUTHORIZATION_FAILED
            return
        part.queue, part.code = await env.queue_of(part.topic, part.index)
        if part.code != Code.NONE:
            return
        topic = env.ctx.port.topic(part.topic)
        if topic is None or part.queue >= topic.read_queue_nums:
            part.code = Code.UNKNOWN_TOPIC_OR_PARTITION
        elif not topic.readable:
            part.code = Code.TOPIC_AUTHORIZATION_FAILED

    async def _read_all(self, parts: list[_Part], max_bytes: int) -> int:
        """Read every readable partition (no waiting); the bytes of records found."""
        total = 0
        for part in parts:
            if part.code not in (Code.NONE, Code.OFFSET_OUT_OF_RANGE):
                continue
            budget = max_bytes - total
            if budget <= 0 and total > 0:
                part.records = None
                self._marks(part)
                continue
            try:
                await self._read_one(part, min(part.max_bytes, max(budget, 1)))
            except Exception as exc:  # a damaged queue, a store error: this partition only
                log.warning("kafka: fetch of %s-%d failed: %s", part.topic, part.index, exc)
                part.code, part.records = code_for(exc), None
            if total and part.size > budget:  # only the first records may overshoot (KIP-74)
                part.records, part.count, part.body_bytes = None, 0, 0
            total += part.size
        return total

    def _marks(self, part: _Part) -> None:
        port = self.env.ctx.port
        part.high_watermark = port.max_offset(part.topic, part.queue)
        part.log_start = port.min_offset(part.topic, part.queue)

    async def _read_one(self, part: _Part, max_bytes: int) -> None:
        ctx = self.env.ctx
        self._marks(part)
        part.code = Code.NONE
        part.records = None
        if not part.log_start <= part.offset <= part.high_watermark:
            part.code = Code.OFFSET_OUT_OF_RANGE
            return
        if part.offset == part.high_watermark:
            return
        read = await ctx.port.read.read_waiting(
            part.topic,
            part.queue,
            part.offset,
            ctx.config.max_pull_batch_size,
            MATCH_ALL,
            0,  # the waiting is this fetch's own, across its partitions (_park)
            raw=True,  # no filter: the stored records as they are (encode_stored)
            max_bytes=max(max_bytes, 1),
        )
        result = read.result
        assert isinstance(result, RawGetResult)
        if not result.count:
            return
        part.records = encode_stored(result.records, result.count)
        part.count = result.count
        part.body_bytes = result.body_bytes

    async def _park(self, parts: list[_Part], remaining: float) -> bool:
        """Wait until one caught-up partition gets a message or the time runs out; False when
        nothing can park (then the caller answers now)."""
        long_poll = self.env.ctx.long_poll
        waiting = [p for p in parts if p.code == Code.NONE and p.records is None]
        if not waiting:
            return False
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(long_poll.park(p.topic, p.queue, p.offset, remaining)) for p in waiting
        ]
        parked = True
        try:
            # The tasks register their parks on their first step, a loop turn from now: an
            # arrival dispatched in between would not wake them, so look once more after it.
            await asyncio.sleep(0)
            max_offset = self.env.ctx.port.max_offset
            if any(max_offset(p.topic, p.queue) > p.offset for p in waiting):
                return True
            done, _ = await asyncio.wait(
                tasks, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                try:
                    task.result()
                except (ResourceExhaustedError, UnavailableError):
                    parked = False  # maxParkedPulls reached, or shutting down: answer now
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
        return parked

    def _response(self, parts: list[_Part]) -> dict[str, Any]:
        metrics = self.env.ctx.metrics
        topics: dict[str, list[dict[str, Any]]] = {}
        for part in parts:
            if part.count:
                self.env.ctx.counters.messages_out += part.count
                metrics.on_messages_out(part.topic, "", part.count, part.body_bytes)
            topics.setdefault(part.topic, []).append(
                {
                    "partition_index": part.index,
                    "error_code": part.code,
                    "high_watermark": part.high_watermark,
                    "last_stable_offset": part.high_watermark,
                    "log_start_offset": part.log_start,
                    "aborted_transactions": None,
                    "preferred_read_replica": -1,
                    "records": part.records or b"",  # never null: kafka-python cannot read it
                }
            )
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [{"topic": t, "partitions": rows} for t, rows in topics.items()],
        }
