"""Compaction of compacted topics' queues: which queue is due, one pass each in a thread, the
swap of its kept log, and what the commit log must keep for it.

A queue of a topic with ``cleanup.policy`` compact is read from its kept log below
``cleaned_to`` and from its consume queue above (``read/kept.py``). Its **cleanable end** is the
first offset stored later than ``now - max(segment.ms, min.compaction.lag.ms)``: Kafka never
cleans the active segment, which rolls ``segment.ms`` after its first record; here the "roll"
is by record age, so with writes stopped the last records become cleanable too (Kafka waits
for the next append to roll). A queue is due when its **dirty ratio** (records in
``[cleaned_to, end)`` over those plus the kept log's, Kafka's bytes ratio by records) is at
least ``min.cleanable.dirty.ratio``, or when its oldest dirty record is older than
``max.compaction.lag.ms``, or when its kept log holds a tombstone stored more than
``delete.retention.ms`` ago (with nothing dirty too: as Kafka 3.1+ cleans a log whose delete
horizon passed; the tombstone rule is in ``retention/compactor.py``); the most dirty first.
The oldest kept tombstone's store time is what the last pass reported; after a restart it is
unknown and taken as the start's time, so a tombstone kept then goes at most
delete.retention.ms after the start (one pass per compacted queue then).

A pass (``retention/compactor.py``) runs in this service's thread. It reads the dirty records
through ``_read_dirty`` ON THE LOOP (a hop per ~512 records or 1 MiB, about 1 ms of loop
time): consume queue files and commit log segments are only touched on the loop, as
everywhere in the store, so a retention deletion or a queue file eviction never runs under
it. The swap is on the loop too; the old generation's files are removed in the thread after.

Kafka transactions (``retention/transactions.py``): the cleanable end is at most the queue's
last stable offset, and aborted records are left out of the dirty range (never kept, never
superseding a committed value); markers have no key and go as keyless records do.

The commit log must keep every record of a compacted queue at or above its ``cleaned_to``:
``keep_from()`` is the lowest commit log offset those need, and retention never deletes a
segment at or past it (``services/cleanup.py``), whatever its age. A compacted queue that
stopped being compacted (``min.cleanable.dirty.ratio`` 1, ``max.compaction.lag.ms`` long)
therefore holds the log: that is Kafka's rule too (dirty segments stay until cleaned).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from wharf.store.codec.layout import (
    CQ_UNIT,
    OFFSET_QUEUE_OFFSET,
    OFFSET_STORE_TIMESTAMP,
    STORE_TIMESTAMP,
)
from wharf.store.config import StoreConfig
from wharf.store.log.commit_log import CommitLog
from wharf.store.paths import StorePaths
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from wharf.store.queue.table import ConsumeQueueTable
from wharf.store.retention.compactor import Chunk, Pacer, PassStats, Stopped, compact_blocking
from wharf.store.retention.kept_log import (
    KeptLog,
    remove_generation_blocking,
    remove_kept_log_blocking,
)
from wharf.store.retention.policy import TopicPolicy
from wharf.store.retention.starts import LogStarts, QueueKey
from wharf.store.retention.stats import RetentionStats
from wharf.store.retention.transactions import NoTransactions, TransactionView

log = logging.getLogger(__name__)
T = TypeVar("T")
RunBlocking = Callable[..., Awaitable[Any]]
DIRTY_CHUNK_UNITS = 512  # units a loop hop reads (~1 ms of loop time at 1 KiB records)
DIRTY_CHUNK_BYTES = 1 << 20
LOOP_HOP_TIMEOUT_S = 60.0
NOTHING_PINNED = 2**63 - 1


def call_on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> T:
    """Run ``fn`` on ``loop`` from another thread and return its result."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    loop.call_soon_threadsafe(run)
    return future.result(LOOP_HOP_TIMEOUT_S)


