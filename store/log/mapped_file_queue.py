"""The ordered segments of one log (RocketMQ's MappedFileQueue).

Segments are contiguous and equally sized, so finding the segment of an offset is arithmetic.
The list is copy-on-write (every change assigns a new list, under ``_files_lock`` so a roll on
the loop and a deletion in a thread cannot lose each other's update): flush threads iterate a
snapshot. Only files wholly below the flushed offset are deleted, so a flush thread never
touches a file being closed; a read racing a deletion gets None (the message was removed).

Power loss: ``create_segment_blocking`` returns a segment durable by size and name; at load the
newest segments that came back short and all zeros (named durably, size never synced) are
removed, a short segment with later ones after it refused (commit_log.py's failure policy).
Deletions (retention, truncation) are not made durable: one that a cut undoes is done again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from wharf.store.codec.layout import parse_segment_file_name, segment_file_name
from wharf.store.errors import disk_full_error, is_disk_full
from wharf.store.log.mapped_file import MappedFile, ZeroFill
from wharf.store.paths import fsync_dir_blocking, make_dirs_blocking

log = logging.getLogger(__name__)

ALLOC_SUFFIX = ".alloc"

# Returns a preallocated segment for a start offset, or None when none is ready.
TakePreallocated = Callable[[int], MappedFile | None]


class MappedFileQueue:
    def __init__(self, store_path: str, file_size: int, warm: bool = False) -> None:
        if file_size < 4096 or file_size % 8:
            raise ValueError(f"segment size {file_size} must be >= 4096 and a multiple of 8")
        self.store_path = store_path
        self.file_size = file_size
        self.warm = warm
        self.files: list[MappedFile] = []
        self.flushed_where = 0  # global offset known durable
        self.committed_where = 0  # global offset in the page cache (transient pool)
        self.take_preallocated: TakePreallocated | None = None
        # The preallocated segment for an offset the thread has just linked into place (a
        # synchronous creation lost the race), see AllocateMappedFileService.claim_linked.
        self.claim_linked: TakePreallocated | None = None
        self.on_roll: Callable[[int], None] | None = None  # called with the new segment's offset
        self.sync_creations = 0  # rolls that had to create a segment on the event loop
        self._flush_lock = threading.Lock()
        self._files_lock = threading.Lock()  # held only to swap the list, never across I/O
        self._commit_lock = threading.Lock()

    # --- loading ------------------------------------------------------------------------------
    def load_blocking(self) -> None:
        """Open every segment in the directory (sorted by name); refuse gaps and odd sizes."""
        make_dirs_blocking(self.store_path)
        offsets: list[int] = []
        for name in os.listdir(self.store_path):
            path = os.path.join(self.store_path, name)
            if ALLOC_SUFFIX in name:  # a preallocation interrupted by a crash
                log.warning("removing unfinished preallocated segment %s", path)
                os.unlink(path)
                continue
            try:
                offsets.append(parse_segment_file_name(name))
            except ValueError:
                log.warning("ignoring %s: not a segment file", path)
        offsets.sort()
        self._drop_unsynced_tail_blocking(offsets)
        files: list[MappedFile] = []
        for offset in offsets:
            if offset % self.file_size:
                raise ValueError(
                    f"segment {segment_file_name(offset)} in {self.store_path} does not start at "
                    f"a multiple of the segment size {self.file_size}: wrong size setting?"
                )
            if files and offset != files[-1].file_from_offset + self.file_size:
                raise ValueError(
                    f"segments in {self.store_path} are not contiguous: a gap before "
                    f"{segment_file_name(offset)}"
                )
            path = os.path.join(self.store_path, segment_file_name(offset))
            size = os.path.getsize(path)
            if size < self.file_size and offset != offsets[-1]:
                raise ValueError(
                    f"segment {path} is {size} bytes, not {self.file_size}, and later segments "
                    "follow it: the commit log is damaged in the middle (refusing to start; "
                    "restore the file or move it and every later segment away)"
                )
            files.append(MappedFile.open_blocking(path, self.file_size))
        self.files = files
        if files:
            self.flushed_where = self.committed_where = files[-1].file_from_offset + self.file_size

    def _drop_unsynced_tail_blocking(self, offsets: list[int]) -> None:
        """Remove (from disk and ``offsets``) the newest segments shorter than the segment
        size that hold only zeros: created ahead of the writer, named durably but never
        synced (a power cut gives back a size never made durable: 0 bytes, or a short file).
        Nothing in them was ever acknowledged. A short segment holding data is left for
        ``open_blocking`` to refuse: damage, or a changed size setting."""
        while offsets:
            path = os.path.join(self.store_path, segment_file_name(offsets[-1]))
            size = os.path.getsize(path)
            if size >= self.file_size or not _all_zero_blocking(path):
                return
            log.warning(
                "removing commit log segment %s: %d bytes of zeros instead of %d (created "
                "ahead and never synced before a crash)",
                path,
                size,
                self.file_size,
            )
            os.unlink(path)
            offsets.pop()

    # --- segments -----------------------------------------------------------------------------
    def last(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def first(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding global ``offset`` (None if deleted / not yet created)."""
        files = self.files
        if not files or offset < 0:
            return None
        index = offset // self.file_size - files[0].file_from_offset // self.file_size
        if 0 <= index < len(files):
            return files[index]
        return None

    def roll(self, start: int | None = None) -> MappedFile:
        """Append the next segment (after the last, or offset 0; ``start`` for the first
        segment of an empty replica whose master starts later), preferring a preallocated one.
        Otherwise it is created here, on the caller's thread, without prefault or warm-up (open
        + fallocate + mmap, milliseconds; see store/log/allocate.py for why a roll never
        waits for a preallocation): counted in ``sync_creations``."""
        last = self.last()
        if start is None or last is not None:
            start = 0 if last is None else last.file_from_offset + self.file_size
        mapped = self.take_preallocated(start) if self.take_preallocated else None
        if mapped is None:
            self.sync_creations += 1
            try:
                mapped = create_segment_blocking(self.store_path, start, self.file_size, False)
            except FileExistsError:
                linked = self.claim_linked(start) if self.claim_linked else None
                if linked is None:
                    raise
                mapped = linked
        with self._files_lock:
            self.files = [*self.files, mapped]
        if self.on_roll is not None:
            self.on_roll(start)
        return mapped

    # --- offsets ------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        first = self.first()
        return 0 if first is None else first.file_from_offset

    @property
    def max_offset(self) -> int:
        """End of readable (committed) data."""
        last = self.last()
        return 0 if last is None else last.file_from_offset + last.read_position

    @property
    def max_wrote_offset(self) -> int:
        last = self.last()
        return 0 if last is None else last.file_from_offset + last.wrote_position

    # --- flush / commit (threads) -------------------------------------------------------------
    def flush_blocking(self, least_pages: int = 0) -> int:
        """fdatasync every segment with dirty data up to the current committed end (usually
        one, two right after a roll). Returns the new flushed offset."""
        with self._flush_lock:
            # Only the last target can be short of full, and a full segment is always synced
            # (``_enough_pages``): no target is skipped before another.
            for mapped, _ in self.sync_targets():
                flushed = mapped.flush_blocking(least_pages)
                self.flushed_where = max(self.flushed_where, mapped.file_from_offset + flushed)
            return self.flushed_where

    def sync_targets(self) -> list[tuple[MappedFile, int]]:
        """The segments with data past the flushed offset (the one holding it first: segments
        are contiguous and equally sized), each with its committed position, up to the first
        that is not full; [] when nothing is dirty. ``flush_blocking`` syncs them in a thread;
        on the loop they plan a sync for a thread that runs no Python
        (``sync_engine.NativeSyncEngine``)."""
        files = self.files
        if not files:
            return []
        first = self.flushed_where // self.file_size - files[0].file_from_offset // self.file_size
        targets: list[tuple[MappedFile, int]] = []
        for mapped in files[max(0, first) :]:
            position = mapped.committed_position
            if mapped.file_from_offset + position <= self.flushed_where:
                continue
            targets.append((mapped, position))
            if position < mapped.file_size:
                break
        return targets

    def synced(self, targets: list[tuple[MappedFile, int]]) -> int:
        """Loop: the ``sync_targets`` were synced; returns the new flushed offset."""
        for mapped, position in targets:
            mapped.synced_to(position)
            self.flushed_where = max(self.flushed_where, mapped.file_from_offset + position)
        return self.flushed_where

    def commit_blocking(self, least_pages: int = 0) -> int:
        """transientStorePool: copy buffered data into the files. Returns the committed offset."""
        with self._commit_lock:
            for mapped in self.files:
                if mapped.file_from_offset + mapped.file_size <= self.committed_where:
                    continue
                committed = mapped.commit_blocking(least_pages)
                self.committed_where = max(
                    self.committed_where, mapped.file_from_offset + committed
                )
                if committed < mapped.file_size:
                    break
            return self.committed_where

    # --- truncation and deletion (threads) ----------------------------------------------------
    def truncate_blocking(self, offset: int) -> None:
        """Make ``offset`` the end of the log: positions set there, the rest of its segment
        zeroed, every later segment deleted."""
        keep: list[MappedFile] = []
        doomed: list[MappedFile] = []
        for mapped in self.files:
            if mapped.file_from_offset + self.file_size <= offset:
                keep.append(mapped)
            elif mapped.file_from_offset <= offset:
                local = offset - mapped.file_from_offset
                mapped.zero_range_blocking(local, self.file_size)
                mapped.set_positions(local)
                keep.append(mapped)
            else:
                doomed.append(mapped)
        with self._files_lock:
            self.files = keep
        for mapped in doomed:
            # An empty segment there is a preallocation a crash left behind: routine.
            empty = mapped.raw[:4] == b"\0\0\0\0"
            log.log(
                logging.INFO if empty else logging.WARNING,
                "deleting %ssegment %s beyond the log end %d",
                "empty preallocated " if empty else "",
                mapped.path,
                offset,
            )
            mapped.destroy_blocking()
        self.flushed_where = min(self.flushed_where, offset)
        self.committed_where = min(self.committed_where, offset)

    def delete_expired_blocking(
        self,
        expired_ms: int,
        delete_interval_ms: int,
        force: bool,
        max_batch: int,
        now_ms: int | None = None,
        keep_from_offset: int | None = None,
    ) -> int:
        """Delete segments last modified more than ``expired_ms`` ago (all of them, oldest
        first, when ``force``), at most ``max_batch`` per call, never the last segment nor one
        holding data not yet flushed or at/after ``keep_from_offset`` (the CommitLog passes
        the dispatch offset: undispatched records would never reach their ConsumeQueue).
        Returns how many were deleted."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        keep_from = self.flushed_where
        if keep_from_offset is not None:
            keep_from = min(keep_from, keep_from_offset)
        files = self.files
        doomed: list[MappedFile] = []
        for mapped in files[:-1]:
            if len(doomed) >= max_batch:
                break
            if mapped.file_from_offset + self.file_size > keep_from:
                break
            mtime_ms = int(os.path.getmtime(mapped.path) * 1000)
            if not force and now_ms - mtime_ms < expired_ms:
                break  # segments age in order: the next ones are younger
            doomed.append(mapped)
        if not doomed:
            return 0
        gone = {id(mapped) for mapped in doomed}
        with self._files_lock:
            self.files = [mapped for mapped in self.files if id(mapped) not in gone]
        for i, mapped in enumerate(doomed):
            mapped.destroy_blocking()
            if delete_interval_ms > 0 and i + 1 < len(doomed):
                time.sleep(delete_interval_ms / 1000)  # spread the unlink I/O (RocketMQ)
        return len(doomed)

    def close(self) -> None:
        for mapped in self.files:
            mapped.close()


def create_segment_blocking(
    store_path: str,
    offset: int,
    file_size: int,
    warm: bool,
    prefault: bool = False,
    zero_fill: ZeroFill | None = None,
) -> MappedFile:
    """Create a segment under a temporary name and link it into place, so a concurrent creator
    of the same segment (preallocation vs. a synchronous roll) loses cleanly with
    FileExistsError instead of clobbering a live file. ``prefault`` only off the event loop.
    A full disk raises DiskFullError (nothing left behind). Returns once the segment's size
    (``MappedFile.create_blocking``) and name (the directory fsync) are durable."""
    final = os.path.join(store_path, segment_file_name(offset))
    tmp = f"{final}{ALLOC_SUFFIX}-{threading.get_ident()}"
    try:
        make_dirs_blocking(store_path)
        scratch = MappedFile.create_blocking(
            tmp, file_size, warm, name_offset=offset, prefault=prefault, zero_fill=zero_fill
        )
        try:
            os.link(tmp, final)
        except BaseException:
            scratch.destroy_blocking()
            raise
    except OSError as exc:
        if is_disk_full(exc):  # a new directory entry can need a block too
            raise disk_full_error(exc, f"creating commit log segment {final}") from exc
        raise
    os.unlink(tmp)
    # The name durable before any record in the segment can be acknowledged: a SYNC_FLUSH
    # fdatasync makes the data durable, never the file's directory entry (commits the link
    # and the unlink of the temporary name). Off the write path: segments are created ahead.
    fsync_dir_blocking(store_path)
    scratch.path = final
    return scratch


def _all_zero_blocking(path: str, chunk: int = 1 << 20) -> bool:
    with open(path, "rb") as handle:
        while data := handle.read(chunk):
            if data.count(0) != len(data):
                return False
    return True
