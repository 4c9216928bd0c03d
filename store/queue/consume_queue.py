"""ConsumeQueue: the per topic/queue index of 20-byte units into the CommitLog (RocketMQ's
ConsumeQueue.java).

Layout (``wharf.store.codec.layout.CQ_STORE_UNIT_SIZE``)::

    commitLogOffset (8) | size (4) | tagsCode (8)        big-endian

Files hold ``mapped_file_size_consume_queue`` bytes (300,000 units) and are named by their start
BYTE offset (20 digits) under ``consumequeue/<topic>/<queueId>/``; the logical (queue) offset of a
unit is its index, so unit ``n`` lives at byte ``n * 20``. Files are created sparse (ftruncate);
a unit whose size is 0 marks the end of written data, as RocketMQ's recovery assumes.

Units are written with ``pwrite`` and read with ``pread``, not through a map. Measured here
(ext4 on the VM's disk, 200 files, ``store.queue`` history in CHANGELOG.md): the first store
into a page of a shared map costs 1.5-3.9 ms (the page fault allocates and journals the block),
and the first store into a page after each fdatasync ~23 us (the page is write-protected again
for the next write-back), where ``pwrite`` costs 2.5-4 us in every case (24 us into a hole).
A queue crosses a page every 204 units and is synced every second while it is busy, so with
many queues maps cost ~15 us a message plus a fault per queue per second; a warm map store
(0.4 us) or map read (0.1 us against 2.2 us for ``pread``) never wins that back. Without maps a
queue file needs no map count either: ``QueueFileCache`` bounds the descriptors, whatever the
number of queues.

Each file is posix_fallocate'd ahead of the writer (``ALLOCATE_AHEAD``, then geometrically more
up to 16 blocks), before units are written, so a write into it never fails half-way; when the
allocation fails (ENOSPC/EDQUOT) the append raises DiskFullError having written nothing, the
write position stays, and dispatch retries the same units later (none skipped; units already
present are skipped by offset). Allocating each whole file at creation would take a queue's 6
MB (300,000 units x 20 B) on disk at once: 4.8 GB for 100 topics x 8 queues, where sparse files
cost what is written.

Tails: a queue gathers its newest units in memory (``_tail``, at most ``TAIL_BYTES``) and writes
them with one ``pwrite`` when they reach it. At 256 topics a dispatch chunk brings ~16 units
(320 B) a queue, and one ``pwrite`` each was ~10 % of the broker's CPU a message (cProfile of
1,000 requests of 32 batches x 16). Readers see a tail as if written; every tail together stays
under ``QueueLinks.tail_budget`` (a queue beyond it writes through). A tail is not in the page
cache, so whatever vouches for units first writes the tails holding them: the thorough queue
flush every tail after it captured the dispatch position and before it syncs
(store/services/queue_flush.py), the positions journal a queue's before recording it; both
capture them on the loop (``capture``) and write them in a thread (``write_tails_blocking``),
the tail readable until ``tail_written`` trims it (thousands of spills on the loop held it for
seconds). The periodic flush's few queues and truncation spill on the loop. A process crash
loses the tails: recovery without a positions journal re-dispatches from the checkpoint's
logics offset (store/recovery.py), not the queues' end.

Why not ``wharf.store.log.mapped_file.MappedFile``: that class is shaped for the CommitLog
(write buffer, committed position, fallocate'd segments). A queue file needs none of it.

Power loss: a new file's or directory's name is durable only after an fsync of its directory:
each creation adds the directories to the table's ``DirectorySyncs``, which the thorough queue
flush drains before the checkpoint vouches for the units (store/services/queue_flush.py). The
newest files that come back short and all zeros (sizes never synced) are removed at load.

Ownership: one event loop mutates a ConsumeQueue (append, truncate) and uses the descriptors of
the cache. Files are created in a thread ahead of the writer (``missing_files`` ->
``create_files_blocking`` -> ``adopt_files``, driven by the ReputService); ``flush_blocking``
(a descriptor of its own) and deletions run in a thread while the facade's maintenance lock
keeps them apart.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import starmap
from typing import TYPE_CHECKING, NamedTuple

from wharf.store.codec.layout import CQ_STORE_UNIT_SIZE, CQ_UNIT, segment_file_name
from wharf.store.config import CONSUME_QUEUE_TAIL_BUDGET
from wharf.store.errors import DamagedQueueError, DiskFullError, disk_full_error, is_disk_full
from wharf.store.fast import load
from wharf.store.paths import (
    DirectorySyncs,
    create_file_blocking,
    dir_mode,
    fsync_dir_blocking,
)
from wharf.store.queue.file_cache import MIN_CAPACITY, QueueFileCache

log = logging.getLogger(__name__)

# A queue file is allocated this far ahead of its writer at first: one block, what any write
# into it takes on disk anyway, so 100,000 queues of one message take 400 MB, not the 6.4 GB of
# the 64 KiB this was while units were stored through maps. Then ahead by what it holds already,
# up to ALLOCATE_GROWTH blocks (geometric, as file systems grow extents): a busy queue pays one
# posix_fallocate (~8 us) per 3,276 units instead of per 204 (~0.6 us a dispatch run of 16
# units at 256 topics), and a file never holds more than 64 KiB or its written size
# unused.
ALLOCATE_AHEAD = 4096
ALLOCATE_GROWTH = 16

# A tail is written once it holds this much (one page: a ``pwrite`` of 4 KiB costs what one of
# 320 B does), and all tails of a store hold at most TAIL_BUDGET (``consumeQueueTailBudget``,
# store/config.py; the thorough queue flush and the positions journal write them, in a thread).
TAIL_BYTES = 4096
TAIL_BUDGET = CONSUME_QUEUE_TAIL_BUDGET

UNIT = CQ_UNIT

# RocketMQ's fillPreBlank unit: offset 0, size Integer.MAX_VALUE. It keeps logical offsets
# stable when a queue restarts mid-file; readers skip it.
BLANK_UNIT_SIZE = 0x7FFFFFFF
_BLANK_UNIT = UNIT.pack(0, BLANK_UNIT_SIZE, 0)

# ``append_runs``, the compiled loop of ``ConsumeQueue.append_next`` (store/fast/_log_scan.c);
# None: dispatch calls ``append_next`` run by run.
_compiled = load("_log_scan")


class _QueueState:
    """What ``append_runs`` reads and moves of a queue, in pure Python; with the compiled
    module ConsumeQueue derives from its ``QueueState`` instead, which holds these in the
    object (a run then reads no int object of its own: ~12 cache misses fewer a run at 256
    topics, store/fast/_log_scan.c). Same names, same meaning."""

    __slots__ = ("_file_pos", "_tail", "_write_pos", "files", "max_physical_offset")

    files: list[ConsumeQueueFile]
    _tail: bytearray | None
    _write_pos: int
    _file_pos: int
    max_physical_offset: int


class _QueueFileState:
    """ConsumeQueueFile's fields that ``append_runs`` reads (see ``_QueueState``)."""

    __slots__ = ("allocated", "fd", "size", "start")

    start: int
    size: int
    allocated: int
    fd: int


