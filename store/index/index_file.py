"""IndexFile: a hash index from message keys to CommitLog offsets, byte-compatible with
RocketMQ's IndexFile.java / IndexHeader.java (layouts in ``wharf.store.codec.layout``)::

    header (40)   beginTimestamp 8 | endTimestamp 8 | beginPhyOffset 8 | endPhyOffset 8 |
                  hashSlotCount 4 | indexCount 4
    slots         max_hash_slot_num x 4 bytes: number of the newest entry for the slot (0 = none)
    entries       max_index_num x 20 bytes: keyHash 4 | phyOffset 8 | timeDiff 4 | prevIndex 4

Entry number 0 is never used (indexCount starts at 1), so a slot or prevIndex of 0 ends a chain.
``timeDiff`` is whole seconds since beginTimestamp, so lookups by time are second-granular; the
caller widens its window by a second and re-checks the decoded record (key and time), which also
drops hash collisions. The file is created sparse and mapped; this class does no thread hops:
``create_blocking`` / ``flush_blocking`` are called from a thread by IndexService.

No store into the map ever lands on a page the filesystem has not backed (a full disk would kill
the process with SIGBUS): the header and the slots (written anywhere, 20 MB by default) are
posix_fallocate'd when the file is created, the entries (written front to back, 400 MB by
default) ``ALLOCATE_AHEAD`` bytes at a time before ``put_entries`` stores them. A failed
allocation is DiskFullError with nothing written; dispatch retries later (already indexed
records are skipped, see index_files). Allocating the whole file at creation instead would
take its 420 MB on disk at once, even for a store that indexes a few keys.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from wharf.store.codec.layout import (
    INDEX_ENTRY,
    INDEX_ENTRY_SIZE,
    INDEX_HASH_SLOT_SIZE,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_SLOT,
)
from wharf.store.errors import disk_full_error, is_disk_full
from wharf.store.fast import index_batch
from wharf.store.fast.index_batch import IndexColumns, put_entries_columns
from wharf.store.paths import create_file_blocking

INVALID_INDEX = 0
_INT_MAX = 0x7FFFFFFF
# Batches from this size on are written by ``put_entries_columns`` (any batch in columns where
# the compiled writer is built): numpy's fixed cost per call (~60 us) makes it cheaper than the
# scalar loop (~0.55-0.7 us an entry) from about 100 entries given as columns (measured: 1.7 vs
# 1.0 us an entry at 64, 0.24 vs 0.67 at 256). A list of tuples must be converted first, which
# moves its crossover to about twice that (0.72 vs 0.53 at 96, 0.49 vs 0.56 at 192).
VECTORIZE_FROM = 96

# Entries are allocated this far ahead of the last one written: 52,428 entries per
# posix_fallocate call (tens of microseconds on ext4), about 0.3% of a default file.
ALLOCATE_AHEAD = 1024 * 1024

# One index entry to write: (key hash, commit log offset, store timestamp ms).
IndexEntry = tuple[int, int, int]


class IndexFile:
    def __init__(self, path: Path, slot_num: int, index_num: int, fd: int, mm: mmap.mmap) -> None:
        self.path = path
        self.slot_num = slot_num
        self.index_num = index_num
        self._fd = fd
        self._mm = mm
        self._entries_pos = INDEX_HEADER_SIZE + slot_num * INDEX_HASH_SLOT_SIZE
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = INDEX_HEADER.unpack_from(mm, 0)
        if self.index_count < 1:
            self.index_count = 1  # a fresh file: entry 0 is the chain terminator
        self.dirty = False
        self._size = len(mm)
        # Bytes from the start known allocated. A loaded file may be sparse (written by an
        # older version): its first put allocates the header and slots too.
        self._allocated = 0

    @staticmethod
    def file_size(slot_num: int, index_num: int) -> int:
        return INDEX_HEADER_SIZE + slot_num * INDEX_HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE

    @classmethod
    def create_blocking(
        cls, path: Path, slot_num: int, index_num: int, last_phy_offset: int, last_timestamp: int
    ) -> IndexFile:
        """A new sparse file; the header starts at the previous file's end (as RocketMQ)."""
        if slot_num <= 0 or index_num <= 1:
            raise ValueError(
                f"index sizes must be positive (slots={slot_num}, entries={index_num})"
            )
        size = cls.file_size(slot_num, index_num)
        head = INDEX_HEADER_SIZE + slot_num * INDEX_HASH_SLOT_SIZE
        try:
            fd = create_file_blocking(path, os.O_RDWR | os.O_EXCL)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full_error(exc, f"creating index file {path}") from exc
            raise
        try:
            os.ftruncate(fd, size)
            os.posix_fallocate(fd, 0, head)  # header + slots: stored into anywhere
            mm = mmap.mmap(fd, size)
        except BaseException as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            if isinstance(exc, OSError) and is_disk_full(exc):
                raise disk_full_error(exc, f"allocating index file {path} ({head} bytes)") from exc
            raise
        index = cls(path, slot_num, index_num, fd, mm)
        index._allocated = head
        index.begin_phy_offset = index.end_phy_offset = max(last_phy_offset, 0)
        index.begin_timestamp = index.end_timestamp = max(last_timestamp, 0)
        index._write_header()
        # Synced by the next thorough flush even without entries: its size then is durable
        # before (in the same pass) its name is (IndexService.dir_syncs), so a power cut
        # leaves no short index file followed by a newer one.
        index.dirty = True
        return index

    @classmethod
    def load_blocking(cls, path: Path, slot_num: int, index_num: int) -> IndexFile:
        size = cls.file_size(slot_num, index_num)
        if path.stat().st_size != size:
            raise ValueError(
                f"index file {path} has {path.stat().st_size} bytes, expected {size} "
                "(max_hash_slot_num / max_index_num changed?)"
            )
        fd = os.open(path, os.O_RDWR)
        try:
            mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, slot_num, index_num, fd, mm)

    # --- writes --------------------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def free_entries(self) -> int:
        return self.index_num - self.index_count

    def put_entries(self, entries: IndexColumns | list[IndexEntry]) -> int:
        """Append as many entries as fit; returns how many were written. A dispatch chunk
        (hundreds of keys) is written in one vectorized pass; a few entries take the scalar
        loop, which costs less than numpy's fixed overhead."""
        count = min(len(entries), self.free_entries)
        if count <= 0:
            return 0
        need = self._entries_pos + (self.index_count + count) * INDEX_ENTRY_SIZE
        if need > self._allocated:
            self._allocate(need)
        batch = entries[:count]
        if isinstance(batch, IndexColumns):
            first = (int(batch.offsets[0]), int(batch.stamps[0]))
            last = (int(batch.offsets[-1]), int(batch.stamps[-1]))
        else:
            first, last = batch[0][1:], batch[-1][1:]
        if self.index_count <= 1:
            self.begin_phy_offset, self.begin_timestamp = first
        columns = isinstance(batch, IndexColumns)
        compiled = columns and index_batch._compiled is not None
        if compiled or count >= (VECTORIZE_FROM if columns else 2 * VECTORIZE_FROM):
            if not isinstance(batch, IndexColumns):
                batch = IndexColumns.from_entries(batch)
            self.hash_slot_count += put_entries_columns(
                self._mm,
                self.slot_num,
                self._entries_pos,
                self.index_count,
                self.begin_timestamp,
                batch,
            )
        else:
            if isinstance(batch, IndexColumns):
                batch = batch.entries()
            self.hash_slot_count += self._put_entries_scalar(batch)
        self.index_count += count
        self.end_phy_offset, self.end_timestamp = last
        self._write_header()
        self.dirty = True
        return count

    def _allocate(self, need: int) -> None:
        """Back bytes up to ``need`` (and ``ALLOCATE_AHEAD`` more) before the map stores into
        them; DiskFullError (nothing written) when the filesystem cannot."""
        end = min(self._size, need + ALLOCATE_AHEAD)
        try:
            os.posix_fallocate(self._fd, self._allocated, end - self._allocated)
        except OSError as exc:
            if is_disk_full(exc):
                what = f"allocating {end - self._allocated} bytes of index file {self.path}"
                raise disk_full_error(exc, what) from exc
            raise
        self._allocated = end

    def _put_entries_scalar(self, entries: list[IndexEntry]) -> int:
        """One entry at a time (header fields in locals); returns how many slots became
        used. The reference for ``put_entries_vectorized``: both write the same bytes."""
        mm = self._mm
        slot_unpack, slot_pack = INDEX_SLOT.unpack_from, INDEX_SLOT.pack_into
        entry_pack = INDEX_ENTRY.pack_into
        slot_num, entries_pos = self.slot_num, self._entries_pos
        number = self.index_count
        begin_timestamp = self.begin_timestamp
        new_slots = 0
        for key_hash, phy_offset, store_timestamp in entries:
            slot_pos = INDEX_HEADER_SIZE + (key_hash % slot_num) * INDEX_HASH_SLOT_SIZE
            prev = slot_unpack(mm, slot_pos)[0]
            if prev <= INVALID_INDEX or prev >= number:
                prev = INVALID_INDEX
                new_slots += 1
            time_diff = (store_timestamp - begin_timestamp) // 1000 if begin_timestamp > 0 else 0
            if time_diff < 0:
                time_diff = 0
            elif time_diff > _INT_MAX:
                time_diff = _INT_MAX
            entry_pack(
                mm, entries_pos + number * INDEX_ENTRY_SIZE, key_hash, phy_offset, time_diff, prev
            )
            slot_pack(mm, slot_pos, number)
            number += 1
        return new_slots

    def _write_header(self) -> None:
        INDEX_HEADER.pack_into(
            self._mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def _entry(self, number: int) -> tuple[int, int, int, int]:
        return INDEX_ENTRY.unpack_from(self._mm, self._entries_pos + number * INDEX_ENTRY_SIZE)  # type: ignore[return-value]

    def truncate_from_physical(self, commit_log_end: int) -> int:
        """Undo entries pointing at or beyond ``commit_log_end`` (newest first: each is the
        head of its chain, so its slot goes back to its prevIndex). Returns entries removed."""
        removed = 0
        while self.index_count > 1:
            number = self.index_count - 1
            key_hash, phy_offset, _, prev = self._entry(number)
            if phy_offset < commit_log_end:
                break
            slot_pos = INDEX_HEADER_SIZE + (key_hash % self.slot_num) * INDEX_HASH_SLOT_SIZE
            INDEX_SLOT.pack_into(self._mm, slot_pos, prev)
            if prev == INVALID_INDEX:
                self.hash_slot_count -= 1
            INDEX_ENTRY.pack_into(
                self._mm, self._entries_pos + number * INDEX_ENTRY_SIZE, 0, 0, 0, 0
            )
            self.index_count = number
            removed += 1
        if removed:
            if self.index_count > 1:
                _, phy_offset, time_diff, _ = self._entry(self.index_count - 1)
                self.end_phy_offset = phy_offset
                self.end_timestamp = self.begin_timestamp + time_diff * 1000
            else:
                self.end_phy_offset = self.begin_phy_offset
                self.end_timestamp = self.begin_timestamp
            self._write_header()
            self.dirty = True
        return removed

    # --- reads ---------------------------------------------------------------------------
    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """Does [begin_ms, end_ms] overlap the file's [beginTimestamp, endTimestamp]?"""
        return begin_ms <= self.end_timestamp and end_ms >= self.begin_timestamp

    def select_phy_offsets(
        self, key_hash: int, begin_ms: int, end_ms: int, max_num: int, out: list[int]
    ) -> None:
        """Walk the key's chain (newest first) adding offsets stored within [begin, end]."""
        if self.index_count <= 1:
            return
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.slot_num) * INDEX_HASH_SLOT_SIZE
        number = INDEX_SLOT.unpack_from(self._mm, slot_pos)[0]
        seen = 0
        while INVALID_INDEX < number < self.index_count and len(out) < max_num:
            entry_hash, phy_offset, time_diff, prev = self._entry(number)
            if time_diff < 0:
                break
            stamp = self.begin_timestamp + time_diff * 1000
            if entry_hash == key_hash and begin_ms <= stamp <= end_ms:
                out.append(phy_offset)
            seen += 1
            # prev >= number would loop forever on a corrupt file; chains only go backwards.
            if stamp < begin_ms or prev >= number or seen > self.index_count:
                break
            number = prev

    # --- flush / close -------------------------------------------------------------------
    def flush_blocking(self) -> None:
        if self.dirty:
            self.dirty = False
            os.fdatasync(self._fd)

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)
