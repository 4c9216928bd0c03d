"""MetadataPersister: the metadata tables (topics, groups, consumer offsets) written to their
files, a named part of the broker with start, stop and health (``store.service.Service``).

Every ``flushConsumerOffsetInterval`` (5 s), or right after ``wakeup()`` (a topic or group
changed: rare, and costly to forget in a crash; offsets change all the time and wait), runs at
least 50 ms apart so a burst of auto-creates is one write. Each dirty table is captured on the
loop (cheap) and serialized and written in a thread (``persist.write_text_atomic_blocking``).
A failed write keeps the table dirty for the next round; a lasting condition (a full disk, the
open-file table) is one log line per episode.

``durable()``: what an admin answer waits for. A topic created, changed or deleted (CreateTopic,
UpdateTopic, mqadmin's updateTopic, Kafka's CreateTopics ...) is acknowledged once a persist round
that began after the change has written it (journal record fsynced): before, the answer went out
first and a kill -9 within the ~50 ms coalescing window lost an acknowledged topic whose records
survived (a Kafka producer then auto-created it anew with 8 partitions). A round whose write
fails answers its waiters with the error (the table stays dirty and is retried).

``table_durable(table, sync)``: what a Kafka OffsetCommit's answer waits for, one table only,
without the round's 50 ms coalescing (a commit is on the consumer's critical path). A group
commit: the callers that arrive while a write is in flight share the next one, so a storm of
commits is one write (and one fsync with ``sync``) per ~write time, not one per commit. The
write runs in a thread (never on the loop); it takes the journal's lock, so a periodic round's
write of the same change, begun before, is finished when it returns. ``sync`` False (ASYNC_FLUSH):
written (the page cache survives a kill -9), not fsynced.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from wharf.broker.errors import UnavailableError
from wharf.broker.meta.persist import (
    PendingWrite,
    load_json_blocking,
    write_text_atomic_blocking,
)
from wharf.store.errors import is_disk_full
from wharf.store.service import Service

log = logging.getLogger("broker")

COALESCE_S = 0.05  # a burst of auto-creates becomes one write


class Table(Protocol):
    """What the persister needs of a metadata manager (TopicConfigManager ...)."""

    FILE_NAME: str
    dirty: bool

    def capture(self) -> str | PendingWrite: ...

    def load(self, data: Any) -> None: ...


class MetadataPersister(Service):
    def __init__(self, directory: Path, tables: Sequence[Table], interval_s: float) -> None:
        super().__init__("MetadataPersister", interval_s, min_gap_s=COALESCE_S)
        self.directory = directory
        self.tables = tuple(tables)
        self.failing: set[str] = set()  # files whose last write failed
        self._waiters: list[asyncio.Future[None]] = []  # durable() callers of the next round
        # table_durable(): per file, the callers the next write answers and the writer task
        self._table_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._table_writers: dict[str, asyncio.Task[None]] = {}
        self.table_writes = 0  # table_durable's writes (a group commit answers many callers)

    def load_blocking(self) -> None:
        for table in self.tables:
            table.load(load_json_blocking(self.directory / table.FILE_NAME))

    async def run_once(self) -> None:
        await self.persist()

    async def durable(self) -> None:
        """Return once every table change made before this call is on disk; raise
        ``MetadataNotDurable`` if that round's write failed."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self.running:
            self.wakeup()
        else:  # not started, or stopped: nobody else would write it
            await self.persist()
        await waiter

    async def table_durable(self, table: Table, sync: bool) -> None:
        """Return once ``table``'s changes made before this call are in its files (fsynced
        with ``sync``); raise ``MetadataNotDurable`` if the write failed."""
        name = table.FILE_NAME
        waiter = asyncio.get_running_loop().create_future()
        self._table_waiters.setdefault(name, []).append(waiter)
        writer = self._table_writers.get(name)
        if writer is None or writer.done():
            self._table_writers[name] = asyncio.create_task(self._write_table(table, sync))
        await waiter

    async def _write_table(self, table: Table, sync: bool) -> None:
        """Write ``table`` for the waiting callers, again while more came meanwhile."""
        name = table.FILE_NAME
        while waiters := self._table_waiters.pop(name, None):
            # Captured even when not dirty: a round may have captured the change and not yet
            # written it; the write below waits for it under the journal's lock.
            table.dirty = False
            text = table.capture()
            error: Exception | None = None
            try:
                await asyncio.to_thread(
                    write_text_atomic_blocking, self.directory / name, text, sync
                )
                self.table_writes += 1
            except OSError as exc:
                table.dirty = True  # the next round retries it
                error = MetadataNotDurable(exc)
                log.error("cannot persist %s: %s", name, exc)
            except BaseException as exc:  # cancelled (stop): the callers must not hang
                _answer(waiters, exc if isinstance(exc, Exception) else MetadataNotDurable(
                    OSError("the broker is stopping")))  # fmt: skip
                raise
            _answer(waiters, error)

    async def persist(self) -> None:
        """Write the dirty tables now (snapshot on the loop, file I/O in a thread)."""
        waiters, self._waiters = self._waiters, []  # their changes are captured below
        failed: OSError | None = None
        try:
            failed = await self._write_dirty()
        except BaseException:
            self._waiters[:0] = waiters  # answered by the next round (or on_stop's)
            raise
        _answer(waiters, None if failed is None else MetadataNotDurable(failed))

    async def _write_dirty(self) -> OSError | None:
        """One round over the dirty tables; the first write error, if any."""
        failed: OSError | None = None
        for table in self.tables:
            if not table.dirty:
                continue
            table.dirty = False
            text = table.capture()  # cheap; serialized and written in the thread
            name = table.FILE_NAME
            try:
                await asyncio.to_thread(write_text_atomic_blocking, self.directory / name, text)
            except OSError as exc:
                table.dirty = True  # retried next round
                failed = failed or exc
                if name in self.failing:
                    continue  # said once for this episode; a line when it works again
                self.failing.add(name)
                if is_disk_full(exc) or exc.errno in (errno.EMFILE, errno.ENFILE):
                    # A full disk or fd table lasts: one line, no traceback, retried each round.
                    log.error("cannot persist %s: %s; retrying", name, exc)
                else:
                    log.exception("cannot persist %s", name)
            else:
                if name in self.failing:
                    self.failing.discard(name)
                    log.info("persisted %s again", name)
        return failed

    async def on_stop(self) -> None:
        if self._waiters:  # stop() came between a durable() and its round: one more round
            await self.persist()

    def health(self) -> dict[str, object]:
        return {"name": self.name, "failing_files": sorted(self.failing)}


class MetadataNotDurable(UnavailableError):
    """The change is made in memory but its file could not be written (retried each round)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(
            f"the change is applied but not yet on disk ({cause}); the broker retries every "
            "round: free disk space or descriptors, then check `wharf topic get`"
        )


def _answer(waiters: list[asyncio.Future[None]], error: Exception | None) -> None:
    for waiter in waiters:
        if waiter.done():
            continue
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)
