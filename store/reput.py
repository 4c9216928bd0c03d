"""Dispatch: CommitLog records -> ConsumeQueue units + index entries + arrival notifications
(RocketMQ's ReputMessageService and its CommitLogDispatchers).

``Dispatcher`` is the synchronous core (also used by recovery, in a thread, before the store
serves). ``ReputService`` is the asyncio task that tails the CommitLog from
``reput_from_offset``: it is woken by appends (no sleep loop; the interval is only a safety net),
dispatches bounded chunks so the event loop stays responsive, and in SYNC_FLUSH mode never goes
past the flushed offset: a consumer must not see a message that a crash could still take away
(RocketMQ #8239).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, Protocol

from store.commit_log import CommitLog
from store.consume_queue import ConsumeQueue, ConsumeQueueFile, Unit
from store.consume_queue_table import ConsumeQueueTable
from store.errors import CorruptRecordError
from store.format import (
    PROPERTY_DELAY_TIME_LEVEL,
    SCHEDULE_TOPIC,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    DispatchRequest,
    java_string_hash,
)
from store.index_file import IndexEntry
from store.index_service import IndexService
from store.service import Service

# Bytes of CommitLog decoded per iteration: ~256 records of 1 KiB, about a millisecond of work.
DEFAULT_CHUNK_BYTES = 256 * 1024

_TAG_CODE_CACHE = 65536

# While written data waits for a commit (transient pool) or a sync (SYNC_FLUSH), poll at this
# pace instead of the idle interval: nothing else wakes the reput when that data lands.
PENDING_POLL_S = 0.005

# (topic, queue id) -> new max offset of that queue, after one chunk.
QueueAdvance = dict[tuple[str, int], int]


class DispatchPlan(NamedTuple):
    runs: list[tuple[tuple[str, int], int, list[Unit]]]  # (topic, queue), first offset, units
    indexed: list[DispatchRequest]  # records with KEYS or UNIQ_KEY


class DispatchSource(Protocol):
    """What the reput needs from the CommitLog (the facade adapts S1's CommitLog to it)."""

    def dispatch_limit(self) -> int:
        """Offset the reput may read up to: max (ASYNC) or flushed (SYNC) offset."""
        ...

    def has_pending(self) -> bool:
        """Written data that is not dispatchable yet (uncommitted or unflushed)."""
        ...

    def read_dispatch_chunk(
        self, from_offset: int, limit: int, max_bytes: int
    ) -> tuple[list[DispatchRequest], int]:
        """Decoded records starting at ``from_offset`` (skipping end-of-segment blanks) and the
        offset right after the last one returned."""
        ...


class Dispatcher:
    def __init__(
        self, queues: ConsumeQueueTable, index: IndexService | None, delay_levels_ms: Sequence[int]
    ) -> None:
        self.queues = queues
        self.index = index
        self.delay_levels_ms = list(delay_levels_ms)
        self._tag_codes: dict[str, int] = {}  # tag -> Java hash: tags repeat, hashing is slow

    def tags_code(self, req: DispatchRequest) -> int:
        if req.topic == SCHEDULE_TOPIC:
            # For delayed messages the unit carries the deliver time (RocketMQ's
            # computeDeliverTimestamp), which ScheduleMessageService compares with the clock.
            level_text = req.properties.get(PROPERTY_DELAY_TIME_LEVEL, "")
            if level_text.isdigit() and int(level_text) > 0 and self.delay_levels_ms:
                level = min(int(level_text), len(self.delay_levels_ms))
                return req.store_timestamp + self.delay_levels_ms[level - 1]
        return java_string_hash(req.tags) if req.tags else 0

    def plan(self, requests: Iterable[DispatchRequest]) -> DispatchPlan:
        """One pass over a chunk: ConsumeQueue units grouped into runs of consecutive queue
        offsets per queue (in log order), and the records that carry index keys."""
        runs: list[tuple[tuple[str, int], int, list[Unit]]] = []
        open_runs: dict[tuple[str, int], tuple[int, list[Unit]]] = {}
        indexed: list[DispatchRequest] = []
        codes = self._tag_codes
        for req in requests:
            trans = req.sys_flag & 0xC
            # Prepared and rolled-back transaction halves get no ConsumeQueue unit (RocketMQ).
            if trans not in (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK):
                key = (req.topic, req.queue_id)
                code = codes.get(req.tags) if key[0] != SCHEDULE_TOPIC else None
                if code is None:
                    code = self.tags_code(req)
                    if key[0] != SCHEDULE_TOPIC and len(codes) < _TAG_CODE_CACHE:
                        codes[req.tags] = code
                unit = (req.commit_log_offset, req.size, code)
                run = open_runs.get(key)
                if run is not None and run[0] + len(run[1]) == req.queue_offset:
                    run[1].append(unit)
                else:  # first unit of the queue, or not consecutive (overlap or gap)
                    run = open_runs[key] = (req.queue_offset, [unit])
                    runs.append((key, run[0], run[1]))
            if req.keys or req.uniq_key:
                indexed.append(req)
        return DispatchPlan(runs, indexed)

    def missing_files(self, plan: DispatchPlan) -> list[tuple[ConsumeQueue, list[int]]]:
        """Per queue, the file starts that applying ``plan`` would create."""
        needed = []
        for key, first, units in plan.runs:
            queue = self.queues.find_or_create(*key)
            start = max(first, queue.max_offset)
            starts = queue.missing_files(start, first + len(units) - start)
            if starts:
                needed.append((queue, starts))
        return needed

    def apply(self, plan: DispatchPlan) -> tuple[QueueAdvance, list[IndexEntry]]:
        """Append the units and return the queues that advanced and the index entries still
        to be written (the caller may need to roll a file)."""
        advanced: QueueAdvance = {}
        for key, first, units in plan.runs:
            queue = self.queues.find_or_create(*key)
            queue.append_units(first, units)
            advanced[key] = queue.max_offset
        entries: list[IndexEntry] = []
        if self.index is not None and plan.indexed:
            entries = self.index.entries_for(plan.indexed)
            entries = entries[self.index.put_entries_nowait(entries) :]
        return advanced, entries

    def dispatch(
        self, requests: Iterable[DispatchRequest]
    ) -> tuple[QueueAdvance, list[IndexEntry]]:
        """``plan`` + ``apply`` (queue files created in place: recovery, tests)."""
        return self.apply(self.plan(requests))


class ReputService(Service):
    def __init__(
        self,
        source: DispatchSource,
        dispatcher: Dispatcher,
        on_advance: Callable[[QueueAdvance], None],
        reput_from_offset: int,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        interval_s: float = 1.0,
    ) -> None:
        super().__init__("ReputMessageService", interval_s)
        self.idle_interval_s = interval_s
        self.source = source
        self.dispatcher = dispatcher
        self.on_advance = on_advance
        self.reput_from_offset = reput_from_offset
        self.chunk_bytes = chunk_bytes
        self.dispatched_messages = 0
        self.last_timestamp = 0  # store time of the last dispatched record (checkpoint)
        # Set (and replaced) after every chunk, at the end of each run and on failure: any
        # number of waiters (throttled puts, wait_dispatched) share it.
        self._progress = asyncio.Event()

    async def run_once(self) -> None:
        while not self.stopping:
            limit = self.source.dispatch_limit()
            if self.reput_from_offset >= limit:
                break
            requests, next_offset = self.source.read_dispatch_chunk(
                self.reput_from_offset, limit, self.chunk_bytes
            )
            plan = self.dispatcher.plan(requests)
            await self._create_queue_files(plan)
            advanced, leftover = self.dispatcher.apply(plan)
            if leftover and self.dispatcher.index is not None:
                await self.dispatcher.index.put_entries(leftover)  # rolls a file in a thread
            progressed = next_offset > self.reput_from_offset
            if progressed:
                self.reput_from_offset = next_offset
            self.dispatched_messages += len(requests)
            if requests:
                self.last_timestamp = requests[-1].store_timestamp
            if advanced:
                self.on_advance(advanced)
            self._signal_progress()
            if not progressed:
                break  # nothing decodable yet: wait for the next wakeup
            await asyncio.sleep(0)  # let puts and pulls in between chunks
        self.interval_s = PENDING_POLL_S if self.source.has_pending() else self.idle_interval_s
        self._signal_progress()

    def _signal_progress(self) -> None:
        event, self._progress = self._progress, asyncio.Event()
        event.set()

    async def _create_queue_files(self, plan: DispatchPlan) -> None:
        """Create, in a thread, the ConsumeQueue files this chunk will need (file creation
        never runs on the event loop)."""
        needed = self.dispatcher.missing_files(plan)
        if needed:
            created = await asyncio.to_thread(_create_files_blocking, needed)
            for queue, files in created:
                queue.adopt_files(files)

    def on_failure(self, exc: BaseException) -> None:
        """A chunk that cannot be dispatched (a corrupt record) is retried at the idle pace,
        not the pending-poll pace, so the log is not flooded; ``health()`` shows it."""
        self.interval_s = self.idle_interval_s
        self._signal_progress()

    async def wait_dispatched(self, offset: int, timeout_s: float = 5.0) -> bool:
        """Wait until everything below ``offset`` is dispatched (tests, shutdown); False on
        timeout or as soon as dispatch fails (a corrupt record will not go away by waiting)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        failures = self.failures
        while self.reput_from_offset < offset:
            if loop.time() >= deadline or not self.running or self.failures > failures:
                return self.reput_from_offset >= offset
            before = self.reput_from_offset
            progress = self._progress
            self.wakeup()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress.wait(), max(deadline - loop.time(), 0.001))
            if self.reput_from_offset == before:
                await asyncio.sleep(PENDING_POLL_S)  # waiting for a commit/sync, not for us
        return True


def _create_files_blocking(
    needed: list[tuple[ConsumeQueue, list[int]]],
) -> list[tuple[ConsumeQueue, list[ConsumeQueueFile]]]:
    return [(queue, queue.create_files_blocking(starts)) for queue, starts in needed]


class CommitLogSource:
    """Adapts the CommitLog to the reput's DispatchSource. In SYNC_FLUSH mode dispatch stops
    at the flushed offset (RocketMQ #8239)."""

    def __init__(self, commit_log: CommitLog, sync_flush: bool) -> None:
        self.commit_log = commit_log
        self.sync_flush = sync_flush

    def dispatch_limit(self) -> int:
        log = self.commit_log
        return min(log.flushed_offset, log.max_offset) if self.sync_flush else log.max_offset

    def has_pending(self) -> bool:
        return self.commit_log.wrote_offset > self.dispatch_limit()

    def read_dispatch_chunk(
        self, from_offset: int, limit: int, max_bytes: int
    ) -> tuple[list[DispatchRequest], int]:
        budget = min(max_bytes, limit - from_offset)
        try:
            batch = self.commit_log.iter_dispatch(from_offset, budget)
        except CorruptRecordError as exc:
            if exc.offset <= from_offset:
                raise
            # Dispatch the good records before the bad one; the next call fails at it.
            batch = self.commit_log.iter_dispatch(from_offset, exc.offset - from_offset)
        requests = batch.requests
        keep = len(requests)
        while keep and requests[keep - 1].commit_log_offset + requests[keep - 1].size > limit:
            keep -= 1
        if keep == len(requests) and batch.next_offset <= limit:
            return requests, batch.next_offset
        if keep == 0:
            return [], from_offset
        last = requests[keep - 1]
        return requests[:keep], last.commit_log_offset + last.size
