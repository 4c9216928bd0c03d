"""IndexService: the list of IndexFiles under ``index/`` (RocketMQ's IndexService).

Keys are ``topic#UNIQ_KEY`` and ``topic#key`` for every KEYS entry. A new file (named by its
creation time, yyyyMMddHHmmssSSS) is started when the newest is full; creating a file runs in a
thread because a default file maps ~420 MB. Entries for records already indexed (offset below
the newest file's endPhyOffset) are skipped, which makes a re-dispatch after recovery idempotent.

Power loss: a new file's name is made durable by the thorough queue flush (``dir_syncs``) before
the checkpoint vouches for its entries; the newest files that come back short (size never
synced) are removed at load.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from datetime import datetime
from operator import mul
from pathlib import Path
from typing import TYPE_CHECKING

from wharf.store.codec.dispatch import DispatchRequest
from wharf.store.codec.hashes import index_key_hash
from wharf.store.codec.layout import SYSFLAG_TRANSACTION_ROLLBACK
from wharf.store.fast.index_batch import EMPTY_COLUMNS, IndexColumns
from wharf.store.fast.index_hash import index_key_hashes
from wharf.store.index.index_file import IndexEntry, IndexFile
from wharf.store.paths import DirectorySyncs, fsync_dir_blocking, make_dirs_blocking

if TYPE_CHECKING:
    from wharf.store.fast.dispatch_columns import DispatchColumns

log = logging.getLogger(__name__)

_NAME_FORMAT = "%Y%m%d%H%M%S"


def index_file_name(epoch_ms: int) -> str:
    """yyyyMMddHHmmssSSS in local time, as RocketMQ's UtilAll.timeMillisToHumanString."""
    moment = datetime.fromtimestamp(epoch_ms / 1000)
    return moment.strftime(_NAME_FORMAT) + f"{epoch_ms % 1000:03d}"


def _name_to_ms(name: str) -> int:
    moment = datetime.strptime(name[:14], _NAME_FORMAT)
    return int(moment.timestamp()) * 1000 + int(name[14:17])


_MASK32 = 0xFFFFFFFF
# 31^i mod 2^32: Java's String.hashCode is the polynomial sum(c_i * 31^(n-1-i)) mod 2^32.
_POW31 = [1]
_REVERSED_POWERS: dict[int, tuple[int, ...]] = {}


def _powers(n: int) -> tuple[int, ...]:
    """(31^(n-1), ..., 31, 1) mod 2^32, cached per length."""
    powers = _REVERSED_POWERS.get(n)
    if powers is None:
        while len(_POW31) <= n:
            _POW31.append(_POW31[-1] * 31 & _MASK32)
        powers = _REVERSED_POWERS[n] = tuple(_POW31[n - 1 - i] for i in range(n))
    return powers


class IndexKeyHasher:
    """``index_key_hash(f"{topic}#{key}")``, about 3x faster for ASCII keys: the ``topic#``
    prefix is hashed once per topic (h(p + k) = h(p) * 31^len(k) + h(k)), the key's polynomial
    is summed by ``map(operator.mul)`` in C, and unique keys bypass the format module's LRU
    cache (every UNIQ_KEY would miss it). Non-ASCII keys take the reference path."""

    def __init__(self) -> None:
        self._prefix: dict[str, int] = {}

    def __call__(self, topic: str, key: str) -> int:
        prefix = self._prefix.get(topic)
        if prefix is None:
            if not topic.isascii():
                return index_key_hash(f"{topic}#{key}")
            raw = f"{topic}#".encode()
            prefix = self._prefix[topic] = sum(map(mul, raw, _powers(len(raw)))) & _MASK32
        raw = key.encode()
        n = len(raw)
        if n != len(key):  # not ASCII: Java hashes UTF-16 units, take the reference path
            return index_key_hash(f"{topic}#{key}")
        if n:
            powers = _REVERSED_POWERS.get(n) or _powers(n)
            h = (prefix * powers[0] * 31 + sum(map(mul, raw, powers))) & _MASK32
        else:
            h = prefix
        if h & 0x80000000:
            h -= 0x100000000
        return 0 if h == -0x80000000 else abs(h)


