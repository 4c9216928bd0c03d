"""KeptLog: one compacted queue's own log, the records compaction kept (RocketMQ 5's
CompactionLog idea; layout in ``codec/layout.py``, "Kept log").

The shared commit log cannot be rewritten per key, so a compacted queue's surviving records are
copied, as stored, into generation files of its own: ``<N>.log`` (records back to back) and
``<N>.idx`` (one entry per record, queue-offset order). ``CURRENT`` names the live generation
and the range it answers for, ``[base, cleaned_to)``; above ``cleaned_to`` the queue is read
from its consume queue as any other.

Crash rule: a new generation is written and fsynced whole, then ``CURRENT.tmp`` is written,
fsynced and renamed over ``CURRENT``, then the directory is fsynced; only then are the old
generation's files removed. A crash at any step leaves ``CURRENT`` naming either the old or
the new generation, both whole; ``load_blocking`` removes the files of any other generation
(a pass that died before or after its swap) and a stray ``CURRENT.tmp``. ``fail(step)`` is
called before each step so tests can stop there (``STEPS``).

Threads: the compactor thread writes generations and reads the live one with its own
descriptors (``pread`` is safe across threads); the loop reads through ``find`` /
``read_entries`` and swaps the object once the thread is done, then closes the old one.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from wharf.store.codec.layout import (
    KEPT_CURRENT,
    KEPT_CURRENT_CRC_END,
    KEPT_CURRENT_MAGIC,
    KEPT_CURRENT_SIZE,
    KEPT_ENTRY,
    KEPT_ENTRY_SIZE,
)
from wharf.store.errors import StoreError
from wharf.store.paths import create_file_blocking, fsync_dir_blocking, make_dirs_blocking

CURRENT = "CURRENT"
# Where a pass may be stopped by a test (``fail``), in the order a pass reaches them.
STEPS = ("write", "sync", "current", "rename", "dir-sync", "remove-old")
# Records copied in writes of about this much (one write per MiB, not per record).
WRITE_CHUNK = 1 << 20
Entry = tuple[int, int, int, int]  # (queue offset, position in <N>.log, size, store timestamp)


class KeptLogError(StoreError):
    """A kept log that cannot be read (damaged ``CURRENT``, short files)."""


def _no_fail(step: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class KeptState:
    generation: int  # 0: no files yet
    base: int  # the log start offset the kept log last saw
    cleaned_to: int  # answers for queue offsets [base, cleaned_to)
    records: int
    log_bytes: int

    def encode(self) -> bytes:
        head = KEPT_CURRENT.pack(
            KEPT_CURRENT_MAGIC,
            self.generation,
            self.base,
            self.cleaned_to,
            self.records,
            self.log_bytes,
            0,
        )[:KEPT_CURRENT_CRC_END]
        return head + (zlib.crc32(head) & 0xFFFFFFFF).to_bytes(4, "big")

    @classmethod
    def decode(cls, data: bytes, where: str) -> KeptState:
        if len(data) != KEPT_CURRENT_SIZE:
            raise KeptLogError(f"{where}: {len(data)} bytes, expected {KEPT_CURRENT_SIZE}")
        magic, generation, base, cleaned_to, records, log_bytes, crc = KEPT_CURRENT.unpack(data)
        if magic != KEPT_CURRENT_MAGIC or crc != zlib.crc32(data[:KEPT_CURRENT_CRC_END]):
            raise KeptLogError(f"{where}: bad magic or CRC")
        return cls(generation, base, cleaned_to, records, log_bytes)


def _name(generation: int, suffix: str) -> str:
    return f"{generation:020d}.{suffix}"


class KeptLog:
    """The live generation of one queue's kept log (read side)."""

    def __init__(self, directory: Path, state: KeptState) -> None:
        self.directory = directory
        self.state = state
        self._log_fd = self._idx_fd = -1
        if state.generation:
            self._log_fd = os.open(directory / _name(state.generation, "log"), os.O_RDONLY)
            self._idx_fd = os.open(directory / _name(state.generation, "idx"), os.O_RDONLY)
            sizes = os.fstat(self._log_fd).st_size, os.fstat(self._idx_fd).st_size
            if sizes != (state.log_bytes, state.records * KEPT_ENTRY_SIZE):
                self.close()
                raise KeptLogError(f"{directory}: generation {state.generation} is short {sizes}")

    @classmethod
    def load_blocking(cls, directory: Path) -> KeptLog | None:
        """The live generation, None when the queue has no ``CURRENT`` yet; files of any other
        generation (a pass a crash interrupted) are removed."""
        try:
            data = (directory / CURRENT).read_bytes()
        except FileNotFoundError:
            if directory.is_dir():
                _remove_strays(directory, keep=-1)
            return None
        state = KeptState.decode(data, str(directory / CURRENT))
        _remove_strays(directory, keep=state.generation)
        return cls(directory, state)

    def close(self) -> None:
        for fd in (self._log_fd, self._idx_fd):
            if fd >= 0:
                os.close(fd)
        self._log_fd = self._idx_fd = -1

    def entry(self, i: int) -> Entry:
        data = os.pread(self._idx_fd, KEPT_ENTRY_SIZE, i * KEPT_ENTRY_SIZE)
        return KEPT_ENTRY.unpack(data)  # type: ignore[return-value]

    def first_at_or_after(self, offset: int) -> int:
        """Index of the first entry with queue offset >= ``offset`` (``records`` if none)."""
        low, high = 0, self.state.records
        while low < high:  # ~20 preads of 28 bytes for a million kept records
            mid = (low + high) // 2
            if self.entry(mid)[0] < offset:
                low = mid + 1
            else:
                high = mid
        return low

    def find(self, offset: int, max_count: int, max_bytes: int) -> list[Entry]:
        """Entries of the next kept records at or after ``offset`` (below ``cleaned_to``): at
        most ``max_count``, and ``max_bytes`` except that the first is always given."""
        if not self.state.records:
            return []
        first = self.first_at_or_after(offset)
        count = min(max(max_count, 1), self.state.records - first)
        if count <= 0:
            return []
        data = os.pread(self._idx_fd, count * KEPT_ENTRY_SIZE, first * KEPT_ENTRY_SIZE)
        entries: list[Entry] = []
        total = 0
        for entry in KEPT_ENTRY.iter_unpack(data):
            if entries and total + entry[2] > max_bytes:
                break
            entries.append(entry)  # type: ignore[arg-type]
            total += entry[2]
        return entries

    def read_entries(self, entries: list[Entry]) -> bytes:
        """The records of consecutive ``entries`` (adjacent in ``<N>.log``): one pread."""
        start = entries[0][1]
        size = entries[-1][1] + entries[-1][2] - start
        data = os.pread(self._log_fd, size, start)
        if len(data) != size:
            raise KeptLogError(f"{self.directory}: short read at {start}")
        return data

    def scan(self, chunk_bytes: int = WRITE_CHUNK) -> Iterator[tuple[list[Entry], bytes]]:
        """Every kept record, in chunks of about ``chunk_bytes`` (at least one record):
        (entries, their records' bytes)."""
        first = 0
        while first < self.state.records:
            count = min(4096, self.state.records - first)
            data = os.pread(self._idx_fd, count * KEPT_ENTRY_SIZE, first * KEPT_ENTRY_SIZE)
            entries: list[Entry] = []
            total = 0
            for entry in KEPT_ENTRY.iter_unpack(data):
                if entries and total + entry[2] > chunk_bytes:
                    break
                entries.append(entry)  # type: ignore[arg-type]
                total += entry[2]
            yield entries, self.read_entries(entries)
            first += len(entries)


