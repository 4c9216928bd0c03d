"""PositionsJournal: keeps ``consumequeue.positions`` (layout and trust: ``store.queue.positions``)
up to date while the store runs, so a restart after a process crash loads the queue table
instead of reading 100,000 queues' files.

Every ``RECORD_INTERVAL_S`` the queue flush service calls ``record``: the dispatch position D,
then the states of the queues changed since their last record (``take_changed``), captured on
the loop in chunks (~2 us a queue: ~8 ms a chunk of 4,096, then the loop runs other work); the
tails those states count are written in a thread before the next chunk
(``ConsumeQueueTable.capture_written``: 40,000 of them on the loop held it ~3 s every 5 s at
10,000 topics), then the record is framed and appended in a thread. A deletion of
topics appends a REMOVED record under the same lock before the queues leave the table, so no
capture runs across it and a record never brings a deleted queue back. When the records after
the snapshot outgrow it twice over, the next ``record`` writes a new snapshot instead.

Cost, measured with 40,000 queues changing every interval (10,000 topics x 4 under load): 2.2
MB and ~80 ms of loop time per record; an idle broker writes nothing. The interval bounds the
work a restart after a process crash re-dispatches: what was dispatched in the last 5 s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from wharf.store.queue import positions
from wharf.store.queue.consume_queue import ConsumeQueue
from wharf.store.queue.table import ConsumeQueueTable

RECORD_INTERVAL_S = 5.0
CHUNK = 4096
# Snapshot again once the records after it reach twice its size plus this (a small table's
# snapshot is rewritten no more often than every ~1 MiB of records).
COMPACT_SLACK = 1 << 20

T = TypeVar("T")

log = logging.getLogger(__name__)


class PositionsJournal:
    def __init__(self, table: ConsumeQueueTable, path: Path) -> None:
        self.table = table
        self.path = path
        self.lock = asyncio.Lock()
        self.size = 0  # bytes in the file now
        self.snapshot_size = 0  # bytes of its snapshot
        self.position = 0  # D of the last record
        self.records = 0
        self.broken = False  # a write failed: the file was removed, the next record snapshots
        # The damaged queues last recorded for the next start (``record``).
        self.damaged_saved: frozenset[ConsumeQueue] = frozenset()

    def opened(self, size: int, snapshot_size: int, position: int) -> None:
        """The file as recovery left it (always a snapshot first)."""
        self.size, self.snapshot_size, self.position = size, snapshot_size, position

    async def record(self, dispatch_offset: Callable[[], int]) -> None:
        async with self.lock:
            position = dispatch_offset()  # before any state is captured
            table = self.table
            damaged = table.links.damaged
            if damaged:
                # A queue met damage while serving: the next start sets it aside and rebuilds
                # it from the commit log, reading every queue's files, not this one.
                if damaged != self.damaged_saved:
                    self.damaged_saved = frozenset(damaged)
                    await asyncio.to_thread(table.save_damaged_blocking)
                    await asyncio.to_thread(positions.remove_blocking, self.path)
                    self.broken = True  # (a snapshot, should the damage ever clear)
                return
            if self.broken or self.size > 2 * self.snapshot_size + COMPACT_SLACK:
                await self._snapshot(position)
                return
            queues = table.take_changed()
            if not queues:
                return
            items, count = await self._encode(queues, queues)
            data = positions.record(positions.CHANGES, position, items, count)
            await self._append(data)
            self.position = position
            self.records += 1

    async def _snapshot(self, position: int) -> None:
        table = self.table
        taken = table.take_changed()  # every queue is in the snapshot
        items, count = await self._encode(list(table.queues.values()), taken)
        try:
            size = await asyncio.to_thread(
                positions.write_snapshot_blocking,
                self.path,
                table.file_size,
                position,
                items,
                count,
            )
        except OSError as exc:
            await self._broke(exc)
            return
        self.size = self.snapshot_size = size
        self.position = position
        self.records += 1
        self.broken = False

    async def _append(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            await asyncio.to_thread(positions.append_blocking, self.path, data)
        except OSError as exc:
            await self._broke(exc)
            return
        self.size += len(data)

    async def _broke(self, exc: OSError) -> None:
        """A record that cannot be written must not leave a file that misses it: the file goes
        (a start then reads every queue), the next record tries a snapshot."""
        if not self.broken:
            log.warning(
                "cannot write consume queue positions %s (%s): a restart after a crash reads "
                "every queue until a snapshot is written",
                self.path,
                exc,
            )
        self.broken = True
        try:
            await asyncio.to_thread(positions.remove_blocking, self.path)
        except OSError:
            log.exception("cannot remove %s: its queue positions may be stale", self.path)

    async def _encode(
        self, queues: list[ConsumeQueue], taken: list[ConsumeQueue]
    ) -> tuple[bytes, int]:
        """The queues' states as of now, their tails written first (in a thread), encoded
        ``CHUNK`` at a time. When a tail cannot be written nothing is recorded: the queues
        ``taken`` from the changed set go back to it (a later record must carry them, or a
        restart would trust their older states past a newer D) and the error is raised."""
        table = self.table
        try:
            entries = await table.capture_written(queues)
        except BaseException:
            table.links.changed.update(taken)
            raise
        # (A record that then fails to be written breaks the journal: the next is a snapshot
        # of every queue, whatever these marks say.)
        for queue, (_, _, state) in zip(queues, entries, strict=True):
            queue.recorded(state)
        parts = []
        for start in range(0, len(entries), CHUNK):
            if start:
                await asyncio.sleep(0)
            parts.append(positions.encode_entries(entries[start : start + CHUNK])[0])
        return b"".join(parts), len(entries)

    async def remove_topics(self, topics: Sequence[str], remove: Callable[[], T]) -> T:
        """Record the topics' removal, then ``remove()`` them from the table, with no capture
        in between. The record keeps the last D: the queues that changed since are not in it."""
        async with self.lock:
            items, count = positions.encode_topics(topics)
            data = positions.record(positions.REMOVED, self.position, items, count)
            await self._append(data)
            return remove()