class Compaction:
    """The kept logs of a store's compacted queues and their passes."""

    def __init__(
        self,
        config: StoreConfig,
        paths: StorePaths,
        queues: ConsumeQueueTable,
        commit_log: CommitLog,
        starts: LogStarts,
        stats: RetentionStats,
    ) -> None:
        self.config = config
        self.paths = paths
        self.queues = queues
        self.commit_log = commit_log
        self.starts = starts
        self.stats = stats
        self.kept: dict[QueueKey, KeptLog] = {}
        # the store time of the oldest tombstone each kept log holds (none: no entry)
        self.tombstones: dict[QueueKey, int] = {}
        self._busy: set[QueueKey] = set()
        self._doomed: list[KeptLog] = []  # forgotten, files not yet removed
        self.fail: Callable[[str], None] | None = None  # tests stop a pass at a step
        self.txns: TransactionView = NoTransactions()  # the LSO bound, aborted records

    # --- start -----------------------------------------------------------------------------
    def load_blocking(self) -> None:
        """Every queue's live generation (strays of an interrupted pass removed)."""
        root = self.paths.compaction_root
        if not root.is_dir():
            return
        now_ms = int(time.time() * 1000)  # unknown tombstones are taken as stored now
        for topic_dir in sorted(root.iterdir()):
            for queue_dir in sorted(topic_dir.iterdir()):
                if queue_dir.name.isdigit():
                    kept = KeptLog.load_blocking(queue_dir)
                    if kept is not None:
                        key = (topic_dir.name, int(queue_dir.name))
                        self.kept[key] = kept
                        if kept.state.records:
                            self.tombstones[key] = now_ms

    # --- what reads and cleanup ask ------------------------------------------------------------
    def covering(self, topic: str, queue_id: int, offset: int) -> KeptLog | None:
        """The kept log answering a read at ``offset`` (None: the consume queue answers)."""
        kept = self.kept.get((topic, queue_id))
        if kept is not None and offset < kept.state.cleaned_to:
            return kept
        return None

    def cleaned_to(self, queue: ConsumeQueue) -> int:
        kept = self.kept.get((queue.topic, queue.queue_id))
        start = max(self.starts.get(queue.topic, queue.queue_id), queue.min_offset)
        return start if kept is None else max(kept.state.cleaned_to, start)

    def keep_from(self, compacted: Mapping[str, TopicPolicy]) -> int:
        """The lowest commit log offset a compacted queue still needs (its record at
        ``cleaned_to``); NOTHING_PINNED when none."""
        pinned = NOTHING_PINNED
        # The topics with a kept log count too: at start, before the broker hands its
        # policies over, a cleanup pass must not take what a compacted queue still needs.
        topics = {t for t, p in compacted.items() if p.compact} | {t for t, _ in self.kept}
        for topic in topics:
            for queue in self.queues.of_topic(topic):
                at = self.cleaned_to(queue)
                if at >= queue.max_offset:
                    continue
                unit = queue.get_unit(at)
                if unit is not None and unit[1] != BLANK_UNIT_SIZE:
                    pinned = min(pinned, unit[0])
        self.stats.pinned_log_offset = -1 if pinned == NOTHING_PINNED else pinned
        return pinned

    # --- passes ------------------------------------------------------------------------------
    def due(
        self, policies: Mapping[str, TopicPolicy], now_ms: int
    ) -> list[tuple[float, ConsumeQueue, TopicPolicy, int]]:
        """(dirty ratio, queue, policy, cleanable end) of each queue due, most dirty first."""
        due = []
        queues = 0
        max_ratio = 0.0
        for topic, policy in policies.items():
            if not policy.compact:
                continue
            for queue in self.queues.of_topic(topic):
                queues += 1
                planned = self._plan(queue, policy, now_ms)
                if planned is not None:
                    ratio, end, forced = planned
                    max_ratio = max(max_ratio, ratio)
                    if forced or ratio >= policy.min_cleanable_dirty_ratio:
                        due.append((ratio, queue, policy, end))
        self.stats.compacted_queues = queues
        self.stats.max_dirty_ratio = max_ratio
        due.sort(key=lambda d: -d[0])
        return due

    def _plan(
        self, queue: ConsumeQueue, policy: TopicPolicy, now_ms: int
    ) -> tuple[float, int, bool] | None:
        start = self.cleaned_to(queue)
        kept = self.kept.get((queue.topic, queue.queue_id))
        if kept is not None and kept.state.records and kept.state.base < start:
            # the log start moved past kept records (retention, DeleteRecords): a pass drops
            # them (their disk goes) even with nothing dirty; it goes on over the dirty range
            first_kept = kept.entry(0)[0]
            if first_kept < self.starts.get(queue.topic, queue.queue_id):
                return 1.0, max(start, self._end(queue, policy, now_ms)), True
        oldest = self.tombstones.get((queue.topic, queue.queue_id))
        if oldest is not None and now_ms - oldest > policy.delete_retention_ms:
            # a kept tombstone is past delete.retention.ms: a pass drops it, dirty or not
            return 1.0, max(start, self._end(queue, policy, now_ms)), True
        if start >= queue.max_offset:
            return None
        end = self._end(queue, policy, now_ms)
        if end <= start:
            return None
        stamp = self._stamp_reader()
        clean = kept.state.records if kept is not None else 0
        dirty = end - start
        first = queue.get_unit(start)
        first_stamp = stamp(first[0], first[1]) if first is not None else None
        forced = first_stamp is not None and now_ms - first_stamp > policy.max_compaction_lag_ms
        return dirty / (dirty + clean), end, forced

    def _end(self, queue: ConsumeQueue, policy: TopicPolicy, now_ms: int) -> int:
        """The cleanable end: the first offset stored within max(segment.ms,
        min.compaction.lag.ms) of now (module docs)."""
        stable = self.txns.lso(queue.topic, queue.queue_id, queue.max_offset)
        lag = max(policy.segment_ms, policy.min_compaction_lag_ms)
        if not lag:
            return stable
        return min(stable, queue.offset_by_time(max(now_ms - lag, 0) + 1, self._stamp_reader()))

    def _stamp_reader(self) -> Callable[[int, int], int | None]:
        commit_log = self.commit_log
        return lambda offset, _size: commit_log.store_timestamp_at(offset)

    async def compact(
        self,
        queue: ConsumeQueue,
        policy: TopicPolicy,
        end: int,
        now_ms: int,
        run_blocking: RunBlocking,
        stopping: Callable[[], bool],
    ) -> None:
        """One pass over ``queue``, up to ``end``, swapped in on return."""
        key = (queue.topic, queue.queue_id)
        if key in self._busy:
            return
        self._busy.add(key)
        try:
            await self._compact(key, queue, policy, end, now_ms, run_blocking, stopping)
        except Stopped:
            return  # the store stops: the old generation stays live
        except Exception:
            self.stats.pass_failures += 1
            raise
        finally:
            self._busy.discard(key)

    async def _compact(
        self,
        key: QueueKey,
        queue: ConsumeQueue,
        policy: TopicPolicy,
        end: int,
        now_ms: int,
        run_blocking: RunBlocking,
        stopping: Callable[[], bool],
    ) -> None:
        loop = asyncio.get_running_loop()
        old = self.kept.get(key)
        base = max(self.starts.get(*key), old.state.base if old is not None else queue.min_offset)
        cleaned_to = self.cleaned_to(queue)
        directory = self.paths.kept_log_dir(*key)
        pacer = Pacer(self.config.compaction_io_bytes_per_second, stopping)

        def dirty(offset: int, stop: int) -> tuple[Chunk, int]:
            return call_on_loop(loop, lambda: self._read_dirty(queue, offset, stop))

        def work() -> tuple[KeptLog, PassStats]:
            state, figures = compact_blocking(
                old, directory, base, cleaned_to, end, dirty,
                delete_horizon_ms=now_ms - policy.delete_retention_ms,
                map_bytes=self.config.compaction_map_bytes,
                pacer=pacer,
                fail=self.fail,
            )  # fmt: skip
            return KeptLog(directory, state), figures

        began = time.monotonic()
        new: KeptLog
        figures: PassStats
        new, figures = await run_blocking(work)
        self.kept[key] = new
        if figures.oldest_tombstone_ms >= 0:
            self.tombstones[key] = figures.oldest_tombstone_ms
        else:
            self.tombstones.pop(key, None)
        if old is not None:
            old.close()
            if self.fail is not None:
                await run_blocking(self.fail, "remove-old")
            await run_blocking(remove_generation_blocking, directory, old.state.generation)
        self._count(figures, time.monotonic() - began, now_ms)
        log.info(
            "compacted %s-%d to offset %d: kept %d records (%d bytes) of %d read",
            key[0], key[1], new.state.cleaned_to, new.state.records, new.state.log_bytes,
            figures.read_records,
        )  # fmt: skip

    def _count(self, figures: PassStats, seconds: float, now_ms: int) -> None:
        stats = self.stats
        stats.passes += 1
        stats.passes_map_full += int(figures.map_full)
        stats.records_read += figures.read_records
        stats.bytes_read += figures.read_bytes
        stats.records_kept += figures.kept_records
        stats.bytes_written += figures.kept_bytes
        stats.tombstones_removed += figures.removed_tombstones
        stats.last_pass_seconds = seconds
        stats.cpu_seconds += figures.cpu_seconds
        stats.last_pass_at_ms = now_ms
        stats.kept_bytes = sum(k.state.log_bytes for k in self.kept.values())
        stats.kept_records = sum(k.state.records for k in self.kept.values())

    def _read_dirty(self, queue: ConsumeQueue, offset: int, end: int) -> tuple[Chunk, int]:
        """On the loop: the records of [offset, end) from the consume queue and commit log,
        at most DIRTY_CHUNK_UNITS units or about DIRTY_CHUNK_BYTES."""
        if offset < queue.min_offset:
            return [], queue.min_offset  # gone from the log (retention before compaction)
        units = queue.read_unit_bytes(offset, min(DIRTY_CHUNK_UNITS, end - offset))
        chunk: Chunk = []
        total = 0
        after = offset
        skip_aborted = self.txns.skip_aborted
        for phy, size, _ in CQ_UNIT.iter_unpack(units):
            after += 1
            if (
                size == BLANK_UNIT_SIZE
                or skip_aborted(queue.topic, queue.queue_id, after - 1) != after - 1
            ):
                continue  # a blank unit, or an aborted transaction's record: never kept
            try:
                data = self.commit_log.read_bytes(phy, size)
            except ValueError:  # unmapped meanwhile
                data = None
            if data is None:
                continue
            queue_offset = STORE_TIMESTAMP.unpack_from(data, OFFSET_QUEUE_OFFSET)[0]
            stamp = STORE_TIMESTAMP.unpack_from(data, OFFSET_STORE_TIMESTAMP)[0]
            chunk.append((queue_offset, stamp, data))
            total += size
            if total >= DIRTY_CHUNK_BYTES:
                break
        return chunk, after

    # --- topics gone ---------------------------------------------------------------------------
    def forget(self, topic: str) -> None:
        """Stop answering from the kept logs of ``topic`` (deleted); ``forget_gone`` removes
        their files (a pass running on one keeps it until it ends)."""
        for key in [k for k in self.kept if k[0] == topic]:
            if key not in self._busy:
                self._doomed.append(self.kept.pop(key))
                self.tombstones.pop(key, None)

    async def forget_gone(self, run_blocking: RunBlocking) -> None:
        """Kept logs of queues the store no longer has (a deleted topic) are removed."""
        doomed, self._doomed = self._doomed, []
        for kept in doomed:
            kept.close()
            await run_blocking(remove_kept_log_blocking, Path(kept.directory))
        for key in [k for k in self.kept if k not in self._busy]:
            if self.queues.find(*key) is None:
                kept = self.kept.pop(key)
                kept.close()
                await run_blocking(remove_kept_log_blocking, Path(kept.directory))