def build_index_keys(topic: str, uniq_key: str, keys: Iterable[str]) -> list[str]:
    out = [f"{topic}#{uniq_key}"] if uniq_key else []
    out.extend(f"{topic}#{key}" for key in keys if key)
    return out


class IndexService:
    def __init__(self, directory: Path, slot_num: int, index_num: int) -> None:
        self.directory = directory
        self.slot_num = slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self.key_hash = IndexKeyHasher()
        # ``index/`` once it has a file whose name is not durable yet: fsynced by the thorough
        # queue flush before the checkpoint vouches for the entries (store/services/queue_flush.py).
        self.dir_syncs = DirectorySyncs()

    @classmethod
    def load_blocking(cls, directory: Path, slot_num: int, index_num: int) -> IndexService:
        service = cls(directory, slot_num, index_num)
        make_dirs_blocking(directory)
        paths = sorted(p for p in directory.iterdir() if len(p.name) == 17 and p.name.isdigit())
        expected = IndexFile.file_size(slot_num, index_num)
        while paths and paths[-1].stat().st_size < expected:
            # A crash while the newest file was being created, or a power cut after its name
            # was made durable but not its size (never synced): it cannot hold entries yet.
            log.warning("removing unfinished index file %s", paths[-1])
            paths.pop().unlink()
        for path in paths:
            service.files.append(IndexFile.load_blocking(path, slot_num, index_num))
        return service

    def mark_unsynced(self) -> None:
        """After a process crash: the newest entries may sit in the page cache only; the next
        flush syncs the last two files (as ``ConsumeQueue.mark_unsynced``)."""
        for index in self.files[-2:]:
            index.dirty = True

    # --- building ------------------------------------------------------------------------
    @property
    def indexed_until(self) -> int:
        """Commit log offset of the newest indexed record (entries below it exist)."""
        return self.files[-1].end_phy_offset if self.files else 0

    def entries_for(self, requests: Iterable[DispatchRequest]) -> list[IndexEntry]:
        """Index entries of a chunk, in log order: keys are gathered first and hashed in one
        vectorized pass (``index_key_hashes``)."""
        keys: list[str] = []
        offsets: list[int] = []
        stamps: list[int] = []
        already = self.indexed_until
        # A fresh newest file inherits the previous file's end offset, so it counts too.
        has_entries = bool(self.files) and (len(self.files) > 1 or self.files[-1].index_count > 1)
        for req in requests:
            offset = req.commit_log_offset
            if has_entries and offset <= already:
                continue
            if req.sys_flag & 0xC == SYSFLAG_TRANSACTION_ROLLBACK:
                continue
            topic, stamp = req.topic, req.store_timestamp
            if req.uniq_key:
                keys.append(f"{topic}#{req.uniq_key}")
                offsets.append(offset)
                stamps.append(stamp)
            for key in req.keys:
                keys.append(f"{topic}#{key}")
                offsets.append(offset)
                stamps.append(stamp)
        return list(zip(index_key_hashes(keys), offsets, stamps, strict=True))

    def entries_for_columns(self, columns: DispatchColumns) -> IndexColumns:
        """``entries_for`` on a columnar chunk: the decoder already hashed the keys, so this
        only drops the keys of rolled-back records and of records already indexed."""
        rows = columns.key_records
        if not len(rows):
            return EMPTY_COLUMNS
        offsets = columns.offsets[rows]
        keep = columns.sys_flags[rows] & 0xC != SYSFLAG_TRANSACTION_ROLLBACK
        # A fresh newest file inherits the previous file's end offset, so it counts too.
        if self.files and (len(self.files) > 1 or self.files[-1].index_count > 1):
            keep &= offsets > self.indexed_until
        if keep.all():
            return IndexColumns(columns.key_hashes, offsets, columns.store_timestamps[rows])
        rows = rows[keep]
        return IndexColumns(columns.key_hashes[keep], offsets[keep], columns.store_timestamps[rows])

    def put_entries_nowait(self, entries: IndexColumns | list[IndexEntry]) -> int:
        """Write what fits in the newest file without creating one (no await). Returns count."""
        if not len(entries) or not self.files:
            return 0
        return self.files[-1].put_entries(entries)

    async def put_entries(self, entries: IndexColumns | list[IndexEntry]) -> None:
        done = self.put_entries_nowait(entries)
        while done < len(entries):
            await self.roll()
            done += self.files[-1].put_entries(entries[done:])

    def put_entries_blocking(self, entries: IndexColumns | list[IndexEntry]) -> None:
        """As ``put_entries``, creating files in the calling thread (recovery, before the
        store serves anything)."""
        done = self.put_entries_nowait(entries)
        while done < len(entries):
            self.files.append(self._create_next_blocking())
            done += self.files[-1].put_entries(entries[done:])

    async def roll(self) -> IndexFile:
        """Start a new file (in a thread: file creation and the map of ~420 MB)."""
        new = await asyncio.to_thread(self._create_next_blocking)
        self.files.append(new)
        return new

    def _create_next_blocking(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        created = IndexFile.create_blocking(
            self.directory / self._next_name(),
            self.slot_num,
            self.index_num,
            last.end_phy_offset if last else 0,
            last.end_timestamp if last else 0,
        )
        self.dir_syncs.add(self.directory)  # its name: see ``dir_syncs``
        return created

    @property
    def file_bytes(self) -> int:
        return IndexFile.file_size(self.slot_num, self.index_num)

    def _next_name(self) -> str:
        now = int(time.time() * 1000)
        if self.files:
            # Names must sort in creation order even for files made within one millisecond.
            now = max(now, _name_to_ms(self.files[-1].path.name) + 1)
        return index_file_name(now)

    # --- queries -------------------------------------------------------------------------
    def query_offsets(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[int]:
        """Commit log offsets whose index entry matches ``topic#key`` (by hash) within the
        window, newest file first. The caller re-checks the key on the decoded record."""
        key_hash = self.key_hash(topic, key)
        out: list[int] = []
        for index in reversed(self.files):
            if len(out) >= max_num:
                break
            if index.is_time_matched(begin_ms, end_ms):
                index.select_phy_offsets(key_hash, begin_ms, end_ms, max_num, out)
            if index.begin_timestamp < begin_ms:
                break
        return out

    # --- recovery / retention ------------------------------------------------------------
    def truncate_from_physical_blocking(self, commit_log_end: int) -> int:
        """Drop entries pointing at or beyond the valid end of the CommitLog; files left
        with no entries that start beyond it are deleted. Returns entries removed."""
        removed = 0
        unlinked = False
        while self.files:
            newest = self.files[-1]
            dropped = newest.truncate_from_physical(commit_log_end)
            removed += dropped
            if dropped:
                # Durably, before anything is appended past the end: a cut bringing the
                # entries back would point keys at records that are not their messages.
                newest.flush_blocking()
            if newest.index_count > 1 or len(self.files) == 1:
                break
            if newest.begin_phy_offset < commit_log_end:
                break
            self.files.pop()
            newest.close()
            newest.path.unlink(missing_ok=True)
            unlinked = True
        if unlinked:
            fsync_dir_blocking(self.directory)
        return removed

    def expired_files(self, commit_log_min: int) -> list[IndexFile]:
        """Files (never the newest) whose entries all point below ``commit_log_min``."""
        expired = []
        for index in self.files[:-1]:
            if index.end_phy_offset >= commit_log_min:
                break
            expired.append(index)
        return expired

    def detach_files(self, files: list[IndexFile]) -> None:
        for index in files:
            self.files.remove(index)

    def flush_blocking(self) -> None:
        for index in list(self.files):
            index.flush_blocking()

    def close(self) -> None:
        for index in self.files:
            index.close()
        self.files.clear()
