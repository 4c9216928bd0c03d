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
iteration, which ``os.write``s the whole buffer (a few KB into the page cache, as the commit
log's appends copy into its mmap on the loop) and asks a sync engine for one fdatasync; appends
made while a sync runs go in the next one (one fdatasync per burst, the commit log's group
commit). The engine is the commit log's (``wharf.store.log.sync_engine``): the compiled
GIL-free thread of ``store/fast/_syncer.c``, which the loop hears through an eventfd, or the
Python thread parked on a Condition when that module is not built, speedups are off, or
``os.fdatasync`` was replaced at the writer's first write (the seam tests slow or break syncs
through). py-spy ``--gil`` under ``tests.bench.v2_floor`` had the thread-pool hop per sync this
replaced (``ThreadPoolExecutor.submit``, future chaining) at 4-12 % of the broker's Python
samples in ReceiveMessage / AckMessage / ChangeInvisibleDuration. The service answers a receive or an ack only after its record's ``sync()``.

FAILURES: a write or fdatasync that raises leaves the file's state unknown: the error is sticky
(``FlushFailedError``, or ``SyncDiskFullError`` for ENOSPC/EDQUOT) for every waiter and every
later ``sync()`` until the store restarts. Records whose sync failed may or may not be on disk:
a message whose POP was lost is simply handed out again (at least once); an ack whose ACK was
lost was never answered OK.

COMPACTION: when the file would pass ``compact_bytes`` (16 MiB by default) and twice the last
snapshot, the next write is a snapshot instead of the buffered records: once the engine is idle
(no sync holds the old file), the magic plus ``snapshot()`` (the whole state as records, built
on the loop, so it includes every record appended so far) is written to ``journal.tmp`` in a
thread, fsync'd, renamed over ``journal``, the directory fsync'd; appends continue on the new
file. A compaction that fails (e.g. disk full) is logged and the buffered records are appended
to the old file instead; the next attempt waits until the file grows another
``compact_bytes``. Replay cost is ~3 us per record, so a
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

from wharf.store import fast
from wharf.store.codec.layout import POP_JOURNAL_MAGIC
from wharf.store.errors import (
    FlushFailedError,
    StoreError,
    StoreShutDownError,
    SyncDiskFullError,
    is_disk_full,
)
from wharf.store.log.sync_engine import NativeSyncEngine, SyncEngine, SyncPlan, ThreadSyncEngine
from wharf.store.paths import make_dirs_blocking, write_bytes_atomic_blocking
from wharf.store.pop.records import PopRecord, parse_journal

log = logging.getLogger(__name__)

DEFAULT_COMPACT_BYTES = 16 << 20
# The real fdatasync, to tell when a test replaced it (then the Python engine runs: the compiled
# thread calls the C function directly).
_OS_FDATASYNC = os.fdatasync


def load_journal_blocking(path: Path) -> tuple[list[PopRecord], int]:
    """The journal's records and its valid size in bytes, after cutting a torn tail. Creates
    the directory and an empty journal when there is none."""
    make_dirs_blocking(path.parent)
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
        # Positions in the sequence of bytes ever appended (not file positions: a compaction
        # rewrites the file): appended >= written (os.write done) >= durable (fdatasync'd).
        self._appended = 0
        self._written = 0
        self._durable = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._engine: SyncEngine | None = None  # made and started by the first write
        self._compaction: asyncio.Task[None] | None = None
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
        if self._compaction is not None:
            await asyncio.wait([self._compaction])
        if self._engine is not None:
            await self._engine.wait_idle()
            self._engine.close()
        os.close(self._fd)

    # --- writes and syncs (loop) -----------------------------------------------------------
    def _make_engine(self) -> SyncEngine:
        module = fast.load("_syncer")
        if module is None or os.fdatasync is not _OS_FDATASYNC:
            return ThreadSyncEngine(self._sync_blocking, self._durable_position)
        return NativeSyncEngine(module.Syncer, self._plan, _same, self._durable_position)

    def _durable_position(self) -> int:
        return self._durable

    def _plan(self, max_fds: int) -> SyncPlan:
        return SyncPlan((self._fd,), self._written, self._written)

    def _sync_blocking(self) -> int:
        """ThreadSyncEngine's thread: everything written before the fdatasync is durable after
        it (the fd does not change while the engine is busy: compaction waits for idle)."""
        written = self._written
        os.fdatasync(self._fd)
        return written

    def _schedule(self) -> None:
        if self._kick_scheduled:
            return
        self._kick_scheduled = True
        asyncio.get_running_loop().call_soon(self._kick)

    def _kick(self) -> None:
        self._kick_scheduled = False
        if self._compaction is not None or self._error is not None or not self._pending:
            return
        if self.size + len(self._pending) >= self._compact_after:
            self._compaction = asyncio.get_running_loop().create_task(self._compact())
            return
        data, self._pending = self._pending, bytearray()
        self._write(data)

    def _write(self, data: bytearray) -> None:
        """os.write the bytes (page cache; fdatasync'd by the engine)."""
        try:
            _write_all_blocking(self._fd, data)
        except OSError as exc:
            self._fail(exc)
            return
        self.size += len(data)
        self._written += len(data)
        if self._engine is None:
            self._engine = self._make_engine()
            self._engine.start(self._served, self._fail)
        self._engine.request(self._written)

    def _served(self, flushed: int, seconds: float, nbytes: int) -> None:
        self.syncs += 1
        self._reached(flushed)

    def _reached(self, durable: int) -> None:
        if durable <= self._durable:
            return
        self._durable = durable
        waiting = []
        for wanted, future in self._waiters:
            if future.done():
                continue
            if wanted <= durable:
                future.set_result(None)
            else:
                waiting.append((wanted, future))
        self._waiters = waiting

    async def _compact(self) -> None:
        """Replace the file by a snapshot of the state (see COMPACTION); a failure appends the
        buffered records instead."""
        try:
            if self._engine is not None:
                await self._engine.wait_idle()  # no sync holds the old fd
            if self._error is not None:
                return
            data, self._pending = self._pending, bytearray()
            target = self._appended
            snapshot = POP_JOURNAL_MAGIC + self._snapshot()
            loop = asyncio.get_running_loop()
            try:
                new_fd = await loop.run_in_executor(
                    self._executor, _replace_blocking, self.path, snapshot
                )
            except OSError as exc:
                log.error("pop journal compaction failed (%s); appending instead", exc)
                self._write(data)
                self._compact_after = self.size + self.compact_bytes
                return
            old_fd, self._fd = self._fd, new_fd
            os.close(old_fd)
            self.size = len(snapshot)
            self._written = target
            self.syncs += 1
            self.compactions += 1
            self._compact_after = max(self.compact_bytes, 2 * self.size)
            self._reached(target)
        except Exception as exc:  # the snapshot or the fd swap: state unknown
            self._fail(exc)
        finally:
            self._compaction = None
            if self._pending:
                self._schedule()

    def _fail(self, exc: BaseException) -> None:
        if self._error is not None:
            return
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


def _same(token: int) -> int:
    return token


def _replace_blocking(path: Path, snapshot: bytes) -> int:
    """Thread: the snapshot written atomically over the journal; its new fd for appends."""
    write_bytes_atomic_blocking(path, snapshot)
    return os.open(path, os.O_WRONLY | os.O_APPEND)
