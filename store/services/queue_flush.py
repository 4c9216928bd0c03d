"""FlushConsumeQueueService: durability of ConsumeQueues and IndexFiles (RocketMQ's
FlushConsumeQueueService), separate from the CommitLog flush.

Every ``flush_interval_consume_queue`` (1 s) it fdatasyncs the queues that gathered at least
``flush_consume_queue_least_pages`` (2) pages, at most ``flush_consume_queue_max_queues`` (16)
of them, the most unflushed first; everything every ``flush_consume_queue_thorough_interval``
(60 s) and at shutdown. The bound: these periodic passes vouch for nothing (the checkpoint moves
only after a thorough one), they only spread the writing out, and without it the syncs grew
with the queues in use: at 1,024 busy queues (256 topics, ~300k msg/s) ~700 fdatasyncs a second,
~0.2 us of the broker's system CPU a message in the executor threads plus the tails spilled
on the loop for them (``tests.bench.topics``); the kernel's writeback (30 s) and the thorough
pass take the rest. RocketMQ syncs every queue past its least pages. Index files are synced only
by those thorough passes: their hash slots are random 4 KiB pages, and syncing them every second
queued the commit log's group-commit fdatasync behind a burst of random writes (end-to-end p99
at 10k msg/s: ~15 ms with, ~7.5 ms without); the checkpoint vouches for the index only after a
thorough pass anyway (RocketMQ, too, syncs an index file when it is full). The syncs run in a
thread under the store's maintenance lock (so no file is closed under a sync). After a thorough
pass the checkpoint's logics fields advance to the dispatch position captured BEFORE the sync:
recovery after a machine crash re-dispatches from there at the latest, so units lost with the
page cache are rebuilt and nothing is skipped. (After a process crash the page cache survived
and recovery does not need it: see ``wharf.store.recovery``.)

Names too (power loss): re-dispatching from the checkpoint rebuilds units only in files that
exist, so the files holding units BEFORE ``logics_offset`` must survive by name. Queue and
index files (and queue directories) are created without a directory fsync (that would put a
journal commit on the dispatch path); their directories are collected in
``ConsumeQueueTable.dir_syncs`` / ``IndexService.dir_syncs`` and every thorough pass fsyncs
them after the file syncs and before the checkpoint moves. A partial pass does neither.

Every ``RECORD_INTERVAL_S`` (5 s) it also has the positions journal record the queues that
changed (``store.queue.journal``), for a quick restart after a process crash.

The service works on ``StoreParts`` plus ``dispatch_position()`` -> (reput offset, timestamp of
the last dispatched message), not on the facade (see ``wharf.store.parts``).
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable

from wharf.store.errors import disk_full_error, is_disk_full
from wharf.store.parts import StoreParts
from wharf.store.paths import DirectorySyncs
from wharf.store.queue.consume_queue import ConsumeQueue
from wharf.store.queue.journal import RECORD_INTERVAL_S, PositionsJournal
from wharf.store.service import Service
from wharf.store.services.syncfs import whole_fs_sync

# () -> (dispatch offset, store timestamp of the last dispatched message; 0 if none yet).
DispatchPosition = Callable[[], tuple[int, int]]

# A thorough pass over at least this many queues syncs their filesystem at once where that is
# reliable (``wharf.store.services.syncfs`` says why). Below it (512 queues file by file: 0.05 s,
# ``tests.bench.thorough_flush``) the files' own syncs cost less than writing back whatever
# else is dirty there (the commit log's unflushed pages, other programs' files).
SYNCFS_MIN_QUEUES = 512


class FlushConsumeQueueService(Service):
    def __init__(
        self,
        parts: StoreParts,
        dispatch_position: DispatchPosition,
        journal: PositionsJournal | None = None,
    ) -> None:
        config = parts.config
        super().__init__("FlushConsumeQueueService", config.flush_interval_consume_queue / 1000)
        self.parts = parts
        self.dispatch_position = dispatch_position
        self.least_bytes = config.flush_consume_queue_least_pages * mmap.PAGESIZE
        self.max_queues = config.flush_consume_queue_max_queues
        self.thorough_s = config.flush_consume_queue_thorough_interval / 1000
        self._last_thorough = time.monotonic()
        self.journal = journal
        self._last_record = time.monotonic()
        self.flush_count = 0
        self.last_flush_seconds = 0.0
        # One syncfs for a thorough pass over many queues, or None: file by file
        self.sync_filesystem = whole_fs_sync(str(parts.queues.root))
        self.filesystem_syncs = 0  # thorough passes done with one syncfs

    async def run_once(self) -> None:
        now = time.monotonic()
        thorough = now - self._last_thorough >= self.thorough_s
        if thorough:
            self._last_thorough = now
        await self.flush(0 if thorough else self.least_bytes)
        if self.journal is not None and now - self._last_record >= RECORD_INTERVAL_S:
            self._last_record = now
            await self.journal.record(lambda: self.dispatch_position()[0])

    async def on_stop(self) -> None:
        await self.flush_all()

    async def flush_all(self) -> None:
        await self.flush(0)

    async def flush(self, least_bytes: int) -> None:
        """A thorough pass (``least_bytes`` 0): sync every unflushed queue, the index and the
        new names, then move the checkpoint. A periodic one: sync the ``max_queues`` queues
        with the most unflushed, at least ``least_bytes`` each."""
        parts = self.parts
        thorough = least_bytes == 0
        async with parts.maintenance:
            dispatched_offset, dispatched_timestamp = self.dispatch_position()
            dir_syncs: list[DirectorySyncs] = []
            if thorough:
                # The units dispatched before that position, some still in queue tails in
                # memory, into the files the sync below makes durable (consume_queue's
                # "Tails"; a full disk raises DiskFullError and the checkpoint stays).
                await parts.queues.spill_tails()
                queues = parts.queues.unflushed(0)
                index = parts.index
                dir_syncs.append(parts.queues.dir_syncs)
                if index is not None:
                    dir_syncs.append(index.dir_syncs)
            else:  # vouches for nothing: spills and syncs only the queues it picked
                queues = parts.queues.most_unflushed(least_bytes, self.max_queues)
                for queue in queues:
                    queue.spill()
                index = None
            # Only a thorough pass: a periodic one of flushConsumeQueueMaxQueues >= 512 would
            # write back the whole filesystem every second.
            many = thorough and len(queues) >= SYNCFS_MIN_QUEUES
            whole = self.sync_filesystem if many else None
            started = time.monotonic()
            try:
                nbytes = await self.run_blocking(self._flush_blocking, queues, index, whole)
                if dir_syncs:
                    # After the data and sizes: a name made durable here points at a synced
                    # file (only files created meanwhile, the newest, may be short: recovery
                    # drops those).
                    await self.run_blocking(self._sync_dirs_blocking, dir_syncs)
            except OSError as exc:
                # The checkpoint does not move: recovery re-dispatches these units from the
                # commit log if the pages are lost. One line per episode (log_once).
                if is_disk_full(exc):
                    raise disk_full_error(exc, "syncing consume queue and index files") from exc
                raise
            seconds = time.monotonic() - started
            parts.queues.flushed(queues)
            self.filesystem_syncs += whole is not None
        self.flush_count += 1
        self.last_flush_seconds = seconds
        if nbytes:
            parts.observer.on_flush("cq", seconds, nbytes)
        checkpoint = parts.checkpoint
        # Only a thorough pass synced every queue: a partial one skipped queues with fewer than
        # least_pages dirty, so it cannot vouch for the dispatch position (RocketMQ, too, moves
        # logicsMsgTimestamp only on its thorough flush).
        if thorough and dispatched_offset > checkpoint.logics_offset:
            checkpoint.logics_offset = dispatched_offset
            if dispatched_timestamp:
                checkpoint.logics_msg_timestamp = dispatched_timestamp
                checkpoint.index_msg_timestamp = dispatched_timestamp
            await self.run_blocking(checkpoint.flush_blocking)

    @staticmethod
    def _flush_blocking(
        queues: list[ConsumeQueue], index: object, whole: Callable[[], None] | None = None
    ) -> int:
        """Sync ``queues`` (file by file, or with ``whole``, one sync of their filesystem),
        then ``index``; returns the bytes made durable."""
        if whole is not None:
            targets = [queue.sync_target() for queue in queues]  # before: what the sync covers
            whole()
            nbytes = sum(map(ConsumeQueue.synced, queues, targets))
        else:
            nbytes = sum(queue.flush_blocking() for queue in queues)
        if index is not None:
            index.flush_blocking()  # type: ignore[attr-defined]
        return nbytes

    @staticmethod
    def _sync_dirs_blocking(dir_syncs: list[DirectorySyncs]) -> int:
        return sum(pending.sync_blocking() for pending in dir_syncs)
