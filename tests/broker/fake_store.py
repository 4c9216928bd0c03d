"""A tiny in-memory stand-in for store.message_store.MessageStore, for broker unit tests that
must not depend on the real engine (processor logic, long polling, wiring). Only the slice of
the contract the broker uses; the real daemon tests use the real store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from wharf.store.codec.hashes import java_string_hash
from wharf.store.codec.properties import PROPERTY_DELAY_TIME_LEVEL, SCHEDULE_TOPIC
from wharf.store.config import StoreConfig
from wharf.store.model import (
    AppendResult,
    GetResult,
    GetStatus,
    MessageInput,
    PutResult,
    PutStatus,
    QueueStat,
    StoredMessage,
    StoreStats,
    TagFilter,
)


class FakeStore:
    def __init__(self, config: StoreConfig | None = None, observer: object = None) -> None:
        self.config = config or StoreConfig()
        self.queues: dict[tuple[str, int], list[StoredMessage]] = {}
        self.by_offset: dict[int, StoredMessage] = {}
        self.listeners: list = []
        self.next_offset = 0
        self.put_status = PutStatus.PUT_OK
        self.put_delay_s = 0.0  # simulates a group-commit wait
        self.puts_in_flight = self.max_puts_in_flight = 0
        self.started = self.stopped = False
        self.writable = True

    async def start(self) -> None:
        self.started = True

    async def shutdown(self) -> None:
        self.stopped = True

    def add_arrival_listener(self, listener) -> None:  # type: ignore[no-untyped-def]
        self.listeners.append(listener)

    def append(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> AppendResult:
        if messages[0].properties.get(PROPERTY_DELAY_TIME_LEVEL):
            queue_id = int(messages[0].properties[PROPERTY_DELAY_TIME_LEVEL]) - 1
            topic = SCHEDULE_TOPIC
        queue = self.queues.setdefault((topic, queue_id), [])
        first = len(queue)
        now = int(time.time() * 1000)
        offsets, sizes = [], []
        for i, m in enumerate(messages):
            size = 100 + len(m.body)
            stored = StoredMessage(
                topic, queue_id, first + i, self.next_offset, size, m.body, dict(m.properties),
                m.flag, m.sys_flag, 0, m.born_timestamp or now, m.born_host, now,
                self.config.store_host, m.reconsume_times, 0,
            )  # fmt: skip
            queue.append(stored)
            self.by_offset[self.next_offset] = stored
            offsets.append(self.next_offset)
            sizes.append(size)
            self.next_offset += size
        asyncio.get_running_loop().call_soon(self._dispatch, topic, queue_id, len(queue))
        return AppendResult(topic, queue_id, first, offsets, sizes, now, self.next_offset)

    # Appends are readable at once here (only the arrival listeners run later).
    dispatch_pending = False

    async def wait_dispatched(self, timeout_s: float = 5.0) -> bool:
        await asyncio.sleep(0)  # the call_soon dispatch of earlier appends runs first
        return True

    def _dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        for listener in self.listeners:
            listener(topic, queue_id, max_offset)

    async def put(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> PutResult:
        result = self.append(topic, queue_id, messages)
        if self.put_delay_s:
            self.puts_in_flight += 1
            self.max_puts_in_flight = max(self.max_puts_in_flight, self.puts_in_flight)
            try:
                await asyncio.sleep(self.put_delay_s)
            finally:
                self.puts_in_flight -= 1
        return PutResult(self.put_status, result)

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter | None = None,
        max_bytes: int = 4 << 20,
    ) -> GetResult:
        queue = self.queues.get((topic, queue_id), [])
        high = len(queue)
        if high == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        if offset == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, 0, high)
        if offset > high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, high, 0, high)
        found = []
        next_offset = offset
        for m in queue[offset : offset + max_count]:
            next_offset = m.queue_offset + 1
            if (
                tag_filter is None
                or tag_filter.match_all
                or (java_string_hash(m.tags) in tag_filter.codes and m.tags in tag_filter.tags)
            ):
                found.append(m)
        status = GetStatus.FOUND if found else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, next_offset, 0, high, found)

    def look_message_by_offset(self, commit_log_offset: int) -> StoredMessage | None:
        return self.by_offset.get(commit_log_offset)

    def query_messages(self, topic, key, max_num, begin_ms, end_ms):  # type: ignore[no-untyped-def]
        return [
            m for (t, _), q in self.queues.items() if t == topic for m in q
            if key in m.keys or m.unique_id == key
        ][:max_num]  # fmt: skip

    def get_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        queue = self.queues.get((topic, queue_id), [])
        return next(
            (m.queue_offset for m in queue if m.store_timestamp >= timestamp_ms), len(queue)
        )

    def get_queue_stats(self, topic: str) -> list[QueueStat]:
        return [
            QueueStat(q, 0, len(ms), ms[-1].store_timestamp if ms else 0)
            for (t, q), ms in sorted(self.queues.items()) if t == topic
        ]  # fmt: skip

    def stats(self) -> StoreStats:
        count = sum(len(q) for q in self.queues.values())
        return StoreStats(
            0, self.next_offset, self.next_offset, self.next_offset, 0, 1, len(self.queues),
            0, 0.1, self.writable, "", count, self.next_offset, 0.0, 0, 0.0, self.next_offset,
        )  # fmt: skip

    def delete_topics(self, topics: Sequence[str]) -> None:
        for key in [k for k in self.queues if k[0] in topics]:
            del self.queues[key]
