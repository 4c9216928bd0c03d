"""AllocateMappedFileService: create the next and next-next segment ahead of the writer.

Creating a segment (open, posix_fallocate, mmap, optional warm-up) costs milliseconds (seconds
with warmMapedFileEnable) for 1 GiB files; the
append path must never pay that on the event loop. After every roll (and at start) the queue
asks for the two following segments; a thread creates them; the next roll takes one that is
ready. The segment the FIRST append needs is made in the start-up thread
(``CommitLog.prepare_blocking``, run by recovery) and handed over with ``adopt``; its read
prefault runs once started, in a thread of its own a window ahead of the writer
(``prefault_segment_blocking``), so the broker serves without waiting for it and the
preallocations are not queued behind it.

Why a roll never waits for an in-flight preallocation: ``append`` is synchronous by contract
(never awaits, atomic on one loop), so "waiting" there means blocking the loop for the rest of
a prefault (up to ~0.6 s), which stalls every client. A retriable "busy" error would push a
retry loop into every caller of ``append``. Instead, in that rare case (the writer outran the
thread: tiny segments, or a burst right after start), ``take`` answers None and the queue
creates the segment itself WITHOUT the prefault or warm-up (open + posix_fallocate + mmap: a
few ms even for 1 GiB on ext4; fallocated, so a full disk fails here instead of SIGBUS on a
page fault later), counted in ``MappedFileQueue.sync_creations`` -- a symptom to watch, not an
error. Its first writes page-fault on the loop (fresh pages ~2 GB/s): slower than a prefaulted
segment, never a stall.

Zero fill (SYNC_FLUSH, ``zeroFillAheadMbps``): a segment asked for while the log is slow is
also filled with zeros and synced, paced, before it is handed over (``ZeroFill``), so the group
commit's fdatasyncs into it find written extents and commit no extent change in the journal.
A roll that needs a segment still filling cancels the fill (and creates its own, as above).

A full disk (DiskFullError from the creation) is logged once per episode and the request is
dropped: the roll then creates the segment itself and its append fails with DiskFullError, which
the CommitLog turns into its disk-full state; a later roll asks again.

Durability (power loss): a created segment's size (fsync after posix_fallocate) and name (fsync
of ``commitlog/`` after the link) are durable before it is handed over, so the directory fsync
is paid here, in the thread, not by the writer; only a synchronous creation pays it on the loop.

A synchronous creation and a preallocation of the same offset cannot clobber each other:
segments are created under a temporary name and linked into place (the loser discards its
copy, see ``create_segment_blocking``). If the thread links first, its prefault is already
done and only an unlink remains: ``claim_linked`` takes its segment (a wait of microseconds).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor

from wharf.store.errors import DiskFullError
from wharf.store.log.mapped_file import MappedFile, ZeroFill, prefault_segment_blocking
from wharf.store.log.mapped_file_queue import MappedFileQueue, create_segment_blocking
from wharf.store.service import Service

log = logging.getLogger(__name__)

PREALLOCATE_AHEAD = 2  # next and next-next, as RocketMQ
# claim_linked: after the link only an unlink is left; a generous bound, never a prefault.
LINKED_WAIT_S = 5.0
# A stop's wait for the cancelled read-ahead thread: it ends within a 1 MiB read or a poll
# (0.1 s); a bound, so a stuck read (a failing disk) cannot hold the stop.
READ_AHEAD_STOP_S = 5.0
# Zero-fill only when a segment lasts this many fills (see __init__): at 10k msg/s the fill's
# writeback beside the syncs (32 MiB segments lasting 2.7 s, 1 s fills) left the e2e p99
# undecided at 1.23x (0.45-2.21x), where the syncs it speeds are the 1k path's.
FILL_MARGIN = 4


class AllocateMappedFileService(Service):
    def __init__(
        self, queue: MappedFileQueue, executor: Executor | None = None, zero_fill_bps: int = 0
    ) -> None:
        super().__init__("AllocateMappedFileService", interval_s=1.0)
        # Zero-fill (``ZeroFill``) the segments asked for at a roll when the last interval
        # between two rolls was at least FILL_MARGIN fills long: the log writes at most a
        # quarter of the pace (8 MB/s at 32), so the fill's writeback is in front of the group
        # commit's syncs a quarter of the time at most, and done long before its segment is
        # needed. Unknown until two rolls were seen: a broker that never rolls, or writes
        # faster (10k msg/s of 1 KiB: 12 MB/s; throughput runs: 100+ MB/s), never pays for
        # writing its segments twice.
        self._zero_fill_bps = zero_fill_bps
        self._rolled_at: float | None = None
        self._segment_s: float | None = None  # the last interval between two rolls
        self._fills: dict[int, ZeroFill] = {}
        self.clock = time.monotonic  # tests set the roll times
        self._queue = queue
        self._own_executor = executor is None
        self._pool: Executor = executor or ThreadPoolExecutor(1, thread_name_prefix="allocate")
        self._ready: dict[int, MappedFile] = {}
        self._pending: list[int] = []
        self._inflight: dict[int, Future[MappedFile]] = {}
        self._last_ok = True  # the last creation succeeded: a disk-full failure starts an episode
        self._prefault: list[MappedFile] = []  # adopted, to read once started
        self._cancel_prefault = threading.Event()  # set at stop: before the files close
        self._read_ahead: list[threading.Thread] = []
        self.created = 0
        self.late_takes = 0  # rolls that found their segment still in flight (not waited for)
        self.disk_full_failures = 0  # preallocations refused by a full disk
        self.zero_filled = 0  # segments zero-filled to their end
        queue.take_preallocated = self.take
        queue.claim_linked = self.claim_linked
        queue.on_roll = self._on_roll

    def has_ready(self, offset: int) -> bool:
        return offset in self._ready

    def adopt(self, mapped: MappedFile, prefault: bool = False) -> None:
        """Hand over a segment created ahead elsewhere (``CommitLog.prepare_blocking``);
        ``prefault``: read it ahead of its writer in a thread from ``start`` on (the writer
        appends meanwhile: the reads only fill the page cache)."""
        self._ready[mapped.file_from_offset] = mapped
        if prefault:
            self._prefault.append(mapped)

    def start(self) -> None:
        for mapped in self._prefault:
            thread = threading.Thread(
                target=prefault_segment_blocking,
                args=(mapped, self._cancel_prefault),
                name="read-ahead",
                daemon=True,
            )
            thread.start()
            self._read_ahead.append(thread)
        self._prefault.clear()
        super().start()

    def _on_roll(self, start_offset: int) -> None:
        now = self.clock()
        if self._rolled_at is not None:
            self._segment_s = now - self._rolled_at
        self._rolled_at = now
        self.request_after(start_offset)

    def request_after(self, start_offset: int) -> None:
        """Ask for the segments that follow the one starting at ``start_offset``."""
        size = self._queue.file_size
        for i in range(1, PREALLOCATE_AHEAD + 1):
            offset = start_offset + i * size
            known = offset in self._ready or offset in self._inflight or offset in self._pending
            if not known:
                self._pending.append(offset)
                bps = self._zero_fill_bps
                if (
                    bps
                    and self._segment_s is not None
                    and self._segment_s >= FILL_MARGIN * size / bps
                ):
                    self._fills[offset] = ZeroFill(bps)
        self.wakeup()

    @property
    def idle(self) -> bool:
        """Nothing requested or being created."""
        return not self._pending and not self._inflight

    def take(self, offset: int) -> MappedFile | None:
        """The ready segment for ``offset``, or None: never requested, failed, or still in
        flight (never waited for: see the module docstring; the caller creates it)."""
        if offset in self._pending:
            self._pending.remove(offset)
        mapped = self._ready.pop(offset, None)
        if mapped is not None:
            return mapped
        fill = self._fills.pop(offset, None)
        future = self._inflight.get(offset)
        if future is None:
            return None
        if not future.done():
            self.late_takes += 1
            if fill is not None:
                fill.cancel.set()  # the link comes sooner; the rest of the zeros are not needed
            return None  # the thread's link will lose to the caller's (FileExistsError)
        del self._inflight[offset]
        try:
            return future.result()
        except DiskFullError:
            return None  # logged by run_once; the caller's creation reports it
        except Exception as exc:
            log.error("preallocating segment %d failed: %r; creating it synchronously", offset, exc)
            return None

    def claim_linked(self, offset: int) -> MappedFile | None:
        """The in-flight segment for ``offset`` whose file the thread has ALREADY linked into
        place (a synchronous creation just lost the link race): only the thread's unlink of
        its temporary name remains, so this wait is microseconds, not a prefault."""
        future = self._inflight.pop(offset, None)
        if future is None:
            return None
        return future.result(timeout=LINKED_WAIT_S)

    async def run_once(self) -> None:
        while self._pending and not self.stopping:
            offset = self._pending.pop(0)
            future = self._pool.submit(
                create_segment_blocking,
                self._queue.store_path,
                offset,
                self._queue.file_size,
                self._queue.warm,
                # No read prefault: measured here it costs ~1.4 s of CPU per GiB in this
                # thread and saves the loop only ~0.12 s per GiB of writes (page faults on
                # fallocated pages). On a box whose cores the broker shares with its clients
                # (2 cores here) that is a net loss of ~1.3 s of CPU per GiB written. Tried
                # again 2026-11-25 (where free memory went back to the host, the loop's
                # pwrite pays ~2.3 s per GiB for new pages, the thread would take that): a
                # SYNC_FLUSH broker's e2e p99 at 10k msg/s, written into such a segment,
                # went 1.2-1.6 -> 6-11 ms (max 31-35 ms), cause not found (the start-up
                # segment, prefaulted the same way before the broker serves: 2.0 ms).
                False,
                self._fills.get(offset),
            )
            self._inflight[offset] = future
            try:
                mapped = await asyncio.wrap_future(future)
            except FileExistsError:
                self._inflight.pop(offset, None)
                continue  # already on disk (created synchronously): nothing to prepare
            except DiskFullError as exc:
                self._inflight.pop(offset, None)
                self._pending.clear()  # asked again after the next roll
                self._fills.clear()
                if self._last_ok:
                    log.warning("preallocating segment %d: %s", offset, exc)
                self.disk_full_failures += 1
                self._last_ok = False
                return
            finally:
                fill = self._fills.pop(offset, None)
            self._last_ok = True
            if fill is not None and fill.filled == self._queue.file_size:
                self.zero_filled += 1
            if self._inflight.pop(offset, None) is future:  # not claimed by take() meanwhile
                self._ready[offset] = mapped
                self.created += 1

    async def stop(self) -> None:
        self._cancel_prefault.set()
        for fill in self._fills.values():
            fill.cancel.set()  # a fill ends at its next step (~8 ms at 32 MB/s), not in 30 s
        await super().stop()

    async def on_stop(self) -> None:
        """Unused preallocated segments are deleted: they hold no data."""
        ready, self._ready = self._ready, {}
        self._pending.clear()
        for mapped in ready.values():
            await asyncio.to_thread(mapped.destroy_blocking)
        for thread in self._read_ahead:
            await asyncio.to_thread(thread.join, READ_AHEAD_STOP_S)
        self._read_ahead.clear()
        if self._own_executor:
            self._pool.shutdown(wait=True)

    def discard_ready_blocking(self) -> None:
        """Delete segments made ahead but never used (a log closed without ``stop``)."""
        self._cancel_prefault.set()
        for fill in list(self._fills.values()):
            fill.cancel.set()
        ready, self._ready = self._ready, {}
        for mapped in ready.values():
            mapped.destroy_blocking()