if TYPE_CHECKING or _compiled is None:
    _QueueBase = _QueueState
    _QueueFileBase = _QueueFileState
else:
    _QueueBase = _compiled.QueueState
    _QueueFileBase = _compiled.QueueFileState


# A tuple as decoded from one unit: (commit log offset, record size, tags code).
Unit = tuple[int, int, int]
# Returns the store timestamp of the record at (offset, size), or None if it is gone.
StoreTimeReader = Callable[[int, int], "int | None"]


class ConsumeQueueFile(_QueueFileBase):
    """One fixed-size ConsumeQueue file, open only while ``QueueFileCache`` holds it."""

    __slots__ = ("path",)

    def __init__(self, path: str, start: int, size: int) -> None:
        self.path = path
        self.start = start  # byte offset of the first unit in the whole queue
        self.size = size
        # Bytes from the start known allocated: none of a new file; a loaded one's first write
        # allocates from 0 (cheap where it is allocated already).
        self.allocated = 0
        self.fd = -1  # set and cleared by the cache only

    @classmethod
    def create_blocking(cls, path: str, start: int, size: int) -> ConsumeQueueFile:
        """Create the file (sparse: zeros read back as "no unit"); it is opened on first use."""
        try:
            fd = create_file_blocking(path, os.O_RDWR)
        except OSError as exc:
            if is_disk_full(exc):  # a new directory entry (or inode) needs space too
                raise disk_full_error(exc, f"creating consume queue file {path}") from exc
            raise
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)
        finally:
            os.close(fd)
        return cls(path, start, size)

    @property
    def end(self) -> int:
        return self.start + self.size

    def open_now(self) -> int:
        """Open the file (the cache calls this)."""
        self.fd = os.open(self.path, os.O_RDWR)
        return self.fd

    def close_now(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def allocate(self, fd: int, end: int) -> None:
        """Back the file up to ``end`` (and ``ALLOCATE_AHEAD`` more) before units are written
        into it, so a write never fails half-way; DiskFullError (nothing written) when the
        filesystem cannot."""
        ahead = ALLOCATE_AHEAD
        if ahead:  # see ALLOCATE_GROWTH
            ahead *= min(ALLOCATE_GROWTH, max(1, self.allocated // ahead))
        stop = min(self.size, end + ahead)
        try:
            os.posix_fallocate(fd, self.allocated, stop - self.allocated)
        except OSError as exc:
            if is_disk_full(exc):
                what = f"allocating {stop - self.allocated} bytes of consume queue file {self.path}"
                raise disk_full_error(exc, what) from exc
            raise
        self.allocated = stop

    def flush_blocking(self) -> None:
        """fdatasync through a descriptor of its own (any thread): Linux syncs the file's
        dirty pages whichever descriptor asks, and the loop may close the cached one (and its
        number be reused) meanwhile. A file deleted meanwhile (topic deleted, retention) has
        nothing left to sync."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)


@dataclass(eq=False)
class QueueLinks:
    """What the queues of one table share with it (``ConsumeQueueTable.links``), one value
    instead of a parameter each: the queues add themselves to ``dirty`` (unflushed units: the
    flush visits those, not every queue) and to ``changed`` (state moved since the positions
    journal last recorded it: ``store.queue.positions``), and the directories whose new
    entries the thorough flush must fsync to ``dir_syncs``. A queue of its own gets a private
    one."""

    dirty: set[ConsumeQueue] = field(default_factory=set)
    changed: set[ConsumeQueue] = field(default_factory=set)
    dir_syncs: DirectorySyncs = field(default_factory=DirectorySyncs)
    # The queues holding units in memory not yet written (see "Tails" in the module
    # docstring), and their bytes in all, kept under ``tail_budget``.
    tails: set[ConsumeQueue] = field(default_factory=set)
    tail_bytes: int = 0
    tail_budget: int = TAIL_BUDGET
    # Queues whose files failed a read while serving (``DamagedQueueError``): the positions
    # journal stops, so the next start reads every queue's files and rebuilds these.
    damaged: set[ConsumeQueue] = field(default_factory=set)


class ConsumeQueue(_QueueBase):
    __slots__ = (
        "_cache",
        "_flushed_pos",
        "_fresh",
        "_links",
        "_min_physical",
        "_min_pos",
        "_recorded_pos",
        "directory",
        "file_size",
        "queue_id",
        "sync_creations",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        directory: str | os.PathLike[str],
        file_size: int,
        cache: QueueFileCache | None = None,
        links: QueueLinks | None = None,
    ) -> None:
        if file_size <= 0 or file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(
                f"mapped_file_size_consume_queue must be a positive multiple of "
                f"{CQ_STORE_UNIT_SIZE}, got {file_size}"
            )
        self.topic = topic
        self.queue_id = queue_id
        self.directory = os.fspath(directory)  # a str: 100,000 Path objects cost ~1 s to build
        self.file_size = file_size
        # Shared by every queue of a store (ConsumeQueueTable); a queue on its own gets one.
        self._cache = cache if cache is not None else QueueFileCache(MIN_CAPACITY)
        # The table's dirty and changed sets and directories to sync (QueueLinks): every
        # file (and directory) this queue creates is added to dir_syncs, which the thorough
        # queue flush fsyncs before the checkpoint vouches for the units.
        self._links = links if links is not None else QueueLinks()
        self.files: list[ConsumeQueueFile] = []
        self._write_pos = 0  # absolute byte offset after the last unit (its tail's included)
        # After the last unit in the files: _write_pos less the tail. Set on the loop after a
        # write, so a flush in a thread never syncs past what the files hold.
        self._file_pos = 0
        self._tail: bytearray | None = None  # units past _file_pos, in memory (module docs)
        self._min_pos = 0  # absolute byte offset of the first live unit
        self._flushed_pos = 0
        self.max_physical_offset = 0  # end (offset + size) of the newest unit's record
        # Commit log offset of the unit at min_offset (-1: not known yet): retention passes
        # skip a queue whose first unit is still in the log without mapping its file.
        self._min_physical = -1
        self.sync_creations = 0  # files created on the calling thread (see _file_for_write)
        self._fresh = False  # files adopted before the first unit: start at the first offset
        # _write_pos as the positions journal last recorded it (-1: never): a queue still dirty
        # whose appends have not moved it since is not recorded again (``moved_since_record``).
        self._recorded_pos = -1

    # --- load ----------------------------------------------------------------------------
    @classmethod
    def load_blocking(
        cls,
        topic: str,
        queue_id: int,
        directory: str | os.PathLike[str],
        file_size: int,
        cache: QueueFileCache | None = None,
        links: QueueLinks | None = None,
    ) -> ConsumeQueue:
        """Find the files and the end of written data (first zero-size unit of the last file)
        with ``pread`` and one descriptor at a time, closed before returning: a restart after a
        crash reads one 4 KiB block of a queue holding fewer than 204 units in its last file,
        ~20 units more of a fuller one. Files of the wrong size are refused: the layout would
        be ambiguous."""
        queue = cls(topic, queue_id, directory, file_size, cache, links)
        entries = sorted(
            (entry for entry in os.scandir(directory) if entry.name.isdigit()),
            key=lambda entry: int(entry.name),
        )
        while (
            entries
            and entries[-1].stat().st_size < file_size
            and _all_zero_blocking(entries[-1].path)
        ):
            # A crash between creating the newest file(s) and sizing them, or a power cut
            # after their names were made durable but not their size (created ahead of the
            # writer, never synced): they hold nothing.
            log.warning("removing unfinished consume queue file %s", entries[-1].path)
            os.unlink(entries.pop().path)
        for entry in entries:
            actual = entry.stat().st_size
            if actual != file_size:
                raise DamagedQueueError(
                    f"consume queue file {entry.path} has {actual} bytes, "
                    f"expected {file_size} (mapped_file_size_consume_queue changed?)"
                )
            start = int(entry.name)
            if queue.files and start != queue.files[-1].end:
                raise DamagedQueueError(
                    f"consume queue {queue.directory} has a gap: {queue.files[-1].path} is "
                    f"followed by {entry.path}"
                )
            queue.files.append(ConsumeQueueFile(entry.path, start, file_size))
        if queue.files:
            queue._min_pos = queue.files[0].start
            used, end, first = _scan_blocking(queue.files[-1])
            while used == 0 and len(queue.files) > 1:
                # Created ahead of the writer and never written: holds nothing.
                os.unlink(queue.files.pop().path)
                used, end, first = _scan_blocking(queue.files[-1])
            last = queue.files[-1]
            queue._write_pos = queue._file_pos = last.start + used
            queue._flushed_pos = queue._write_pos
            if len(queue.files) == 1:
                queue._min_physical = first
            for file in reversed(queue.files[:-1]):  # blanks only in the last file: look further
                if end:
                    break
                end = _physical_end_blocking(file, file.size)
            queue.max_physical_offset = end
        return queue

    @classmethod
    def from_summary(
        cls,
        topic: str,
        queue_id: int,
        directory: str,
        file_size: int,
        cache: QueueFileCache,
        entry: QueueSummary,
        links: QueueLinks | None = None,
    ) -> ConsumeQueue:
        """A queue as the positions journal recorded it (``store.queue.positions``): nothing
        is opened."""
        queue = cls(topic, queue_id, directory, file_size, cache, links)
        first, count, min_pos, write_pos, max_physical, min_physical = entry
        for start in range(first, first + count * file_size, file_size):
            path = os.path.join(directory, segment_file_name(start))
            queue.files.append(ConsumeQueueFile(path, start, file_size))
        queue._min_pos = min_pos
        queue._write_pos = queue._file_pos = queue._flushed_pos = write_pos
        queue.max_physical_offset = max_physical
        queue._min_physical = min_physical
        return queue

    def summary(self) -> QueueSummary:
        """What ``from_summary`` needs to rebuild this queue: its tail is written first (on the
        loop; a thread calls this only where no tail can be: recovery, the clean shutdown's
        snapshot after the last flush). ``capture`` is the same without the write."""
        self.spill()
        return self._state()

    def capture(self) -> tuple[QueueSummary, TailWrite | None]:
        """(loop) ``summary`` as of now and the tail it counts, to write elsewhere: once
        ``write_tails_blocking`` has written it, the files hold every unit the summary names.
        The tail stays readable meanwhile (``tail_written`` trims it after)."""
        tail = self._tail
        if not tail:
            return self._state(), None
        file = self._file_at(self._file_pos)  # a tail lies in one file, allocated (``_write``)
        assert file is not None
        at = self._file_pos - file.start
        return self._state(), TailWrite(self, tail, self._file_pos, bytes(tail), file.path, at)

    def tail_written(self, write: TailWrite, error: Exception | None) -> Exception | None:
        """(loop) After ``write_tails_blocking``: ``write`` is in its file (``error`` None) and
        its units leave the tail; or it failed, and ``error`` is still owed. Neither when the
        loop wrote those units itself meanwhile (a spill, a write-through or a truncation moved
        ``_file_pos``: the same bytes at the same place) or closed the queue. A file gone from
        under the queue is damage: its spill meets it (logged once, the tail dropped)."""
        tail = self._tail
        n = len(write.data)
        if tail is not write.tail or self._file_pos != write.start or len(tail) < n:
            return None
        if error is not None:
            if isinstance(error, FileNotFoundError):
                self.spill()
                return None
            return error
        del tail[:n]  # (bytearray drops a prefix by moving its start: no copy)
        self._file_pos += n
        links = self._links
        links.tail_bytes -= n
        if not tail:
            self._tail = None
            links.tails.discard(self)
        return None

    def _state(self) -> QueueSummary:
        first = self.files[0].start if self.files else self._write_pos
        return (
            first,
            len(self.files),
            self._min_pos,
            self._write_pos,
            self.max_physical_offset,
            self._min_physical,
        )

    # --- offsets -------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self._min_pos // CQ_STORE_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """The next logical offset to be written (RocketMQ's getMaxOffsetInQueue)."""
        return self._write_pos // CQ_STORE_UNIT_SIZE

    def moved_since_record(self) -> bool:
        """Appended to since the positions journal last recorded it (or never recorded)."""
        return self._write_pos != self._recorded_pos

    def recorded(self, state: QueueSummary) -> None:
        """The positions journal recorded ``state`` of this queue (its ``capture``)."""
        self._recorded_pos = state[3]

    @property
    def unflushed_bytes(self) -> int:
        return self._write_pos - self._flushed_pos

    @property
    def open_files(self) -> int:
        """Files of this queue open now (tests, figures)."""
        return sum(file.fd >= 0 for file in self.files)

    # --- writes --------------------------------------------------------------------------
    def append_units(self, first_offset: int, units: Sequence[Unit]) -> int:
        """Write ``units`` at logical offsets ``first_offset...`` (see ``append_packed``)."""
        if not units:
            return 0
        last_offset, last_size, _ = units[-1]
        data = b"".join(starmap(UNIT.pack, units))
        return self.append_packed(first_offset, data, last_offset + last_size)

    def append_next(self, first_offset: int, data: bytes, physical_end: int) -> int:
        """``append_packed`` of the usual dispatch run, or nothing: the next units of a queue
        whose tail lies in its newest file, allocated, with room in the tail and the budget.
        It is what the general path does then (no overlap, gap, fresh start, spill or
        allocation; the queue is dirty already) without its steps: at 256 topics a 1 MiB
        dispatch chunk holds ~64 runs of 16 units, and most runs go this way.
        Returns the queue's new max offset, or -1 (nothing written: ``append_packed``)."""
        tail = self._tail
        if tail is None:
            return -1
        links = self._links
        n = len(data)
        pos = self._write_pos
        file = self.files[-1]
        if (
            first_offset * CQ_STORE_UNIT_SIZE == pos
            and len(tail) + n < TAIL_BYTES
            and links.tail_bytes + n <= links.tail_budget
            and self._file_pos >= file.start
            and pos + n - file.start <= file.allocated
            and not links.damaged
        ):
            tail += data
            links.tail_bytes += n
            pos += n
            self._write_pos = pos
            if physical_end > self.max_physical_offset:
                self.max_physical_offset = physical_end
            return pos // CQ_STORE_UNIT_SIZE
        return -1

    def append_packed(self, first_offset: int, data: bytes, physical_end: int) -> int:
        """Write packed units (``data``, 20 bytes each) at logical offsets ``first_offset...``;
        ``physical_end`` is the end (offset + size) of the last unit's record. Units already
        present (a re-dispatch after recovery) are skipped; a gap is filled with blank units
        so logical offsets keep matching the queue offsets stored in the CommitLog. Returns
        units added."""
        if self.append_next(first_offset, data, physical_end) >= 0:
            return len(data) // CQ_STORE_UNIT_SIZE
        if self in self._links.damaged:  # logged when found; rebuilt at the next start
            raise DamagedQueueError(f"consume queue {self.topic}/{self.queue_id} is damaged")
        expected = self.max_offset
        if first_offset < expected:
            data = data[(expected - first_offset) * CQ_STORE_UNIT_SIZE :]
            first_offset = expected
        if not data:
            return 0
        fresh_min = -1
        if (not self.files or self._fresh) and first_offset > 0:
            # A queue re-created above zero (its files were removed): start at the file that
            # holds first_offset instead of writing blanks from zero.
            fresh_min = first_offset * CQ_STORE_UNIT_SIZE
            self._start_at(fresh_min - fresh_min % self.file_size)
        gap = first_offset - self.max_offset
        if gap > 0:
            data = _BLANK_UNIT * gap + data
        was_empty = self._write_pos == self._min_pos
        self._write(data)
        if fresh_min >= 0:
            self._min_pos = fresh_min
        if was_empty:
            # The first unit is this write's (unless blanks fill a gap before it): known
            # without a read, so retention's first pass over 100,000 new queues opens none
            # of their files (it read each one: ~1 s on the loop, and the file cache emptied).
            self._min_physical = -1 if gap > 0 else UNIT.unpack_from(data)[0]
        self._fresh = False
        self.max_physical_offset = max(self.max_physical_offset, physical_end)
        return len(data) // CQ_STORE_UNIT_SIZE - max(gap, 0)

    def missing_before(self, first_offset: int) -> int:
        """Units a dispatch of ``first_offset`` would fill with blanks though their records
        may be in the commit log: the gap after a queue that indexes records already (it has
        files, not adopted fresh, and a unit's record). A fresh queue starting above zero
        (its files removed, the log's start deleted) has none: its blanks lie below its min
        offset, never read. ``Dispatcher`` re-dispatches a gap instead (its docstring)."""
        gap = first_offset - self.max_offset
        if gap <= 0 or not self.files or self._fresh or self.max_physical_offset <= 0:
            return 0
        return gap

    def _start_at(self, file_start: int) -> None:
        self._drop_tail()
        self._write_pos = self._file_pos = self._min_pos = self._flushed_pos = file_start
        self._links.changed.add(self)

    def _write(self, data: bytes) -> None:
        pos = self._write_pos
        links = self._links
        if pos == self._flushed_pos:  # its first unflushed unit
            links.dirty.add(self)
            links.changed.add(self)
        files = self.files
        if files:
            # The common case, all in the newest file (a dispatch chunk writes ~16 units per
            # queue at 256 topics: the general loop's views and lookups were ~2 us of each).
            file = files[-1]
            at = self._file_pos - file.start
            end = pos - file.start + len(data)
            if at >= 0 and end <= file.size:
                tail = self._tail
                n = len(data)
                if end - at < TAIL_BYTES and links.tail_bytes + n <= links.tail_budget:
                    if end > file.allocated:
                        # Backed now, as a write would be: a full disk fails this append
                        # (nothing kept, dispatch retries) and a spill never runs out of space.
                        file.allocate(self._fd(file), end)
                    if tail is None:
                        self._tail = bytearray(data)
                        links.tails.add(self)
                        links.changed.add(self)  # the journal spills it before recording
                    else:
                        tail += data
                    links.tail_bytes += n
                    self._write_pos = pos + n
                    return
                fd = self._fd(file)
                if end > file.allocated:
                    file.allocate(fd, end)  # see the module docstring
                if (
                    tail
                    and n < TAIL_BYTES
                    and links.tail_bytes - len(tail) + n <= links.tail_budget
                ):
                    # The full tail goes out and this run starts the next one: with no tail the
                    # queue's next run took this path too (the compiled ``append_runs`` needs
                    # one), 2 runs in Python of every 13 at 256 topics instead of 1.
                    _pwrite_all(fd, tail, at, file.path)
                    self._tail = bytearray(data)  # a new one: a capture in flight holds the old
                    links.tail_bytes += n - len(tail)
                    self._file_pos = pos
                    self._write_pos = pos + n
                    return
                _pwrite_all(fd, bytes(tail) + data if tail else data, at, file.path)
                self._drop_tail()
                self._write_pos = self._file_pos = pos + n
                return
        self.spill()
        view = memoryview(data)
        while view:
            file = self._file_for_write()
            at = self._write_pos - file.start
            n = min(len(view), file.size - at)
            fd = self._fd(file)
            if at + n > file.allocated:
                file.allocate(fd, at + n)  # see the module docstring
            _pwrite_all(fd, view[:n], at, file.path)
            self._write_pos = self._file_pos = self._write_pos + n
            view = view[n:]

    def spill(self) -> None:
        """Write the tail into its file (loop; DiskFullError keeps it for the next try)."""
        tail = self._tail
        if not tail:
            return
        file = self._file_at(self._file_pos)  # a tail lies in one file (``_write``)
        assert file is not None
        at = self._file_pos - file.start
        # A file gone from under the queue: the tail goes too (the next start rebuilds it).
        with contextlib.suppress(DamagedQueueError):
            _pwrite_all(self._fd(file), tail, at, file.path)  # allocated by ``_write``
        self._drop_tail()
        self._file_pos = self._write_pos

    def _drop_tail(self) -> None:
        tail = self._tail
        if tail is not None:
            self._tail = None
            links = self._links
            links.tails.discard(self)
            links.tail_bytes -= len(tail)

    def _file_for_write(self) -> ConsumeQueueFile:
        if self.files and self._write_pos < self.files[-1].end:
            file = self._file_at(self._write_pos)  # files may be created ahead of the writer
            assert file is not None
            return file
        # Normally the ReputService created this file in a thread beforehand (missing_files /
        # create_files_blocking); this fallback (recovery, tests) creates it in place: sparse,
        # so it costs an open and an ftruncate.
        self.sync_creations += 1
        start = self.files[-1].end if self.files else self._write_pos
        file = self._create_file_blocking(start)
        if not self.files:
            self._min_pos = max(self._min_pos, start)
        self.files.append(file)
        return file

    def _create_file_blocking(self, start: int) -> ConsumeQueueFile:
        created: list[str] = []
        if not os.path.isdir(self.directory):
            try:
                os.makedirs(self.directory, mode=dir_mode(), exist_ok=True)
            except OSError as exc:
                if is_disk_full(exc):
                    raise disk_full_error(exc, f"creating directory {self.directory}") from exc
                raise
            # consumequeue/<topic>/ and consumequeue/: their new entries need a sync too.
            topic_dir = os.path.dirname(self.directory)
            for directory in (topic_dir, self.directory):  # makedirs' mode is the last one's
                os.chmod(directory, dir_mode())  # and under the umask
            created = [topic_dir, os.path.dirname(topic_dir)]
        path = os.path.join(self.directory, segment_file_name(start))
        file = ConsumeQueueFile.create_blocking(path, start, self.file_size)
        # Durable by name before the checkpoint moves past its units (not here: a directory
        # fsync per file would cost the dispatch a journal commit).
        self._links.dir_syncs.add(self.directory, *created)
        return file

    def within_files(self, end_offset: int) -> bool:
        """Units below logical ``end_offset`` lie in the queue's files: writing them creates
        none (dispatch's usual case, checked before ``missing_files``)."""
        files = self.files
        return bool(files) and end_offset * CQ_STORE_UNIT_SIZE <= files[-1].end

    def missing_files(self, first_offset: int, count: int) -> list[int]:
        """Start positions of the files that appending ``count`` units at ``first_offset``
        needs and that do not exist yet (so they can be created off the event loop)."""
        end = (first_offset + count) * CQ_STORE_UNIT_SIZE
        if self.files:
            start = self.files[-1].end
        elif first_offset > 0:
            start = first_offset * CQ_STORE_UNIT_SIZE
            start -= start % self.file_size
        else:
            start = self._write_pos
        return list(range(start, end, self.file_size)) if start < end else []

    def create_files_blocking(self, starts: Sequence[int]) -> list[ConsumeQueueFile]:
        """Create files in a thread; ``adopt_files`` then attaches them on the loop."""
        return [self._create_file_blocking(start) for start in starts]

    def adopt_files(self, files: Sequence[ConsumeQueueFile]) -> None:
        for file in files:
            if self.files and file.start != self.files[-1].end:
                continue  # the queue moved on meanwhile (truncated/deleted): not needed
            if not self.files:
                self._start_at(file.start)
                self._fresh = True
            self.files.append(file)
            self._links.changed.add(self)

    # --- reads ---------------------------------------------------------------------------
    def read_unit_bytes(self, offset: int, max_count: int) -> bytes:
        """Copy of up to ``max_count`` units from logical ``offset`` (across files)."""
        pos = offset * CQ_STORE_UNIT_SIZE
        want = min(self._write_pos, pos + max_count * CQ_STORE_UNIT_SIZE)
        end = min(want, self._file_pos)
        chunks = []
        while pos < end:
            file = self._file_at(pos)
            if file is None:
                break
            at = pos - file.start
            n = min(end - pos, file.size - at)
            chunks.append(self._pread(file, n, at))
            pos += n
        tail = self._tail
        if tail and want > self._file_pos and pos >= end:
            base = self._file_pos
            chunks.append(bytes(tail[max(pos, base) - base : want - base]))
        if not chunks:
            return b""
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read_units(self, offset: int, max_count: int) -> Iterator[Unit]:
        return UNIT.iter_unpack(self.read_unit_bytes(offset, max_count))

    def get_unit(self, offset: int) -> Unit | None:
        if offset < self.min_offset or offset >= self.max_offset:
            return None
        pos = offset * CQ_STORE_UNIT_SIZE
        if pos >= self._file_pos:  # in the tail
            at = pos - self._file_pos
            return UNIT.unpack_from(self._tail, at) if self._tail else None  # type: ignore[return-value]
        file = self._file_at(pos)
        if file is None:
            return None
        data = self._pread(file, CQ_STORE_UNIT_SIZE, pos - file.start)
        return UNIT.unpack(data)  # type: ignore[return-value]

    def _pread(self, file: ConsumeQueueFile, n: int, at: int) -> bytes:
        """``n`` bytes of ``file`` at ``at``, which hold units: files are sized in full when
        created, so fewer bytes (or no file) is damage, met as DamagedQueueError instead of a
        unit cut short (a short file restored from a backup, a truncation by hand)."""
        data = os.pread(self._fd(file), n, at)
        if len(data) != n:
            raise self._damaged(f"{file.path} gave {len(data)} of the {n} bytes at {at}")
        return data

    def _fd(self, file: ConsumeQueueFile) -> int:
        """``file``'s descriptor (the cache opens it); a file gone from under the queue is
        damage: DamagedQueueError."""
        try:
            return self._cache.fd(file)
        except FileNotFoundError:
            raise self._damaged(f"{file.path} is missing") from None

    def _damaged(self, detail: str) -> DamagedQueueError:
        """The error of a read that found damage; the first one of this queue is logged."""
        message = (
            f"consume queue {self.topic}/{self.queue_id} is damaged ({detail}): its reads fail "
            "until the broker restarts, which rebuilds it from the commit log"
        )
        damaged = self._links.damaged
        if self not in damaged:
            damaged.add(self)
            log.error("%s", message)
        return DamagedQueueError(message)

    def _file_at(self, pos: int) -> ConsumeQueueFile | None:
        files = self.files
        if not files or pos < files[0].start:
            return None
        index = (pos - files[0].start) // self.file_size
        return files[index] if index < len(files) else None

    def offset_by_time(self, timestamp_ms: int, store_time: StoreTimeReader) -> int:
        """The first logical offset whose message was stored at or after ``timestamp_ms``
        (max offset if none; a removed record counts as older). Binary search, as RocketMQ's
        getOffsetInQueueByTime with BoundaryType.LOWER."""
        low, high = self.min_offset, self.max_offset
        while low < high:
            mid = (low + high) // 2
            unit = self.get_unit(mid)
            stamp = None
            if unit is not None and unit[1] != BLANK_UNIT_SIZE:
                stamp = store_time(unit[0], unit[1])
            if stamp is None or stamp < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        return low

    # --- recovery / retention ------------------------------------------------------------
    def truncate_from_physical(self, commit_log_end: int) -> int:
        """Drop every unit pointing at or beyond ``commit_log_end`` (the valid end of the
        CommitLog after recovery). Units are zeroed so a reopen does not resurrect them.
        Returns the number of units dropped."""
        if self.max_physical_offset <= commit_log_end:
            return 0  # the newest unit's record ends inside the log: nothing to read
        self.spill()
        new_pos = self._write_pos
        while new_pos > self._min_pos:
            unit = self.get_unit(new_pos // CQ_STORE_UNIT_SIZE - 1)
            # Blank units point at offset 0, so they always stay.
            if unit is None or unit[0] < commit_log_end:
                break
            new_pos -= CQ_STORE_UNIT_SIZE
        dropped = (self._write_pos - new_pos) // CQ_STORE_UNIT_SIZE
        if dropped:
            self.truncate_to_offset(new_pos // CQ_STORE_UNIT_SIZE)
        else:
            self._refresh_max_physical_offset()
        return dropped

    def truncate_to_offset(self, offset: int) -> None:
        """Make ``offset`` the new max offset: zero the tail, remove files wholly past it.
        Durably (recovery runs it in a thread, before anything is appended): a power cut that
        brought the dropped units back would leave them at queue offsets the re-dispatch then
        skips as already written, each pointing at a record that is not its message."""
        self.spill()
        new_pos = max(offset * CQ_STORE_UNIT_SIZE, self._min_pos)
        unlinked = False
        while self.files and self.files[-1].start > new_pos:
            file = self.files.pop()
            self._cache.forget(file)
            os.unlink(file.path)
            unlinked = True
        if unlinked:
            fsync_dir_blocking(self.directory)
        if self.files and new_pos < self._write_pos:
            last = self.files[-1]
            at = new_pos - last.start
            stop = min(self._write_pos - last.start, last.size)
            # Over written (allocated) units: needs no new space.
            _pwrite_all(self._cache.fd(last), bytes(stop - at), at, last.path)
            last.flush_blocking()
        if not self.files:
            self._start_at(new_pos - new_pos % self.file_size)
        self._write_pos = self._file_pos = new_pos
        self._flushed_pos = min(self._flushed_pos, new_pos)
        self._links.changed.add(self)
        if self._write_pos <= self._min_pos:
            self._min_physical = -1
        self._refresh_max_physical_offset()

    def _refresh_max_physical_offset(self) -> None:
        self.max_physical_offset = 0
        pos = self._write_pos
        while pos > self._min_pos:
            unit = self.get_unit(pos // CQ_STORE_UNIT_SIZE - 1)
            if unit is not None and unit[1] != BLANK_UNIT_SIZE:
                self.max_physical_offset = unit[0] + unit[1]
                return
            pos -= CQ_STORE_UNIT_SIZE

    def correct_min_offset(self, commit_log_min: int) -> None:
        """Advance the min offset past units whose records retention deleted (RocketMQ's
        correctMinOffset), by binary search: units are ordered by commit log offset. A queue
        whose first unit is known to be in the log is not read (no file opened for idle
        queues)."""
        if self._min_physical >= 0 and commit_log_min <= self._min_physical:
            return
        low, high = self.min_offset, self.max_offset
        if low >= high:
            return
        first = self.get_unit(low)
        if first is not None and first[1] != BLANK_UNIT_SIZE and first[0] >= commit_log_min:
            self._min_physical = first[0]
            return
        while low < high:
            mid = (low + high) // 2
            unit = self.get_unit(mid)
            if unit is not None and unit[1] != BLANK_UNIT_SIZE and unit[0] >= commit_log_min:
                high = mid
            else:
                low = mid + 1
        self._min_pos = max(self._min_pos, low * CQ_STORE_UNIT_SIZE)
        self._links.changed.add(self)
        unit = self.get_unit(self.min_offset)
        self._min_physical = unit[0] if unit is not None and unit[1] != BLANK_UNIT_SIZE else -1

    def advance_min_offset(self, offset: int) -> None:
        """Move the min offset up to ``offset`` (at most the max offset): a log start offset
        moved by topic retention or DeleteRecords (store/retention/starts.py). Never down."""
        pos = min(offset, self.max_offset) * CQ_STORE_UNIT_SIZE
        if pos > self._min_pos:
            self._min_pos = pos
            self._min_physical = -1
            self._links.changed.add(self)

    def expired_files(self, commit_log_min: int) -> list[ConsumeQueueFile]:
        """Files (never the newest) whose last unit points below ``commit_log_min``."""
        expired = []
        for file in self.files[:-1]:
            data = self._pread(file, CQ_STORE_UNIT_SIZE, file.size - CQ_STORE_UNIT_SIZE)
            offset, size, _ = UNIT.unpack(data)
            if offset + (0 if size == BLANK_UNIT_SIZE else size) > commit_log_min:
                break
            expired.append(file)
        return expired

    def detach_files(self, files: Sequence[ConsumeQueueFile]) -> None:
        """Forget ``files`` (a prefix, closed here); the caller unlinks them in a thread."""
        for file in files:
            self.files.remove(file)
            self._cache.forget(file)
        if self.files:
            self._min_pos = max(self._min_pos, self.files[0].start)
            self._min_physical = -1
        self._links.changed.add(self)

    def mark_unsynced(self) -> None:
        """After a process crash: the newest units may sit in the page cache only, yet the
        load took them as flushed. The next flush syncs the last two files (a queue fills
        300,000 units a file; it cannot cross two within the ~1 s its units stay unsynced),
        so no checkpoint or clean shutdown vouches for units a power cut could take."""
        if self._write_pos <= self._min_pos or not self.files:
            return
        self._flushed_pos = max(self._min_pos, self.files[max(0, len(self.files) - 2)].start)
        self._links.dirty.add(self)

    # --- flush / close -------------------------------------------------------------------
    def flush_blocking(self) -> int:
        """fdatasync the files holding unflushed units (any thread: the tail, which the flush
        spilled before, is not in them). Returns bytes made durable."""
        target = self.sync_target()
        flushed = self._flushed_pos
        if target <= flushed:
            return 0
        for file in list(self.files):
            if file.end > flushed and file.start < target:
                file.flush_blocking()
        return self.synced(target)

    def sync_target(self) -> int:
        """How far a sync of the files that starts now makes this queue durable: the units
        written into them (a tail in memory is not)."""
        return self._file_pos

    def synced(self, target: int) -> int:
        """After a sync of its files (``flush_blocking``, or one of the whole filesystem) that
        began at ``sync_target()`` = ``target``: bytes made durable by it."""
        flushed = self._flushed_pos
        if target <= flushed:
            return 0
        self._flushed_pos = target
        return target - flushed

    def close(self) -> None:
        self._drop_tail()  # a removed topic's units (a clean stop spilled every tail first)
        for file in self.files:
            self._cache.forget(file)

    def destroy_blocking(self) -> None:
        """Delete every file and the queue's directory (topic deletion; the queue was closed
        on the loop first, so nothing of it is open)."""
        for file in self.files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(file.path)
        self.files.clear()
        for directory in (self.directory, os.path.dirname(self.directory)):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


# (first file start, file count, min pos, write pos, max physical offset, min physical offset)
QueueSummary = tuple[int, int, int, int, int, int]


def append_usual_runs(
    queues: dict[tuple[str, int], ConsumeQueue],
    links: QueueLinks,
    runs: tuple[list[tuple[str, int]], list[int], list[int], list[int], bytes],
    advanced: dict[tuple[str, int], int],
) -> Sequence[int]:
    """``ConsumeQueue.append_next`` of many runs at once, compiled: ``runs`` is (keys, firsts,
    bounds, ends, data) as ``QueueRuns`` holds them (run i: queue ``keys[i]`` from logical
    ``firsts[i]``, units ``data[bounds[i]:bounds[i + 1]]``, its last record ending at
    ``ends[i]``). The runs taken set ``advanced[key]`` to their queue's new max offset; the
    indexes of the others come back, in order (a run left leaves every later run of its queue:
    their order holds), for the caller's ``append_next`` / ``append_packed``. Without the
    compiled module (or with a damaged queue, where no run takes the short path) every index
    comes back."""
    if _compiled is None or links.damaged:
        return range(len(runs[0]))
    keys, firsts, bounds, ends, data = runs
    room = links.tail_budget - links.tail_bytes
    rest, used = _compiled.append_runs(
        queues, keys, firsts, bounds, ends, data, room, TAIL_BYTES, advanced
    )
    links.tail_bytes += used
    return rest


class TailWrite(NamedTuple):
    """A queue's tail captured on the loop (``ConsumeQueue.capture``): ``data`` goes at ``at``
    in ``path``, the queue's absolute position ``start``; ``tail`` is the buffer to trim."""

    queue: ConsumeQueue
    tail: bytearray
    start: int
    data: bytes
    path: str
    at: int


def write_tails_blocking(writes: Sequence[TailWrite]) -> list[Exception | None]:
    """(any thread) Each captured tail into its file, through a descriptor of its own (the
    cache's are the loop's; Linux writes the same page cache whichever descriptor writes);
    never created (a file deleted meanwhile is a removed queue, or damage the loop handles).
    Per write None, or the error that kept it out. 40,000 tails (10,000 topics x 4 busy
    queues) were ~3 s of the loop every 5 s when the positions journal spilled them there:
    producers saw no reply for that long."""
    errors: list[Exception | None] = []
    for write in writes:
        try:
            fd = os.open(write.path, os.O_WRONLY)
            try:
                _pwrite_all(fd, write.data, write.at, write.path)
            finally:
                os.close(fd)
        except (OSError, DiskFullError) as exc:
            errors.append(exc)
            continue
        errors.append(None)
    return errors


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, at: int, path: str) -> None:
    """All of ``data`` at ``at``: into allocated space, so only a failing disk stops it."""
    done = 0
    try:
        while done < len(data):
            done += os.pwrite(fd, data[done:], at + done)
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(exc, f"writing consume queue file {path}") from exc
        raise


def _all_zero_blocking(path: str) -> bool:
    with open(path, "rb") as file:
        data = file.read()
    return data.count(0) == len(data)


_SCAN_BLOCK = 204 * CQ_STORE_UNIT_SIZE  # 4,080 bytes: one page read holds 204 units


def _scan_blocking(file: ConsumeQueueFile) -> tuple[int, int, int]:
    """(bytes before the first unit of size 0 (end of written data), end (offset + size) of
    the newest non-blank unit's record or 0, commit log offset of the first unit or -1 when it
    is blank or absent). Units are written front to back, so "size != 0" is a prefix
    property: found in the first block, or by binary search (~19 reads of a full file)."""
    unit_size = CQ_STORE_UNIT_SIZE
    fd = os.open(file.path, os.O_RDONLY)
    try:
        head = os.pread(fd, min(_SCAN_BLOCK, file.size), 0)
        count = len(head) // unit_size
        low, high = 0, count
        while low < high:
            mid = (low + high) // 2
            if UNIT.unpack_from(head, mid * unit_size)[1] != 0:
                low = mid + 1
            else:
                high = mid
        if low == count:  # past the first block
            high = file.size // unit_size
            while low < high:
                mid = (low + high) // 2
                if UNIT.unpack(os.pread(fd, unit_size, mid * unit_size))[1] != 0:
                    low = mid + 1
                else:
                    high = mid
        used = low * unit_size
        first = -1
        if used:
            offset, size, _ = UNIT.unpack_from(head, 0)
            first = offset if size != BLANK_UNIT_SIZE else -1
        end = _last_record_end(head, used) if used <= len(head) else 0
        if used > len(head):
            end = _physical_end_fd(fd, used)
    finally:
        os.close(fd)
    return used, end, first


def _last_record_end(chunk: bytes, used: int) -> int:
    """End of the record of the newest non-blank unit in ``chunk[:used]`` (0 if none)."""
    for index in range(used // CQ_STORE_UNIT_SIZE - 1, -1, -1):
        offset, size, _ = UNIT.unpack_from(chunk, index * CQ_STORE_UNIT_SIZE)
        if size != BLANK_UNIT_SIZE:
            return offset + size
    return 0


def _physical_end_blocking(file: ConsumeQueueFile, used: int) -> int:
    """End (offset + size) of the record of the newest non-blank unit in the first ``used``
    bytes of ``file`` (0 if none)."""
    fd = os.open(file.path, os.O_RDONLY)
    try:
        return _physical_end_fd(fd, used)
    finally:
        os.close(fd)


def _physical_end_fd(fd: int, used: int) -> int:
    """``_physical_end_blocking`` on an open descriptor, reading back from ``used`` a block at
    a time."""
    end = used
    while end > 0:
        begin = max(0, end - _SCAN_BLOCK)
        found = _last_record_end(os.pread(fd, end - begin, begin), end - begin)
        if found:
            return found
        end = begin
    return 0
