"""The pop journal file: load (replay with a torn tail dropped), batched durable appends,
compaction by snapshot.

FILE: ``<store>/pop/journal`` (``StorePaths.pop_journal_file``): the magic ``WPOPJNL1`` then
records (layout in ``wharf.store.codec.layout``, codec in ``wharf.store.pop.records``).

LOAD (``load_journal_blocking``, in a thread at start): parse the file; a torn or damaged tail
is cut off (``os.truncate`` + fsync) and logged with the bytes dropped; a missing or empty file
is created with the magic; a leftover ``journal.tmp`` (a crash during compaction, before its
rename) is deleted, the journal it was to replace is still whole. A file without the magic
raises StoreError: the store does not start on a file it cannot read rather than forget acks.

APPENDS (``JournalWriter``): ``append(bytes)`` on the loop never blocks; ``await sync()``
returns once everything appended so far is written and ``fdatasync``'d. Bytes appended in one
event-loop iteration go out together: the first append schedules the write for the loop's next
iteration, one thread writes the whole buffer and syncs once; appends made while a sync is in
flight go in the next one (one fdatasync per burst, as the commit log's group commit). The
service answers a receive or an ack only after its record's ``sync()``.

FAILURES: a write or fdatasync that raises leaves the file's state unknown: the error is sticky
(``FlushFailedError``, or ``SyncDiskFullError`` for ENOSPC/EDQUOT) for every waiter and every
later ``sync()`` until the store restarts. Records whose sync failed may or may not be on disk:
a message whose POP was lost is simply handed out again (at least once); an ack whose ACK was
lost was never answered OK.

COMPACTION: after a sync, when the file has passed ``compact_bytes`` (16 MiB by default) and
twice the last snapshot, the next write is a snapshot instead of the buffered records: the
magic plus ``snapshot()`` (the whole state as records, built on the loop, so it includes every
record appended so far) written to ``journal.tmp``, fsync'd, renamed over ``journal``, the
directory fsync'd; appends continue on the new file. A compaction that fails (e.g. disk full)
is logged and the buffered records are appended to the old file instead; the next attempt
waits until the file grows another ``compact_bytes``. Replay cost is ~3 us per record, so a
16 MiB journal (~250k records) loads in well under a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from wharf.store.codec.layout import POP_JOURNAL_MAGIC
from wharf.store.errors import (
    FlushFailedError,
    StoreError,
    StoreShutDownError,
    SyncDiskFullError,
    is_disk_full,
)
from wharf.store.paths import write_bytes_atomic_blocking
from wharf.store.pop.records import PopRecord, parse_journal

log = logging.getLogger(__name__)

DEFAULT_COMPACT_BYTES = 16 << 20


def load_journal_blocking(path: Path) -> tuple[list[PopRecord], int]:
    """The journal's records and its valid size in bytes, after cutting a torn tail. Creates
    the directory and an empty journal when there is none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = b""
    try:
        records, valid_end = parse_journal(data)
    except ValueError as exc:
        raise StoreError(
            f"pop journal {path}: {exc}; move the file away to start without pop state "
            "(every un-acked and acked pop message would be delivered again)"
        ) from None
    if valid_end < len(POP_JOURNAL_MAGIC):
        write_bytes_atomic_blocking(path, POP_JOURNAL_MAGIC)
        return records, len(POP_JOURNAL_MAGIC)
    if valid_end < len(data):
        log.warning(
            "pop journal %s: dropped %d bytes after the last whole record at %d (a torn tail: "
            "those receives/acks were never answered)",
            path,
            len(data) - valid_end,
            valid_end,
        )
        os.truncate(path, valid_end)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return records, valid_end


