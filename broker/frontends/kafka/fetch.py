"""Fetch: read each requested partition (queue) from its fetch offset through the core's read
(the port's ``read``, no filter, the stored records' bytes),
answer the stored messages as one uncompressed record batch v2 per partition (offset =
ConsumeQueue offset, key/value/headers per the store codec's ``kafka_records``, a COMPRESSED
body inflated by the codec's ``bodies.py``; built in C by the store's compiled converter,
``wharf.store.kafka_fetch_batch``, when it can).

- high watermark = the queue's max offset as the store reports it (the store hides what is
  not yet durable or committed), log start offset = its min offset, last stable offset = the
  first offset of the oldest open Kafka transaction there, else the high watermark (the
  core's ``TxnIndex``). An offset outside [log start, high watermark] is
  OFFSET_OUT_OF_RANGE (the client resets per its auto.offset.reset).
- Transactions: isolation_level 1 (read_committed) reads up to the LSO only and the records of
  aborted transactions are left out here, by the broker (offset gaps, as compaction's), so
  ``aborted_transactions`` is answered empty: a client's own filter has nothing left to drop.
  isolation_level 0 shows aborted records, as Kafka's. Both get every marker as Kafka's control
  batch (transactional + control attributes, the producer id and epoch, key = version 0 and
  type 0 abort / 1 commit, value = version 0 and the coordinator epoch), which clients skip.
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
import struct
import time
from dataclasses import dataclass
from typing import Any

from wharf.broker.core.read import MAX_WAIT_MS
from wharf.broker.core.txn_index import CONTROL, parse_marker
from wharf.broker.errors import ResourceExhaustedError, UnavailableError
from wharf.broker.frontends.kafka.env import KAFKA_REQUEST, KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, code_for
from wharf.broker.frontends.kafka.records import CONTROL as CONTROL_ATTR
from wharf.broker.frontends.kafka.records import (
    TRANSACTIONAL,
    Record,
    encode_batch,
    encode_empty_batch,
)
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Perm
from wharf.store import kafka_fetch_batch
from wharf.store.codec.kafka_records import to_record_fields
from wharf.store.codec.layout import TOTAL_SIZE
from wharf.store.codec.records import decode_records
from wharf.store.model import GetStatus, RawGetResult, TagFilter

__all__ = ["FetchHandler", "encode_messages", "encode_stored"]

log = logging.getLogger("broker.kafka")
MAX_RESPONSE = 64 * 1024 * 1024
HIDDEN_READS = 16  # reads of aborted records only, before answering empty (the client asks again)
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
    committed: bool = False  # isolation_level 1: up to the LSO, no aborted record
    stable: int = -1  # the last stable offset
    records: bytes | None = None
    count: int = 0
    body_bytes: int = 0

    @property
    def size(self) -> int:
        return len(self.records) if self.records else 0


def encode_stored(records: bytes, count: int) -> bytes:
    """``count`` whole stored records (the store's raw read) as one record batch v2: by the
    compiled converter (``wharf.store.kafka_fetch_batch``) in one call, else decoded and through ``encode_messages``.
    The raw read skips the store's decode into StoredMessages (~28 us of the ~85 a record
    a Fetch cost under cProfile before the converter)."""
    batch = kafka_fetch_batch(records, count)
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


def encode_marker(records: bytes) -> bytes:
    """One stored marker (txn_index.CONTROL) as Kafka's control batch of one record."""
    (m,) = decode_records(records, [0], 0)
    kind, pid, epoch, coordinator_epoch = parse_marker(m.properties[CONTROL])
    key = struct.pack(">hh", 0, kind)
    value = struct.pack(">hi", 0, coordinator_epoch)
    record = Record(0, m.store_timestamp, key, value)
    return encode_batch([record], m.queue_offset, producer_id=pid, producer_epoch=epoch,
                        attributes=TRANSACTIONAL | CONTROL_ATTR)  # fmt: skip


class FetchHandler:
    def __init__(self, env: KafkaEnv, txns_ready: asyncio.Event | None = None) -> None:
        self.env = env
        self.txns = env.ctx.port.read.txns
        self._txns_ready = txns_ready

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
        committed = body["isolation_level"] == 1
        if committed and self._txns_ready is not None and not self._txns_ready.is_set():
            await self._txns_ready.wait()  # the open transactions are known after the replay
        for part in parts:
            part.committed = committed
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
        part.stable = self.txns.lso(part.topic, part.queue, part.high_watermark)

    async def _read_one(self, part: _Part, max_bytes: int) -> None:
        ctx = self.env.ctx
        self._marks(part)
        part.code = Code.NONE
        part.records = None
        if not part.log_start <= part.offset <= part.high_watermark:
            part.code = Code.OFFSET_OUT_OF_RANGE
            return
        end = part.stable if part.committed else part.high_watermark
        offset = part.offset
        for _ in range(HIDDEN_READS):
            if part.committed:
                offset = self.txns.skip_aborted(part.topic, part.queue, offset)
            if offset >= end:
                return
            read = await ctx.port.read.read_waiting(
                part.topic,
                part.queue,
                offset,
                min(ctx.config.max_pull_batch_size, end - offset),
                MATCH_ALL,
                0,  # the waiting is this fetch's own, across its partitions (_park)
                raw=True,  # no filter: the stored records as they are (encode_stored)
                max_bytes=max(max_bytes, 1),
                all_records=True,  # markers, aborted records: by the isolation level here
            )
            result = read.result
            assert isinstance(result, RawGetResult)
            if not result.count:
                if result.status is GetStatus.NO_MATCHED_MESSAGE and offset < (
                    gap_end := min(result.next_begin_offset, end)
                ):
                    # A compacted queue's removed records up to its end: an empty batch
                    # moves the consumer past them (else it waits there, behind the HW).
                    part.records = encode_empty_batch(offset, gap_end)
                return
            part.count = result.count
            part.body_bytes = result.body_bytes
            pieces = None
            if self.txns:  # (None at once for a queue no transaction touched)
                pieces = self.txns.split_raw(
                    part.topic, part.queue, result.records, result.count, not part.committed
                )
            if pieces is None:
                part.records = encode_stored(result.records, result.count)
                return
            if pieces:  # markers as control batches, aborted records left out
                part.records = b"".join(
                    encode_marker(data) if marker else encode_stored(data, n)
                    for data, n, marker in pieces
                )
                return
            # Only aborted records (read_committed): read on after them, as a client would
            # have dropped them; their marker, after them, is always something to answer.
            offset = result.next_begin_offset

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
            max_offset, lso = self.env.ctx.port.max_offset, self.txns.lso
            for p in waiting:
                end = max_offset(p.topic, p.queue)
                if (lso(p.topic, p.queue, end) if p.committed else end) > p.offset:
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
                    "last_stable_offset": part.stable,
                    "log_start_offset": part.log_start,
                    "aborted_transactions": [] if part.committed else None,
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
