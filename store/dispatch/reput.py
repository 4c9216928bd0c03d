"""Dispatch: CommitLog records -> ConsumeQueue units + index entries + arrival notifications
(RocketMQ's ReputMessageService and its CommitLogDispatchers).

``Dispatcher`` (``wharf.store.dispatch.dispatcher``) is the synchronous core (also used by recovery, in a
thread, before the store serves). ``ReputService`` is the asyncio task that tails the CommitLog from
``reput_from_offset``: it is woken by appends (no sleep loop; the interval is only a safety net),
dispatches bounded chunks so the event loop stays responsive, and in SYNC_FLUSH mode never goes
past the flushed offset: a consumer must not see a message that a crash could still take away
(RocketMQ #8239). ``dispatch_inline`` is the latency fast path: called by whoever moved the
dispatch limit (the store, after a SYNC_FLUSH sync and before its writers are answered, while
a reader waits), it dispatches up to ``INLINE_MAX_BYTES`` synchronously when the task is idle
and nothing needs a thread (a new ConsumeQueue file, an IndexFile roll); otherwise it wakes
the task. A lone message's long poll is then woken in the same callback that learns of the
sync, instead of a task wake-up later and after the writers' acks (sync done -> pull reply
handed to gRPC: 0.36 ms p50 against 0.48 on a quiet box, 0.37 against 0.96 on a busy one).
``prepare_inline`` takes the reading and planning off that path: called when a sync is
requested (the loop is idle while the sync thread's fdatasync runs, ~0.2-0.4 ms), it reads,
decodes and plans the written records the sync will cover and keeps the plans;
``dispatch_inline`` then only applies them (nothing is visible to readers before the sync:
a plan is pure, the ConsumeQueues are written when it is applied). A kept plan is used only
if it starts where dispatch stands and ends within what the sync made durable; anything else
(the task dispatched meanwhile, a partial sync) drops it and reads afresh.
A run past its queue's end (lost units) sends dispatch back to that queue's last record
(``wharf.store.dispatch.gaps``): ``reput_from_offset`` then moves back, which is safe for
what captured it (the checkpoint moves only forward; a positions record with a lower D only
re-dispatches more).
``CommitLogSource`` reads a chunk of one segment and decodes it as numpy columns when it is
large, one DispatchRequest per record when it is small.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import NamedTuple, Protocol

from wharf import hops
from wharf.store.codec.dispatch import decode_dispatches
from wharf.store.codec.layout import CQ_STORE_UNIT_SIZE
from wharf.store.codec.records import read_total_size
from wharf.store.dispatch.dispatcher import (
    Dispatcher,
    DispatchPlan,
    DispatchRecords,
    IndexEntries,
    QueueAdvance,
    QueueRun,
)
from wharf.store.errors import CorruptRecordError, DiskFullError
from wharf.store.fast.dispatch_columns import decode_dispatch_columns
from wharf.store.log.commit_log import CommitLog
from wharf.store.queue.consume_queue import ConsumeQueue, ConsumeQueueFile
from wharf.store.service import Service

__all__ = ["CommitLogSource", "DispatchSource", "Dispatcher", "QueueAdvance", "ReputService"]

# Bytes (and at most how many records) of CommitLog dispatched per iteration. A columnar chunk
# has a fixed numpy cost (~0.2-0.3 ms) that only large chunks spread thin; measured per 1 KiB
# record with a UNIQ_KEY (TAGS + KEYS too): ~3.1 (3.8) us at 256 KiB, ~2.1 (2.6) at 512 KiB,
# ~1.6 (2.1) at 1 MiB. A 1 MiB chunk (~900 records) holds the loop ~1.5-2 ms: what a 256 KiB
# chunk held it with the per-record decoder, so puts and pulls wait no longer between chunks.
DEFAULT_CHUNK_BYTES = 1024 * 1024
DEFAULT_CHUNK_RECORDS = 1024

# While written data waits for a commit (transient pool) or a sync (SYNC_FLUSH), poll at this
# pace instead of the idle interval: nothing else wakes the reput when that data lands.
PENDING_POLL_S = 0.005

# ``dispatch_inline`` dispatches at most this much at once (more is left to the task, whose
# columnar chunks cost less per record): a sync covering a lone message or a few small
# batches is dispatched on the spot, a large one (throughput) the usual way.
INLINE_MAX_BYTES = 64 * 1024

# Chunks of at least this many records are decoded and planned as numpy columns; smaller ones
# (a reput keeping up with light traffic) take the per-record path, which has no fixed cost
# (measured, whole dispatch of 1 KiB records: ~3 us a record either way at 96 records; at 64
# columns cost 4.3-4.7 us and the per-record path 3.0-3.5; at 192, 1.7-2.2 against 2.9-3.5).
COLUMNS_FROM = 96


class _Prepared(NamedTuple):
    """A planned chunk of records written but not yet synced: [start, end) of the log."""

    start: int
    end: int
    plan: DispatchPlan


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
    ) -> tuple[DispatchRecords, int]:
        """Decoded records starting at ``from_offset`` (skipping end-of-segment blanks) and the
        offset right after the last one returned."""
        ...

    def disk_full(self, error: DiskFullError | None) -> None:
        """Dispatch hit a full disk (``error``), or wrote again after one (None)."""
        ...


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
        self._disk_full = False  # the last run failed for a full disk (reported to the source)
        self._in_run = False  # run_once is between its start and its end (it may be suspended)
        self._index_leftover: list[IndexEntries] = []  # inline chunks' entries awaiting a roll
        self.inline_dispatches = 0
        self._prepared: list[_Prepared] = []  # planned ahead of their sync, contiguous
        self.prepared_used = 0  # prepared chunks dispatch_inline applied as planned

    def wakeup_for(self, end_offset: int) -> None:
        """Data up to ``end_offset`` became dispatchable (synced): wake the task unless it is
        dispatched already (inline, while a reader waited: a wakeup would only cost an empty
        run)."""
        if self.reput_from_offset < end_offset:
            self.wakeup()

    @property
    def in_run(self) -> bool:
        """The task is in a run (maybe suspended between chunks, its progress signalled for
        the chunks so far): inline dispatch defers to it."""
        return self._in_run

    def prepare_inline(self, written_end: int, max_bytes: int = INLINE_MAX_BYTES) -> None:
        """While a sync of the log up to ``written_end`` runs: read, decode and plan the
        records not dispatched nor planned yet, for ``dispatch_inline`` to apply once they
        are durable. Nothing when the task is busy or failing, or more than ``max_bytes``
        would be planned ahead (a throughput load: the task's columnar chunks serve it)."""
        if self._in_run or self.stopping or not self.running or self.consecutive_failures:
            return
        prepared = self._prepared
        if prepared and prepared[0].start != self.reput_from_offset:
            self._drop_prepared()
        start = prepared[-1].end if prepared else self.reput_from_offset
        budget = max_bytes - (start - prepared[0].start if prepared else 0)
        if start >= written_end or written_end - start > budget:
            return
        try:
            records, end = self.source.read_dispatch_chunk(start, written_end, budget)
            plan = self.dispatcher.plan(records)
        except Exception:  # dispatch_inline or the task meets it again and records it
            self._drop_prepared()
            return
        if end > start:
            prepared.append(_Prepared(start, end, plan))

    def _drop_prepared(self) -> None:
        self._prepared.clear()

    @property
    def planned_end(self) -> int:
        """Where the kept plans end (the dispatch position when none is kept)."""
        return self._prepared[-1].end if self._prepared else self.reput_from_offset

    def prepared_runs(self, since: int) -> list[tuple[QueueRun, int]]:
        """The runs of the chunks planned from ``since`` (a chunk's start) on, each with the
        end of its chunk: what the sync must make durable before they may be read."""
        return [(run, p.end) for p in self._prepared if p.start >= since for run in p.plan.runs]

    def planned_units(self, key: tuple[str, int], offset: int) -> tuple[bytes, int] | None:
        """The planned, not yet applied, ConsumeQueue units of queue ``key`` from logical
        ``offset`` (one run: a lone message's) and the log offset that must be durable
        before a reader may see them; None when no kept plan holds ``offset``."""
        for prepared in self._prepared:
            for run in prepared.plan.runs:
                if run.key == key and run.first <= offset < run.first + run.unit_count:
                    skip = (offset - run.first) * CQ_STORE_UNIT_SIZE
                    return run.units[skip:], prepared.end
        return None

    def _take_prepared(self, start: int, limit: int) -> _Prepared | None:
        """The kept plan for the chunk at ``start`` if it ends within ``limit``. Otherwise
        every kept plan is dropped: one starting elsewhere is stale (the task dispatched
        meanwhile), one ending past ``limit`` is cut by a partial sync (the chunk is read
        afresh up to ``limit``, after which the plans no longer start where dispatch is)."""
        prepared = self._prepared
        if not prepared:
            return None
        head = prepared[0]
        if head.start != start or head.end > limit:
            self._drop_prepared()
            return None
        prepared.pop(0)
        return head

    def dispatch_inline(self, max_bytes: int = INLINE_MAX_BYTES) -> bool:
        """Dispatch everything dispatchable now, synchronously, if that is small and needs no
        thread; True when caught up. False (the task is woken instead) when the task is in a
        run, the service is stopping, not started or failing, more than ``max_bytes`` wait,
        or a chunk would create a file or roll the index. Chunks planned by
        ``prepare_inline`` are applied as planned."""
        if self._in_run or self.stopping or not self.running or self.consecutive_failures:
            self.wakeup()
            return False
        limit = self.source.dispatch_limit()
        start = self.reput_from_offset
        if start >= limit:
            return True
        if limit - start > max_bytes:
            self._drop_prepared()
            self.wakeup()
            return False
        while start < limit:
            if not self._dispatch_chunk(start, limit, max_bytes):
                return False
            start = self.reput_from_offset
        return True

    def _dispatch_chunk(self, start: int, limit: int, max_bytes: int) -> bool:
        """One chunk of ``dispatch_inline`` from ``start``: False when it woke the task."""
        try:
            ready = self._take_prepared(start, limit)
            if ready is not None:
                plan, next_offset = ready.plan, ready.end
                self.prepared_used += 1
            else:
                records, next_offset = self.source.read_dispatch_chunk(start, limit, max_bytes)
                plan = self.dispatcher.plan(records)
            if self.dispatcher.missing_files(plan):
                self.wakeup()
                return False
            if hops.ENABLED:
                hops.stamp("b.reput_run")
            advanced = self.dispatcher.apply_queues(plan)
        except Exception:  # the task meets it again and records it (health, back-off)
            self.wakeup()
            return False
        rewind = self.dispatcher.gaps.rewind(start)  # a queue's gap: back to its records
        self.reput_from_offset = max(next_offset, start) if rewind is None else rewind
        self.inline_dispatches += 1
        # The arrivals before the index entries: a parked pull is answered in the arrival's
        # call (broker/core/long_poll.py), and nothing it reads needs the index; the progress
        # signal (wait_dispatched: queries by key may follow) comes after both.
        self._notify(advanced)
        try:
            leftover = self.dispatcher.apply_index(plan)
        except Exception:
            # The task dispatches the chunk again (units already written are skipped,
            # indexed offsets too), counts it and records the failure.
            self.reput_from_offset = start if rewind is None else rewind
            self.wakeup()
            self._signal_progress()
            return False
        self._count(plan)
        if leftover:  # the index needs a new file (a thread): the task's next run writes them
            self._index_leftover.append(leftover)
            self.wakeup()
        self._signal_progress()
        # Nothing decodable (the task meets it and records why), or index entries wait for a
        # roll (later entries must not pass them): the task goes on.
        if next_offset <= start or leftover or rewind is not None:
            self.wakeup()
            return False
        return True

    def _applied(self, plan: DispatchPlan, advanced: QueueAdvance) -> None:
        """After a chunk is applied by the task: counters, arrivals, progress."""
        self._count(plan)
        self._notify(advanced)
        self._signal_progress()

    def _count(self, plan: DispatchPlan) -> None:
        """A chunk is dispatched whole (queue units and index entries): counters."""
        self.dispatched_messages += plan.record_count
        if plan.record_count:
            self.last_timestamp = plan.last_timestamp

    def _notify(self, advanced: QueueAdvance) -> None:
        """After a chunk's ConsumeQueue units are written: the arrivals."""
        if advanced:
            if hops.ENABLED:
                hops.stamp("b.dispatched")
            self.on_advance(advanced)

    async def run_once(self) -> None:
        self._in_run = True
        try:
            await self._run_once()
        finally:
            self._in_run = False

    async def _run_once(self) -> None:
        if hops.ENABLED:
            hops.stamp("b.reput_run")
        while self._index_leftover and self.dispatcher.index is not None:
            await self.dispatcher.index.put_entries(self._index_leftover[0])
            self._index_leftover.pop(0)
        while not self.stopping:
            limit = self.source.dispatch_limit()
            if self.reput_from_offset >= limit:
                break
            records, next_offset = self.source.read_dispatch_chunk(
                self.reput_from_offset, limit, self.chunk_bytes
            )
            plan = self.dispatcher.plan(records)
            advanced, left = self.dispatcher.apply_ready(plan)
            if left:  # runs that need new queue files: created in a thread, then applied
                rest = plan._replace(runs=left)
                await self._create_queue_files(rest)
                advanced.update(self.dispatcher.apply_queues(rest))
            leftover = self.dispatcher.apply_index(plan)
            if leftover and self.dispatcher.index is not None:
                await self.dispatcher.index.put_entries(leftover)  # rolls a file in a thread
            progressed = next_offset > self.reput_from_offset
            # A queue's gap: back to its records (store/dispatch/gaps.py).
            rewind = self.dispatcher.gaps.rewind(self.reput_from_offset)
            if rewind is not None:
                self.reput_from_offset = rewind
            elif progressed:
                self.reput_from_offset = next_offset
            self._disk_ok()  # before the progress signal: a waiter may write next
            self._applied(plan, advanced)
            if not progressed and rewind is None:
                break  # nothing decodable yet: wait for the next wakeup
            await asyncio.sleep(0)  # let puts and pulls in between chunks
        self.interval_s = PENDING_POLL_S if self.source.has_pending() else self.idle_interval_s
        self._disk_ok()
        self._signal_progress()

    def _disk_ok(self) -> None:
        """A run got through: end the full-disk refusal of appends ``on_failure`` began."""
        if self._disk_full:
            self._disk_full = False
            self.source.disk_full(None)

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
        if isinstance(exc, DiskFullError):
            # Appends are refused until dispatch writes again: accepted records would only
            # pile up invisible to consumers.
            self._disk_full = True
            self.source.disk_full(exc)
        self._signal_progress()

    async def wait_dispatched(self, offset: int, timeout_s: float = 5.0) -> bool:
        """Wait until everything below ``offset`` is dispatched (tests, shutdown); False on
        timeout or as soon as dispatch fails (a corrupt record will not go away by waiting)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        failures = self.failures
        self.wakeup()  # once: later runs come from appends, syncs or the pending-poll pace
        while self.reput_from_offset < offset:
            if loop.time() >= deadline or not self.running or self.failures > failures:
                return self.reput_from_offset >= offset
            # Every run signals progress when it ends, even one that found nothing to do
            # (data still waiting for its sync): no sleep here, the next run wakes us.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(deadline - loop.time(), 0.001)):
                    await self._progress.wait()
        return True


def _create_files_blocking(
    needed: list[tuple[ConsumeQueue, list[int]]],
) -> list[tuple[ConsumeQueue, list[ConsumeQueueFile]]]:
    return [(queue, queue.create_files_blocking(starts)) for queue, starts in needed]


# The commit log's pages leave the maps once dispatched and this far behind (in steps of
# RELEASE_STEP, one madvise each: 5-15 us for 16 MiB of mapped pages here). A consumer at the
# tail reads inside the window, its pages still mapped; one further behind faults its pages
# back in (cheap: fault-around maps 16 a fault). 64 MiB is ~0.1 s of produce at full speed,
# far below any page cache worth having.
RELEASE_BEHIND = 64 << 20
RELEASE_STEP = 16 << 20


class CommitLogSource:
    """Adapts the CommitLog to the reput's DispatchSource. In SYNC_FLUSH mode dispatch stops
    at the flushed offset (RocketMQ #8239); under SYNC_MASTER at the replicas' confirm offset."""

    def __init__(
        self, commit_log: CommitLog, sync_flush: bool, max_records: int = DEFAULT_CHUNK_RECORDS
    ) -> None:
        self.commit_log = commit_log
        self.sync_flush = sync_flush
        self.max_records = max_records
        # SYNC_MASTER: the replicas' confirm offset caps dispatch too (store/ha/master.py).
        self.confirm: Callable[[], int] | None = None
        # Dispatched bytes this far behind leave the segments' maps (release_read_pages).
        self.release_behind = RELEASE_BEHIND

    def dispatch_limit(self) -> int:
        limit = self.commit_log.durable_end(self.sync_flush)
        confirm = self.confirm
        return limit if confirm is None else min(limit, confirm())

    def has_pending(self) -> bool:
        return self.commit_log.wrote_offset > self.dispatch_limit()

    def disk_full(self, error: DiskFullError | None) -> None:
        self.commit_log.report_dispatch_disk_full(error)

    def read_dispatch_chunk(
        self, from_offset: int, limit: int, max_bytes: int
    ) -> tuple[DispatchRecords, int]:
        below = (from_offset - self.release_behind) // RELEASE_STEP * RELEASE_STEP
        if below > self.commit_log.released_below:  # everything before from_offset is dispatched
            self.commit_log.release_read_pages(below)
        budget = min(max_bytes, limit - from_offset)
        try:
            return self._read(from_offset, limit, budget)
        except CorruptRecordError as exc:
            if exc.offset <= from_offset:
                raise
            # Dispatch the good records before the bad one; the next call fails at it.
            return self._read(from_offset, limit, exc.offset - from_offset)

    def _read(self, from_offset: int, limit: int, budget: int) -> tuple[DispatchRecords, int]:
        """The records of one segment from ``from_offset`` (the next call continues in the
        next segment), none ending past ``limit``. A ``from_offset`` below the minimum
        (deleted) continues at the minimum. Same records as ``CommitLog.iter_dispatch``,
        decoded as columns when there are many."""
        log = self.commit_log
        start = max(from_offset, log.min_offset)
        segments = log.scan_records(start, self.max_records, budget)
        if not segments:
            next_offset = log.skip_blank(start)
            return [], next_offset if next_offset <= limit else from_offset
        buf, base, positions = segments[0]
        last_end = positions[-1] + read_total_size(buf, positions[-1])
        if base + last_end <= limit:
            next_offset = log.skip_blank(base + last_end)
            if next_offset > limit:
                next_offset = base + last_end
        else:  # the budget let the last records pass the limit: keep those before it
            ends = [*positions[1:], last_end]
            keep = len(positions)
            while keep and base + ends[keep - 1] > limit:
                keep -= 1
            if not keep:
                return [], from_offset
            positions = positions[:keep]
            next_offset = base + ends[keep - 1]
        if len(positions) >= COLUMNS_FROM:
            return decode_dispatch_columns(buf, positions, base), next_offset
        return decode_dispatches(buf, positions, base), next_offset
