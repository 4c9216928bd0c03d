"""An in-memory stand-in for ``wharf.store.message_store.MessageStore``, for broker and metrics
unit tests that must not depend on the real engine (processor logic, long polling, wiring,
scrapes). It implements the slice of the store's contract the broker uses; the tests in
tests/contract/ run the same bodies against it and the real store, so it cannot drift. Tests
against the real daemon use the real store.

Differences that are on purpose: appended messages are readable at once (only the arrival
listeners run later, as after dispatch); record sizes are ``100 + len(body)``; ``query_messages``
scans every queue instead of an index; nothing is ever deleted (``min_offsets`` sets what
retention would have removed). Knobs for tests: ``put_status``, ``put_delay_s`` (a
group-commit wait), ``writable``, ``stats_value`` (a fixed ``stats()``); ``reads`` counts
``get_messages`` calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import NoReturn

from wharf.store.codec import PROPERTY_DELAY_TIME_LEVEL, SCHEDULE_TOPIC, java_string_hash
from wharf.store.config import StoreConfig
from wharf.store.errors import InvalidMessageError, StoreShutDownError
from wharf.store.model import (
    AppendResult,
    ConsumerLink,
    GetResult,
    GetStatus,
    MessageInput,
    PutHook,
    PutResult,
    PutStatus,
    QueueStat,
    StoredMessage,
    StoreStats,
    TagFilter,
)
from wharf.store.write import Written

# As the real read path (RocketMQ's maxFilterMessageCount): a filtered pull scans at least this
# many queue units.
MIN_FILTER_SCAN_UNITS = 800
# Size of a fake record: a header of 100 bytes plus the body.
RECORD_OVERHEAD = 100


class FakeStore:
    def __init__(
        self,
        config: StoreConfig | None = None,
        observer: object = None,
        *,
        consumers: ConsumerLink | None = None,
        put_hook: PutHook | None = None,
    ) -> None:
        """``consumers``: its ``on_arrival`` hears of every put (the fake dispatches at once,
        so it has no sync to plan ahead of nor retention or pop to use the offsets with);
        ``put_hook``: taken, not run (the fake parks delayed messages itself, in ``append``,
        and has no timer or transaction services)."""
        self.config = config or StoreConfig()
        self.queues: dict[tuple[str, int], list[StoredMessage]] = {}
        self.min_offsets: dict[tuple[str, int], int] = {}
        self.by_offset: dict[int, StoredMessage] = {}
        self.listeners: list = []
        if consumers is not None and consumers.on_arrival is not None:
            self.listeners.append(consumers.on_arrival)
        self.next_offset = 0
        self.put_status = PutStatus.PUT_OK
        self.put_delay_s = 0.0  # simulates a group-commit wait
        self.puts_in_flight = self.max_puts_in_flight = 0
        self.started = self.stopped = False
        self.writable = True
        self.stats_value: StoreStats | None = None
        self.reads = 0

    async def start(self) -> None:
        self.started = True

    async def shutdown(self) -> None:
        self.stopped = True

    def add_arrival_listener(self, listener, quiet=None) -> None:  # type: ignore[no-untyped-def]
        self.listeners.append(listener)

    @property
    def pop(self) -> NoReturn:
        raise StoreShutDownError("the fake store serves no pop consumption")

    def get_raw_records_ahead(self, *args: object) -> None:
        return None  # nothing is ever planned ahead of a sync here

    def write_when_durable(self, *args: object) -> int:
        return -1  # REFUSED: the fake has no sync thread

    # --- writes ------------------------------------------------------------------------------
    def append(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> AppendResult:
        if not messages:
            raise InvalidMessageError("a batch needs at least one message")
        if messages[0].properties.get(PROPERTY_DELAY_TIME_LEVEL):
            queue_id = int(messages[0].properties[PROPERTY_DELAY_TIME_LEVEL]) - 1
            topic = SCHEDULE_TOPIC
        queue = self.queues.setdefault((topic, queue_id), [])
        first = len(queue)
        now = int(time.time() * 1000)
        offsets, sizes = [], []
        for m in messages:
            stored = self._store(topic, queue_id, m.body, dict(m.properties), now, m)
            offsets.append(stored.commit_log_offset)
            sizes.append(stored.store_size)
        asyncio.get_running_loop().call_soon(self._dispatch, topic, queue_id, len(queue))
        return AppendResult(topic, queue_id, first, offsets, sizes, now, self.next_offset)

    def seed(self, topic: str, queue_id: int, store_timestamps: Sequence[int]) -> None:
        """Messages (body ``x``) stored at the given times (ms), without an event loop and
        without waking listeners: a store that already holds data."""
        for stamp in store_timestamps:
            self._store(topic, queue_id, b"x", {}, stamp, None)

    def _store(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str],
        now: int,
        m: MessageInput | None,
    ) -> StoredMessage:
        queue = self.queues.setdefault((topic, queue_id), [])
        stored = StoredMessage(
            topic, queue_id, len(queue), self.next_offset, RECORD_OVERHEAD + len(body), body,
            properties, m.flag if m else 0, m.sys_flag if m else 0, 0,
            (m.born_timestamp if m else 0) or now, m.born_host if m else "127.0.0.1:1", now,
            self.config.store_host, m.reconsume_times if m else 0, 0,
        )  # fmt: skip
        queue.append(stored)
        self.by_offset[self.next_offset] = stored
        self.next_offset += stored.store_size
        return stored

    # Appends are readable at once here (only the arrival listeners run later).
    dispatch_pending = False

    async def wait_dispatched(self, timeout_s: float = 5.0) -> bool:
        await asyncio.sleep(0)  # the call_soon dispatch of earlier appends runs first
        return True

    def _dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        for listener in self.listeners:
            listener(topic, queue_id, max_offset)

    async def put(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> PutResult:
        return await self.durable(self.append(topic, queue_id, messages))

    def write(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> Written:
        """As the real store: this append now, its ``Written`` for the durability wait."""
        return Written(self, self.append(topic, queue_id, messages))

    def dispatch_lagging(self) -> bool:
        return False  # the fake dispatches every put at once

    async def durable(self, result: AppendResult) -> PutResult:
        waiter = self.flush_waiter(result)
        await waiter
        return self.flushed_result(result, waiter)

    def flush_waiter(self, result: AppendResult) -> asyncio.Future[bool]:
        """A group-commit wait of ``put_delay_s`` (done at once without a delay); cancelling
        it withdraws the wait."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        if not self.put_delay_s:
            waiter.set_result(True)
            return waiter
        self.puts_in_flight += 1
        self.max_puts_in_flight = max(self.max_puts_in_flight, self.puts_in_flight)
        timer = loop.call_later(self.put_delay_s, _answer, waiter)

        def finished(_: asyncio.Future[bool]) -> None:
            self.puts_in_flight -= 1
            timer.cancel()

        waiter.add_done_callback(finished)
        return waiter

    def flushed_result(self, result: AppendResult, waiter: asyncio.Future[bool]) -> PutResult:
        waiter.result()
        return PutResult(self.put_status, result)

    # --- reads -------------------------------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter | None = None,
        max_bytes: int = 4 << 20,
    ) -> GetResult:
        """Statuses and next offsets as the real read path (wharf.store.read.get_message)."""
        self.reads += 1
        queue = self.queues.get((topic, queue_id), [])
        low, high = self.get_min_offset(topic, queue_id), len(queue)
        if high == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, low, 0)
        if offset < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, low, low, high)
        if offset == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, low, high)
        if offset > high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, low if low == 0 else high, low, high)
        match_all = tag_filter is None or tag_filter.match_all
        max_count = max(max_count, 1)
        scan = max_count if match_all else max(MIN_FILTER_SCAN_UNITS, max_count)
        found: list[StoredMessage] = []
        total_bytes = scanned = 0
        for m in queue[offset : offset + scan]:
            if found and (len(found) >= max_count or total_bytes + m.store_size > max_bytes):
                break
            scanned += 1
            if match_all or (
                tag_filter is not None
                and java_string_hash(m.tags) in tag_filter.codes
                and m.tags in tag_filter.tags
            ):
                found.append(m)
                total_bytes += m.store_size
        status = GetStatus.FOUND if found else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, offset + scanned, low, high, found)

    def look_message_by_offset(self, commit_log_offset: int) -> StoredMessage | None:
        return self.by_offset.get(commit_log_offset)

    def query_messages(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[StoredMessage]:
        """By KEYS entry or unique id, stored in [begin_ms, end_ms]; newest first."""
        found = [
            m for (t, _), q in self.queues.items() if t == topic for m in q
            if (key in m.keys or m.unique_id == key) and begin_ms <= m.store_timestamp <= end_ms
        ]  # fmt: skip
        found.sort(key=lambda m: m.commit_log_offset, reverse=True)
        return found[: max(max_num, 0)]

    def get_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        queue = self.queues.get((topic, queue_id), [])
        return next(
            (m.queue_offset for m in queue if m.store_timestamp >= timestamp_ms), len(queue)
        )

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        return self.min_offsets.get((topic, queue_id), 0)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        return len(self.queues.get((topic, queue_id), []))

    def queue_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for topic, queue_id in self.queues:
            counts[topic] = max(counts.get(topic, 0), queue_id + 1)
        return counts

    def get_queue_stats(self, topic: str) -> list[QueueStat]:
        return [
            QueueStat(q, self.get_min_offset(t, q), len(ms), ms[-1].store_timestamp if ms else 0)
            for (t, q), ms in sorted(self.queues.items()) if t == topic
        ]  # fmt: skip

    def stats(self) -> StoreStats:
        if self.stats_value is not None:
            return self.stats_value
        count = sum(len(q) for q in self.queues.values())
        return StoreStats(
            0, self.next_offset, self.next_offset, self.next_offset, 0, 1, len(self.queues),
            0, 0.1, self.writable, "", count, self.next_offset, 0.0, 0, 0.0, self.next_offset,
        )  # fmt: skip

    async def delete_topics(self, topics: Sequence[str], timeout_s: float = 5.0) -> None:
        for key in [k for k in self.queues if k[0] in topics]:
            del self.queues[key]


def _answer(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(True)
