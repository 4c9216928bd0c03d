"""One mmap'd segment of a log: fixed size, named by its 20-digit start offset.

Positions (bytes from the start of the file), as RocketMQ's MappedFile:

- ``wrote_position``: end of appended data (in the write buffer when one is attached);
- ``committed_position``: end of data in the file's page cache (== wrote without a buffer);
- ``flushed_position``: end of data known durable (fdatasync returned).

Why fdatasync and not ``mmap.flush``: a MAP_SHARED mapping lives in the page cache, so syncing the
file descriptor makes mmap writes durable; ``mmap.flush`` (msync) holds the GIL for the whole
sync while ``os.fdatasync`` releases it (GUIDE.md, measured). Every ``*_blocking`` method runs in a
thread. Reads copy bytes out: a memoryview of the map kept alive would make ``close`` fail.

Disk full (ENOSPC/EDQUOT) never kills the process nor leaves half a batch behind: the file is
posix_fallocate'd when created (a full disk fails there, not as SIGBUS on a page fault; the map
is only ever read), appends go through ``pwrite``, and a write that fails part-way zeroes the
bytes it did write (overwriting written blocks needs no new space) and leaves
``wrote_position`` where it was, so no later recovery or dispatch can serve records that were
never acknowledged. The errors raised are DiskFullError (store/errors.py); if even the undo
fails, FlushFailedError (sticky: the bytes past the write position are unknown).

Threading: appends and position updates happen on the event loop thread; ``flush_blocking`` and
``commit_blocking`` run in a thread and only read positions captured at their start, so they
never see a half-updated value (ints are replaced atomically under the GIL).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import threading
import time

from wharf.store.codec.layout import parse_segment_file_name, segment_file_name
from wharf.store.codec.records import encode_blank
from wharf.store.errors import FlushFailedError, disk_full_error, is_disk_full
from wharf.store.paths import create_file_blocking

log = logging.getLogger(__name__)

OS_PAGE_SIZE = mmap.PAGESIZE
_ZERO_CHUNK = bytes(1 << 20)
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_ZERO_RANGE = 0x10
_SYNC_FILE_RANGE_WRITE = 2  # start write-back of the range's dirty pages, do not wait

# The sync call, looked up at call time: tests replace it to inject slow or failing syncs.
fdatasync = os.fdatasync


class MappedFile:
    """Open with ``create_blocking`` or ``open_blocking``; both map the whole file."""

    def __init__(self, path: str, file_size: int, fd: int, name_offset: int | None = None) -> None:
        self.path = path
        # name_offset: the start offset when ``path`` is a temporary name (preallocation).
        self.file_from_offset = (
            parse_segment_file_name(os.path.basename(path)) if name_offset is None else name_offset
        )
        self.file_name = segment_file_name(self.file_from_offset)
        self.file_size = file_size
        self._fd = fd
        self._mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.wrote_position = 0
        self._committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last record appended (ms)
        self.write_buffer: bytearray | None = None  # transientStorePool buffer, if attached
        # Bytes from the start known to be written (records or zeros), not fallocated-only:
        # the commit log's ``FillAhead`` keeps zeros written ahead of the writer.
        self.zeroed_to = 0
        self.closed = False

    # --- opening ------------------------------------------------------------------------------
    @classmethod
    def create_blocking(
        cls,
        path: str,
        file_size: int,
        warm: bool = False,
        name_offset: int | None = None,
        prefault: bool = False,
        zero_fill: ZeroFill | None = None,
    ) -> MappedFile:
        """Create and preallocate (posix_fallocate: overwriting allocated blocks is ~2x faster
        than extending a file). ``warm``: write and sync zeros over the whole file;
        ``prefault``: read it once so its pages sit in the page cache (see below);
        ``zero_fill``: write and sync zeros at a pace (``ZeroFill``)."""
        try:
            fd = create_file_blocking(path, os.O_RDWR | os.O_EXCL)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full_error(exc, f"creating commit log segment {path}") from exc
            raise
        try:
            os.posix_fallocate(fd, 0, file_size)
            # The size durable now, not at the first data sync: a segment created ahead and
            # named durably (create_segment_blocking) must not come back 0 bytes after a power
            # cut. Creations run in a thread ahead of the writer (store/log/allocate.py).
            os.fsync(fd)
            if warm:
                _warm_blocking(fd, file_size)
            elif zero_fill is not None:
                zero_fill.run_blocking(fd, file_size)
            elif prefault:
                _prefault_blocking(fd, file_size)
            mapped = cls(path, file_size, fd, name_offset)
            if warm:
                mapped.zeroed_to = file_size
            elif zero_fill is not None:
                mapped.zeroed_to = zero_fill.filled
        except BaseException as exc:
            os.close(fd)
            os.unlink(path)
            if isinstance(exc, OSError) and is_disk_full(exc):
                what = f"allocating a {file_size}-byte commit log segment"
                raise disk_full_error(exc, what) from exc
            raise
        return mapped

    @classmethod
    def open_blocking(cls, path: str, file_size: int) -> MappedFile:
        """Open an existing segment. Positions start at the END of the file: recovery moves
        them back to the last valid record (``set_positions``)."""
        actual = os.path.getsize(path)
        if actual != file_size:
            raise ValueError(
                f"segment {path} is {actual} bytes but the configured segment size is "
                f"{file_size}: the size setting changed or the file is damaged"
            )
        fd = os.open(path, os.O_RDWR)
        try:
            mapped = cls(path, file_size, fd)
        except BaseException:
            os.close(fd)
            raise
        mapped.set_positions(file_size)
        return mapped

    # --- positions ----------------------------------------------------------------------------
    @property
    def committed_position(self) -> int:
        return self.wrote_position if self.write_buffer is None else self._committed_position

    @property
    def read_position(self) -> int:
        """Readers see data once it is in the file's page cache (committed)."""
        return self.committed_position

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def set_positions(self, position: int) -> None:
        """Recovery / truncation: all three positions at ``position``."""
        if not 0 <= position <= self.file_size:
            raise ValueError(f"position {position} outside segment of {self.file_size} bytes")
        self.wrote_position = position
        self._committed_position = position
        self.flushed_position = position

    # --- writes (event loop thread) ----------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview, store_timestamp: int = 0) -> int:
        """Copy ``data`` at the write position (one slice assignment); return its file offset."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise ValueError(f"{len(data)} bytes do not fit segment {self.file_name} at {pos}")
        if self.write_buffer is None:
            _pwrite_all(self._fd, data, pos, self.file_name)
        else:
            self.write_buffer[pos:end] = data
        self.wrote_position = end
        if store_timestamp:
            self.store_timestamp = store_timestamp
        return pos

    def write_zeros(self, start: int, end: int) -> None:
        """Zeros over [start, end), at or past the write position (``FillAhead``, on the loop
        as the appends); ``zeroed_to`` then covers them."""
        if start < self.wrote_position or end > self.file_size:
            raise ValueError(f"zeros at {start}-{end} would overwrite records or pass the end")
        with memoryview(_ZERO_CHUNK) as zeros:
            pos = start
            while pos < end:  # zeros over zeros: a failure part-way needs no undo
                pos += os.pwrite(self._fd, zeros[: min(end - pos, len(zeros))], pos)
        self.zeroed_to = max(self.zeroed_to, end)

    def start_writeback_blocking(self, start: int, end: int) -> None:
        """``sync_file_range(WRITE)`` over [start, end) (a thread: the submission takes 50-100
        us here): the write-back of those pages starts now, nothing waits for it. Without the
        libc symbol, nothing: the next fdatasync writes them. The segment may be closed
        meanwhile (retention) and its fd number reused: the call then starts some other
        file's write-back or fails with EBADF, harmless either way."""
        libc = _libc_handle()
        if libc is None or not hasattr(libc, "sync_file_range"):
            return
        call = libc.sync_file_range
        call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        if call(self._fd, start, end - start, _SYNC_FILE_RANGE_WRITE) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"sync_file_range failed: {os.strerror(err)}")

    def append_blank(self) -> None:
        """End the segment: the blank marker over the rest of it (the next record goes to the
        next segment). In a write buffer the whole tail is zeroed: pooled buffers are reused."""
        pos = self.wrote_position
        length = self.file_size - pos
        header = encode_blank(length)
        if self.write_buffer is None:
            _pwrite_all(self._fd, header, pos, self.file_name)  # the tail is already zeros
        else:
            self.write_buffer[pos:] = header + bytes(length - len(header))
        self.wrote_position = self.file_size

    def attach_write_buffer(self, buffer: bytearray) -> None:
        """transientStorePool: later appends land in ``buffer`` until committed to the file."""
        if len(buffer) != self.file_size:
            raise ValueError("write buffer size must equal the segment size")
        self._committed_position = self.wrote_position
        self.write_buffer = buffer

    def detach_write_buffer(self) -> bytearray | None:
        """Return the buffer to its pool once everything in it is committed."""
        buffer = self.write_buffer
        if buffer is not None and self._committed_position < self.wrote_position:
            raise RuntimeError(f"segment {self.file_name} has uncommitted data in its buffer")
        self.write_buffer = None
        return buffer

    # --- blocking I/O (threads) ---------------------------------------------------------------
    def commit_blocking(self, least_pages: int = 0) -> int:
        """transientStorePool: pwrite the buffered range into the file (pwrite releases the GIL,
        unlike a slice copy into the mmap). Returns the new committed position."""
        buffer = self.write_buffer
        if buffer is None:
            return self.wrote_position
        start, end = self._committed_position, self.wrote_position
        if end <= start or not _enough_pages(start, end, least_pages, self.file_size):
            return start
        # Idempotent: a commit that fails (disk full) leaves the committed position alone, and
        # the next one writes the same range again.
        with memoryview(buffer) as view:
            written = 0
            try:
                while start + written < end:
                    written += os.pwrite(self._fd, view[start + written : end], start + written)
            except OSError as exc:
                if is_disk_full(exc):
                    what = f"committing {end - start} bytes to segment {self.file_name}"
                    raise disk_full_error(exc, what) from exc
                raise
        self._committed_position = end
        return end

    def flush_blocking(self, least_pages: int = 0) -> int:
        """fdatasync when at least ``least_pages`` dirty pages (0: whenever anything is dirty).
        Returns the new flushed position. OSError propagates: the caller makes it sticky."""
        target = self.committed_position
        if target <= self.flushed_position:
            return self.flushed_position
        if not _enough_pages(self.flushed_position, target, least_pages, self.file_size):
            return self.flushed_position
        fdatasync(self._fd)
        self.flushed_position = max(self.flushed_position, target)  # a native sync may be ahead
        return self.flushed_position

    def fileno(self) -> int:
        """The file descriptor (a sync thread without Python syncs it: ``sync_engine``)."""
        return self._fd

    def synced_to(self, position: int) -> None:
        """Loop: a sync run elsewhere made everything below ``position`` durable."""
        if position > self.flushed_position:
            self.flushed_position = position

    def zero_range_blocking(self, start: int, end: int) -> None:
        """Zero ``[start, end)`` of the file: metadata-only FALLOC_FL_ZERO_RANGE when the
        filesystem supports it, else write zeros over the chunks that are not zero already."""
        if end <= start:
            return
        if _fallocate_zero_range(self._fd, start, end - start):
            return
        pos = start
        while pos < end:
            n = min(len(_ZERO_CHUNK), end - pos)
            if self._mm[pos : pos + n] != _ZERO_CHUNK[:n]:
                os.pwrite(self._fd, _ZERO_CHUNK[:n], pos)
            pos += n

    # --- reads (copy out) ---------------------------------------------------------------------
    def read(self, pos: int, size: int) -> bytes | None:
        """Copy ``size`` bytes at file position ``pos``; None unless all are readable (or the
        segment was deleted meanwhile)."""
        if pos < 0 or size < 0 or pos + size > self.read_position:
            return None
        try:
            return self._mm[pos : pos + size]
        except ValueError:  # closed by retention between the lookup and the read
            return None

    def read_unchecked(self, pos: int, size: int) -> bytes:
        """Copy bytes regardless of positions (recovery, scans bounded by the caller); b"" if
        the segment was deleted meanwhile."""
        try:
            return self._mm[pos : pos + size]
        except ValueError:
            return b""

    def release_pages(self, start: int, end: int) -> None:
        """Drop this map's page-table entries for file bytes ``[start, end)`` (whole pages
        inside it): the pages stay in the page cache (MAP_SHARED: a dirty one stays dirty there,
        its data and its write-back untouched), and a later read through the map faults them
        back in (~0.3 us per 16 pages, the kernel's fault-around). Why: when the page cache is
        full the kernel reclaims the oldest pages, and a mapped one costs it a reverse-map walk
        and a TLB shoot-down (an interrupt of every CPU running a broker thread) where an
        unmapped one is dropped; see ``CommitLogReads.release_read_pages``. A segment closed
        meanwhile (retention) has nothing left to release."""
        first = -(-max(start, 0) // OS_PAGE_SIZE) * OS_PAGE_SIZE
        last = min(end, self.file_size) // OS_PAGE_SIZE * OS_PAGE_SIZE
        if last <= first or self.closed:
            return
        with contextlib.suppress(ValueError):  # closed by retention since the check
            self._mm.madvise(mmap.MADV_DONTNEED, first, last - first)

    @property
    def raw(self) -> mmap.mmap:
        """The map itself, for ``struct.unpack_from``-style scans that copy nothing out and
        keep no view (recovery). Never keep a memoryview of it."""
        return self._mm

    # --- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._mm.close()
        os.close(self._fd)

    def destroy_blocking(self) -> None:
        """Close and delete the file."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            log.warning("segment %s was already gone when deleting it", self.path)

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.file_name}, wrote={self.wrote_position}, "
            f"committed={self.committed_position}, flushed={self.flushed_position})"
        )


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, pos: int, file_name: str) -> None:
    """Write all of ``data`` at ``pos`` or, as far as the file is concerned, none of it: on an
    error the bytes already written are zeroed again (see the module docstring)."""
    written = 0
    try:
        written = os.pwrite(fd, data, pos)
        if written < len(data):  # short write (regular files: only on errors); finish it
            with memoryview(data) as view:
                while written < len(data):
                    n = os.pwrite(fd, view[written:], pos + written)
                    if n <= 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    written += n
    except OSError as exc:
        if written:
            _undo_partial_write(fd, pos, written, file_name, exc)
        if is_disk_full(exc):
            what = f"writing {len(data)} bytes to commit log segment {file_name}"
            raise disk_full_error(exc, what) from exc
        raise


def _undo_partial_write(fd: int, pos: int, written: int, file_name: str, cause: OSError) -> None:
    """Zero the ``written`` bytes at ``pos`` of a write that failed part-way: they may hold
    whole records of a batch that is not acknowledged, which recovery would otherwise serve
    after a restart. Overwriting blocks just written allocates nothing."""
    try:
        done = 0
        while done < written:
            n = min(len(_ZERO_CHUNK), written - done)
            done += os.pwrite(fd, _ZERO_CHUNK[:n], pos + done)
    except OSError as exc:
        raise FlushFailedError(
            f"a write to commit log segment {file_name} failed part-way ({cause.strerror}) and "
            f"its {written} bytes at {pos} could not be zeroed again ({exc.strerror}): writes are "
            "refused until the broker is restarted"
        ) from cause


def _enough_pages(start: int, end: int, least_pages: int, file_size: int) -> bool:
    if least_pages <= 0 or end >= file_size:  # a full segment is always worth finishing
        return True
    return (end // OS_PAGE_SIZE) - (start // OS_PAGE_SIZE) >= least_pages


def _prefault_blocking(
    fd: int, file_size: int, cancel: threading.Event | None = None, start: int = 0
) -> None:
    """Read the fresh segment once (pread releases the GIL): its zero pages land in the page
    cache, so the writer's first touch of each page is a minor fault instead of allocating and
    zeroing a page. Measured here: mmap copies at ~4.5 GB/s instead of ~0.8-1.3 GB/s, for
    ~0.25-2.4 s of a thread per GiB, no disk writes and only clean (reclaimable) page cache.
    ``cancel`` set: stops at the next 1 MiB chunk. From ``start`` up to ``file_size``."""
    chunk = bytearray(len(_ZERO_CHUNK))
    pos = start
    while pos < file_size and not (cancel is not None and cancel.is_set()):
        n = os.preadv(fd, [chunk], pos)
        if n <= 0:
            break
        pos += n


# The start-up segment's read-ahead: this far past the writer, checked this often. 64 MiB every
# 0.1 s keeps ahead of 640 MB/s of appends (1 KiB messages at ~100k msg/s are ~100 MB/s).
READ_AHEAD_BYTES = 64 << 20
READ_AHEAD_POLL_S = 0.1


def prefault_segment_blocking(mapped: MappedFile, cancel: threading.Event) -> None:
    """``_prefault_blocking`` for a segment already in use (the start-up segment): only the
    pages within ``READ_AHEAD_BYTES`` past its writer, following it until the segment is full
    or ``cancel`` is set (before it is closed). A whole GiB at once cost 1.0-2.5 s of a core
    right after every start, beside the first clients, for pages a quiet broker may not
    reach for days."""
    with contextlib.suppress(OSError, ValueError):  # closed meanwhile: nothing left to warm
        fd, size, pos = mapped.fileno(), mapped.file_size, 0
        while not cancel.is_set():
            wrote = mapped.wrote_position
            if wrote >= size:
                return
            pos = max(pos, wrote)  # pages the writer passed are in the cache already
            end = min(size, wrote + READ_AHEAD_BYTES)
            if pos < end:
                _prefault_blocking(fd, end, cancel, start=pos)
                pos = end
            else:
                cancel.wait(READ_AHEAD_POLL_S)


def _warm_blocking(fd: int, file_size: int) -> None:
    """warmMapedFileEnable: write zeros through the page cache and sync them, in the
    preallocation thread (pwrite and fdatasync release the GIL). Measured here: mmap copies into
    a fallocated-only segment run at ~0.9 GB/s (page faults on unwritten extents), into a
    warmed one at ~8 GB/s. The sync keeps the zero pages out of later flushes of real data."""
    pos = 0
    while pos < file_size:
        n = min(len(_ZERO_CHUNK), file_size - pos)
        os.pwrite(fd, _ZERO_CHUNK[:n], pos)
        pos += n
    os.fdatasync(fd)


# One pwrite + fdatasync. Beside a 10k msg/s group commit (one-off, 6 rounds), 1 MiB steps at
# 32 MB/s took its syncs' p99 to 940 us, 256 KiB steps to 584 (fallocated, no fill: 482-741).
ZERO_FILL_STEP = 256 << 10


class ZeroFill:
    """Zeros written and synced over a new segment, ``bytes_per_s`` at most, in
    ``ZERO_FILL_STEP`` steps, so the extents the writer will fill are written ones (its
    fdatasyncs then commit no extent change: see ``zero_fill_ahead_mbps``) without a burst of
    writeback in front of the group commit's syncs. ``cancel`` (a roll needs the segment now,
    or the store stops) ends the fill where it is: the rest stays fallocated, equally valid."""

    def __init__(self, bytes_per_s: int) -> None:
        self.bytes_per_s = bytes_per_s
        self.cancel = threading.Event()
        self.filled = 0  # bytes zero-filled (read after the creation returns)

    def run_blocking(self, fd: int, file_size: int) -> None:
        step = memoryview(_ZERO_CHUNK)[:ZERO_FILL_STEP]
        due = time.monotonic()
        while self.filled < file_size and not self.cancel.is_set():
            n = min(ZERO_FILL_STEP, file_size - self.filled)
            os.pwrite(fd, step[:n], self.filled)
            os.fdatasync(fd)  # not the module's ``fdatasync``: tests replace that for the log's
            self.filled += n
            due += n / self.bytes_per_s
            self.cancel.wait(max(0.0, due - time.monotonic()))


_libc: list[ctypes.CDLL | None] = []  # loaded on first use


def _libc_handle() -> ctypes.CDLL | None:
    """libc through ctypes, for the calls ``os`` lacks (None when it cannot be found)."""
    if not _libc:
        name = ctypes.util.find_library("c")
        _libc.append(ctypes.CDLL(name, use_errno=True) if name else None)
    return _libc[0]


def _fallocate_zero_range(fd: int, offset: int, length: int) -> bool:
    libc = _libc_handle()
    if libc is None or not hasattr(libc, "fallocate"):
        return False
    fallocate = libc.fallocate
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    rc = fallocate(fd, _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE, offset, length)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    # ENOSPC/EDQUOT: the extent change needs a block; writing zeros over the (allocated) range
    # needs none, so a full disk does not stop recovery from cutting a torn tail.
    if err not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENOSPC, errno.EDQUOT):
        raise OSError(err, f"fallocate(ZERO_RANGE) failed: {os.strerror(err)}")
    return False