class GenerationWriter:
    """Writes generation ``N`` (its two files), then swaps it in (``install_blocking``)."""

    def __init__(
        self, directory: Path, generation: int, fail: Callable[[str], None] = _no_fail
    ) -> None:
        make_dirs_blocking(directory)
        self.directory = directory
        self.generation = generation
        self.fail = fail
        self._log_path = directory / _name(generation, "log")
        self._idx_path = directory / _name(generation, "idx")
        flags = os.O_WRONLY | os.O_TRUNC
        self._log_fd = create_file_blocking(self._log_path, flags)
        self._idx_fd = create_file_blocking(self._idx_path, flags)
        self._log_buf = bytearray()
        self._idx_buf = bytearray()
        self.records = 0
        self.log_bytes = 0

    def add(self, queue_offset: int, record: bytes | memoryview, store_timestamp: int) -> None:
        self._idx_buf += KEPT_ENTRY.pack(queue_offset, self.log_bytes, len(record), store_timestamp)
        self._log_buf += record
        self.records += 1
        self.log_bytes += len(record)
        if len(self._log_buf) >= WRITE_CHUNK:
            self._drain()

    def _drain(self) -> None:
        self.fail("write")
        for fd, buf in ((self._log_fd, self._log_buf), (self._idx_fd, self._idx_buf)):
            view = memoryview(buf)
            while view:
                view = view[os.write(fd, view) :]
            del view
            buf.clear()

    def install_blocking(self, base: int, cleaned_to: int) -> KeptState:
        """Make the generation durable and the live one (the crash rule, module docs)."""
        self._drain()
        self.fail("sync")
        for fd in (self._log_fd, self._idx_fd):
            os.fsync(fd)
        self._close()
        state = KeptState(self.generation, base, cleaned_to, self.records, self.log_bytes)
        install_current_blocking(self.directory, state, self.fail)
        return state

    def abort_blocking(self) -> None:
        """A pass that stops before its swap: its files go (the live generation stays); after
        the rename they are the live generation and stay."""
        self._close()
        try:
            live = KeptState.decode((self.directory / CURRENT).read_bytes(), "CURRENT")
        except (OSError, KeptLogError):
            live = None
        if live is not None and live.generation == self.generation:
            return
        for path in (self._log_path, self._idx_path):
            path.unlink(missing_ok=True)

    def _close(self) -> None:
        for fd in (self._log_fd, self._idx_fd):
            if fd >= 0:
                os.close(fd)
        self._log_fd = self._idx_fd = -1