def _write_all_blocking(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class JournalWriter:
    """Appends to an open journal (see the module docstring). Loop-thread API."""

    def __init__(
        self,
        path: Path,
        size: int,
        snapshot: Callable[[], bytes],
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
        executor: Executor | None = None,
    ) -> None:
        self.path = path
        self.size = size  # bytes in the file
        self._snapshot = snapshot
        self.compact_bytes = compact_bytes
        self._executor = executor
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._pending = bytearray()
        self._appended = 0  # bytes ever appended (a sequence, not a file position)
        self._durable = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._in_flight: asyncio.Future[tuple[int, bool]] | None = None
        self._kick_scheduled = False
        self._error: StoreError | None = None
        self._closed = False
        self._compact_after = max(compact_bytes, 2 * size)
        self.syncs = 0
        self.compactions = 0
        self.failures = 0

    def append(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise StoreShutDownError("the pop journal is closed")
        self._pending += data
        self._appended += len(data)
        self._schedule()

    async def sync(self) -> None:
        """Return once every byte appended so far is durable; raises the sticky error."""
        if self._error is not None:
            raise self._error
        target = self._appended
        if self._durable >= target:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        self._schedule()
        await future

    async def close(self) -> None:
        """Write and sync what is buffered, then close the file."""
        if self._closed:
            return
        self._closed = True  # appends refused from now on; what is buffered still goes out
        if self._error is None and self._appended > self._durable:
            with contextlib.suppress(StoreError):  # already logged and sticky
                await self.sync()
        while self._in_flight is not None:
            await asyncio.wait([self._in_flight])
        os.close(self._fd)

    # --- the write thread ---------------------------------------------------------------------
    def _schedule(self) -> None:
        if self._kick_scheduled or self._in_flight is not None:
            return
        self._kick_scheduled = True
        asyncio.get_running_loop().call_soon(self._kick)

    def _kick(self) -> None:
        self._kick_scheduled = False
        if self._in_flight is not None or self._error is not None or not self._pending:
            return
        loop = asyncio.get_running_loop()
        data, self._pending = self._pending, bytearray()
        target = self._appended
        snapshot: bytes | None = None
        if self.size + len(data) >= self._compact_after:
            snapshot = POP_JOURNAL_MAGIC + self._snapshot()
        in_flight = loop.run_in_executor(self._executor, self._write_blocking, data, snapshot)
        self._in_flight = in_flight
        attempted = snapshot is not None
        in_flight.add_done_callback(lambda done: self._completed(done, target, attempted))

    def _write_blocking(self, data: bytearray, snapshot: bytes | None) -> tuple[int, bool]:
        """Thread: (new file size, compacted)."""
        if snapshot is not None:
            try:
                write_bytes_atomic_blocking(self.path, snapshot)
                new_fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                old_fd, self._fd = self._fd, new_fd
                os.close(old_fd)
                return len(snapshot), True
            except OSError as exc:
                log.error("pop journal compaction failed (%s); appending instead", exc)
        _write_all_blocking(self._fd, data)
        os.fdatasync(self._fd)
        return self.size + len(data), False

    def _completed(
        self, done: asyncio.Future[tuple[int, bool]], target: int, attempted: bool
    ) -> None:
        self._in_flight = None
        exc = done.exception()
        if exc is not None:
            self._fail(exc)
            return
        size, compacted = done.result()
        self.syncs += 1
        self.size = size
        if compacted:
            self.compactions += 1
            self._compact_after = max(self.compact_bytes, 2 * size)
        elif attempted:  # failed: try again after another compact_bytes of growth
            self._compact_after = size + self.compact_bytes
        self._durable = target
        waiting = []
        for wanted, future in self._waiters:
            if future.done():
                continue
            if wanted <= target:
                future.set_result(None)
            else:
                waiting.append((wanted, future))
        self._waiters = waiting
        if self._pending:
            self._schedule()

    def _fail(self, exc: BaseException) -> None:
        self.failures += 1
        if is_disk_full(exc):
            error: StoreError = SyncDiskFullError(
                f"disk full: pop journal write/sync failed ({exc}); pop, ack and "
                "change-invisible are refused until the broker restarts"
            )
            log.error("%s", error)
        else:
            error = FlushFailedError(
                f"pop journal write/sync failed ({exc!r}); pop, ack and change-invisible are "
                "refused until the broker restarts"
            )
            log.error("%s", error, exc_info=exc)
        self._error = error
        waiters, self._waiters = self._waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_exception(error)
