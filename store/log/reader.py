"""Reads of the commit log: offsets, single records, consecutive records, dispatch decoding.

A mixin over ``self.queue`` (a MappedFileQueue) and ``self.file_size`` that ``CommitLog``
inherits, kept apart so the write/durability side and the read side each stay one screenful.
Reads never go past a segment's read position (committed data); records are decoded in place in
the segment map, copying out only what callers keep. Reads run on the event loop: they are
bounded by the caller's byte budget and never block on I/O beyond page-cache hits.
"""

from __future__ import annotations

from typing import NamedTuple

from wharf.store.codec.dispatch import DispatchRequest, decode_dispatches
from wharf.store.codec.layout import (
    BLANK_HEADER,
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    OFFSET_STORE_TIMESTAMP,
    STORE_TIMESTAMP,
)
from wharf.store.codec.records import ReadableBuffer, decode_record, decode_records
from wharf.store.errors import CorruptRecordError
from wharf.store.fast import load
from wharf.store.log.mapped_file_queue import MappedFileQueue
from wharf.store.model import StoredMessage

# The compiled record walk (store/fast/_log_scan.c); None: _scan_python below.
_compiled = load("_log_scan")

_SCAN_STOPPED, _SCAN_END_OF_SEGMENT, _SCAN_CORRUPT = 0, 1, 2
_unpack_header = BLANK_HEADER.unpack_from