def install_current_blocking(
    directory: Path, state: KeptState, fail: Callable[[str], None] = _no_fail
) -> None:
    """``CURRENT`` := ``state``: tmp file, fsync, rename, directory fsync."""
    tmp = directory / (CURRENT + ".tmp")
    fail("current")
    tmp.unlink(missing_ok=True)
    fd = create_file_blocking(tmp, os.O_WRONLY | os.O_EXCL)
    try:
        os.write(fd, state.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fail("rename")
    os.replace(tmp, directory / CURRENT)
    fail("dir-sync")
    fsync_dir_blocking(directory)


def remove_generation_blocking(directory: Path, generation: int) -> None:
    for suffix in ("log", "idx"):
        (directory / _name(generation, suffix)).unlink(missing_ok=True)


def remove_kept_log_blocking(directory: Path) -> None:
    """A queue no longer compacted, or its topic deleted: every file, then the directory."""
    if not directory.is_dir():
        return
    (directory / CURRENT).unlink(missing_ok=True)  # first: no half-removed log is ever live
    fsync_dir_blocking(directory)
    _remove_strays(directory, keep=-1)
    with contextlib.suppress(OSError):  # not empty: someone else's file, left alone
        directory.rmdir()


def _remove_strays(directory: Path, keep: int) -> None:
    for path in directory.iterdir():
        name = path.name
        if name == CURRENT:
            continue
        stem, _, suffix = name.partition(".")
        stray_tmp = name == CURRENT + ".tmp"
        if stray_tmp or (suffix in ("log", "idx") and stem.isdigit() and int(stem) != keep):
            path.unlink(missing_ok=True)