def _scan_python(
    buf: ReadableBuffer, pos: int, limit: int, max_count: int, budget: int, any_before: bool
) -> tuple[list[int], int, int, int, int]:
    """One segment's records from ``pos``: (positions, position reached, status, magic,
    size). Stops below ``limit``, after ``max_count`` records, or before a record that would
    take the chunk past ``budget`` bytes -- unless it is the chunk's first (``any_before``:
    earlier segments gave records); a bad header stops it with _SCAN_CORRUPT. The budget is
    checked before the header is validated: a caller may stop just short of bad data."""
    start = pos
    positions: list[int] = []
    while len(positions) < max_count and pos + BLANK_HEADER.size <= limit:
        total, magic = _unpack_header(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            return positions, pos, _SCAN_END_OF_SEGMENT, magic, total
        if (positions or any_before) and pos - start + total > budget:
            break
        if (
            (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2)
            or total <= 0
            or pos + total > limit
        ):
            return positions, pos, _SCAN_CORRUPT, magic, total
        positions.append(pos)
        pos += total
    return positions, pos, _SCAN_STOPPED, 0, 0


def _scan_compiled(
    buf: ReadableBuffer, pos: int, limit: int, max_count: int, budget: int, any_before: bool
) -> tuple[list[int], int, int, int, int]:
    assert _compiled is not None
    return _compiled.scan(buf, pos, limit, max_count, budget, any_before)  # type: ignore[no-any-return]


class DispatchBatch(NamedTuple):
    requests: list[DispatchRequest]
    next_offset: int  # where the next iter_dispatch call continues


_NONE_READ = (1 << 62, 0)


class CommitLogReads:
    queue: MappedFileQueue
    file_size: int
    _released_below = 0  # release_read_pages' progress: below it, released already
    # Reads below it since the last release (``_mapped_again``): their range, or _NONE_READ.
    _again_low, _again_high = _NONE_READ

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    @property
    def wrote_offset(self) -> int:
        return self.queue.max_wrote_offset

    @property
    def committed_offset(self) -> int:
        return self.queue.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_where

    def durable_end(self, sync_flush: bool) -> int:
        """What an acknowledgement covers: the flushed end under SYNC_FLUSH (never past the
        log end), the written end otherwise. Reads and replicas stop here."""
        end = self.queue.max_offset
        return min(self.queue.flushed_where, end) if sync_flush else end

    @property
    def segment_count(self) -> int:
        return len(self.queue.files)

    def read_bytes(self, offset: int, size: int) -> bytes | None:
        """A copy of ``[offset, offset + size)`` if it lies in one segment's readable data."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return None
        if offset < self._released_below:
            self._mapped_again(offset, offset + size)
        return mapped.read(offset - mapped.file_from_offset, size)

    def _mapped_again(self, start: int, end: int) -> None:
        """A read behind ``release_read_pages``' mark maps its pages again (a consumer
        catching up, a replica, a query): the next release takes them out too. One range
        for all such reads between two releases: a catch-up reader moves through one region,
        and releasing everything behind the mark each time would walk its whole page table."""
        if start < self._again_low:
            self._again_low = start
        if end > self._again_high:
            self._again_high = end

    def release_read_pages(self, below: int) -> None:
        """Take every segment's bytes below ``below`` (that earlier calls did not) out of the
        maps (``MappedFile.release_pages``): for bytes dispatched long ago, which readers
        rarely ask for again and the kernel reclaims first when the page cache is full.
        ``tests.bench.topics`` (its broker in a 2 GiB memory cgroup, as a long-running one whose
        page cache is full): the dispatch's reads had left every page mapped, and reclaiming
        them cost the broker's loop ~0.13 us of kernel CPU a 1 KiB message (reverse-map walks,
        unmapping, TLB shoot-down interrupts). Pages read again behind ``below`` since the
        last call (``_mapped_again``) go out again too."""
        again_low, again_high = self._again_low, self._again_high
        if again_low < again_high:  # read again behind the mark since the last release
            self._again_low, self._again_high = _NONE_READ
            self._release(max(again_low, self.queue.min_offset), min(again_high, below))
        if below <= self._released_below:
            return
        start = max(self._released_below, self.queue.min_offset)
        self._released_below = below
        if below > start:
            self._release(start, below)

    @property
    def released_below(self) -> int:
        """``release_read_pages``' mark: bytes below it are out of the maps (but for pages
        read again since, released at the next call)."""
        return self._released_below

    def _release(self, start: int, end: int) -> None:
        for mapped in self.queue.files:
            base = mapped.file_from_offset
            if base >= end:
                break
            if base + mapped.file_size > start:
                mapped.release_pages(start - base, end - base)

    def readable_segment(self, offset: int, size: int) -> tuple[ReadableBuffer, int] | None:
        """(segment map, its start offset) when ``[offset, offset + size)`` lies in one
        segment's readable data: for decoders that copy out only what they keep. Use it at
        once and keep no view: a map closed by retention raises ValueError."""
        mapped = self.queue.find(offset)
        if mapped is None or offset + size > mapped.file_from_offset + mapped.read_position:
            return None
        if offset < self._released_below:
            self._mapped_again(offset, offset + size)
        return mapped.raw, mapped.file_from_offset

    def read_message(self, offset: int, size: int | None = None) -> StoredMessage | None:
        """The message record at ``offset`` (None if deleted, not written, or not a message).
        CorruptRecordError if the bytes there are not a well-formed record."""
        if size is None:
            header = self.read_bytes(offset, BLANK_HEADER.size)
            if header is None:
                return None
            size, magic = BLANK_HEADER.unpack(header)
            if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
                return None
        if size <= 0:
            return None
        data = self.read_bytes(offset, size)
        if data is None:
            return None
        message = decode_record(data, 0)
        if message.commit_log_offset != offset or message.store_size != size:
            raise CorruptRecordError(offset, "record fields do not match the offset/size asked")
        return message

    def store_timestamp_at(self, offset: int) -> int | None:
        data = self.read_bytes(offset + OFFSET_STORE_TIMESTAMP, STORE_TIMESTAMP.size)
        return None if data is None else STORE_TIMESTAMP.unpack(data)[0]

    def read_store_timestamp(self, offset: int, size: int | None = None) -> int | None:
        """STORETIMESTAMP of the record at ``offset`` (``size`` is accepted for callers holding
        a ConsumeQueue unit; the field sits at a fixed position)."""
        return self.store_timestamp_at(offset)

    def earliest_message_time(self) -> int | None:
        first = self.queue.first()
        return None if first is None else self.store_timestamp_at(first.file_from_offset)

    def read_messages(
        self, offset: int, max_count: int, max_bytes: int = 4 * 1024 * 1024
    ) -> list[StoredMessage]:
        """Consecutive messages from ``offset`` (a record start), across blank tails."""
        messages: list[StoredMessage] = []
        for chunk, base, positions in self.scan_records(offset, max_count, max_bytes):
            messages.extend(decode_records(chunk, positions, base))
        return messages

    def iter_dispatch(self, from_offset: int, max_bytes: int = 1024 * 1024) -> DispatchBatch:
        """Decode the records from ``from_offset`` for dispatch: at most about ``max_bytes`` (at
        least one record), never past the readable end; blank tails are skipped. A
        ``from_offset`` below the minimum (deleted) continues at the minimum."""
        requests: list[DispatchRequest] = []
        next_offset = max(from_offset, self.queue.min_offset)
        for chunk, base, positions in self.scan_records(next_offset, 1 << 62, max_bytes):
            requests.extend(decode_dispatches(chunk, positions, base))
        if requests:
            last = requests[-1]
            next_offset = last.commit_log_offset + last.size
        return DispatchBatch(requests, self.skip_blank(next_offset))

    def skip_blank(self, offset: int) -> int:
        """If ``offset`` is a blank tail, the start of the next segment."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return offset
        header = mapped.read(offset - mapped.file_from_offset, BLANK_HEADER.size)
        if header is not None and BLANK_HEADER.unpack(header)[1] == BLANK_MAGIC_CODE:
            return mapped.file_from_offset + self.file_size
        return offset

    def scan_records(
        self, offset: int, max_count: int, max_bytes: int
    ) -> list[tuple[ReadableBuffer, int, list[int]]]:
        """Record positions from ``offset``, in place in each segment's map (no chunk copy:
        the decoders copy out only what they keep, and a 1 MiB copy costs more in cache misses
        than it saves): [(map, segment start offset, [positions in the segment])]. At least one
        record, then as many as fit ``max_bytes``; stops at the readable end."""
        result: list[tuple[ReadableBuffer, int, list[int]]] = []
        count = 0
        budget = max_bytes
        while count < max_count:
            mapped = self.queue.find(offset)
            if mapped is None:
                break
            buf = mapped.raw
            start = offset - mapped.file_from_offset
            scan = _scan_compiled if _compiled is not None else _scan_python
            try:
                positions, pos, status, magic, total = scan(
                    buf, start, mapped.read_position, max_count - count, budget, bool(result)
                )
            except ValueError:  # the segment was deleted (closed) under us: nothing to read
                break
            if status == _SCAN_CORRUPT:
                raise CorruptRecordError(
                    mapped.file_from_offset + pos,
                    f"bad record header (magic 0x{magic:08X}, size {total})",
                )
            if positions:
                result.append((buf, mapped.file_from_offset, positions))
                count += len(positions)
            budget -= pos - start
            if status != _SCAN_END_OF_SEGMENT or budget <= 0:
                break
            offset = mapped.file_from_offset + self.file_size
        return result
