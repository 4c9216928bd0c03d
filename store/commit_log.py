"""The CommitLog: one append-only log of message records for all topics, in mmap'd segments.

API (the MessageStore facade drives it; one event loop owns it)::

    cl = CommitLog(config, observer=None, checkpoint=None)
    cl.load_blocking()                                   # open segments (thread)
    end = cl.recover_blocking(abnormal, checkpoint)      # validate, truncate torn tail (thread)
    cl.start()                                           # flush/commit/allocate services
    r = cl.append(topic, queue_id, first_queue_offset, messages, store_timestamp=None)
    ok = await cl.wait_flushed(r.end_offset)             # SYNC_FLUSH; False = FLUSH_DISK_TIMEOUT
    cl.wakeup_flush()                                    # ASYNC_FLUSH
    cl.read_message(offset, size=None) / cl.read_bytes(offset, size)
    cl.read_messages(offset, max_count, max_bytes)       # consecutive records, skips blank tails
    batch = cl.iter_dispatch(from_offset, max_bytes)     # DispatchBatch(requests, next_offset)
    cl.min_offset / cl.max_offset / cl.wrote_offset / cl.flushed_offset / cl.committed_offset
    cl.store_timestamp_at(offset) / cl.earliest_message_time()
    cl.read_store_timestamp(offset, size=None)
    cl.delete_expired_files_blocking(expired_ms, force, delete_interval_ms, max_batch, now_ms)
    await cl.delete_expired(expired_ms, delete_interval_ms, force, max_batch, now_ms)
    await cl.flush()                                     # sync now -> flushed offset
    cl.truncate_blocking(offset)
    cl.write_error / cl.writable / cl.flush_count / cl.last_flush_seconds
    await cl.shutdown(); cl.close()                      # stop services + final flush; unmap

``max_offset`` is the end of READABLE data (== ``wrote_offset`` unless the transient store pool
holds uncommitted appends); dispatch and reads stop there.

Failure policy (LevelDB log_reader style, written down):

- Appends validate the whole batch before writing a byte (InvalidMessageError); a batch larger
  than a segment is invalid. A batch never spans segments: the tail gets the blank marker.
- A failed fdatasync / commit is STICKY: the state of the file is unknown, so every later append
  and every flush waiter gets FlushFailedError (until restart and recovery).
- Recovery walks records from a start point and stops at the first record that is not valid:
  zeros (END) are the normal end of data; a record whose size runs past the segment, whose
  magic is wrong, whose sizes do not add up or whose PHYSICALOFFSET field is not its own offset
  is a torn tail (so is a record whose last bytes were zeroed: see ``check_record``); a body
  CRC mismatch is corruption. Either way it is LOGGED with the offset and
  treated as the end of valid data: the rest of that segment is zeroed and later segments are
  deleted. We never skip a bad record to serve data after it: the ConsumeQueue must only point
  at a contiguous valid prefix, and a record after a corrupt one cannot be trusted to start
  where the corrupt one says it ends.
- Limits of detection, inherited from RocketMQ's format: BODYCRC covers the body only, so a
  flipped bit in other header fields or inside the topic/properties text goes unnoticed.
- Start point: a CRC-valid checkpoint's ``physic_offset`` (everything below it was fdatasynced
  before the checkpoint was written) when the record there checks out; else, after a crash,
  the newest segment whose first record is older than the checkpoint timestamps (RocketMQ),
  else the first segment; for a normal restart the last three segments (RocketMQ). Data below
  the start point is trusted without reading it: that is what makes restarts fast.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from store.allocate_service import AllocateMappedFileService
from store.checkpoint import StoreCheckpoint
from store.config import SYNC_FLUSH, StoreConfig
from store.errors import (
    CorruptRecordError,
    FlushFailedError,
    InvalidMessageError,
    StoreNotWritableError,
    StoreShutDownError,
)
from store.flush_service import CommitRealTimeService, FlushRealTimeService
from store.format import (
    BLANK_HEADER,
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    OFFSET_STORE_TIMESTAMP,
    RECORD_BLANK,
    RECORD_CORRUPT,
    RECORD_END,
    STORE_TIMESTAMP,
    DispatchRequest,
    ReadableBuffer,
    check_record,
    decode_dispatch,
    decode_record,
    encode_batch,
)
from store.group_commit import GroupCommitService
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.model import AppendResult, MessageInput, StoredMessage
from store.transient_pool import TransientStorePool

log = logging.getLogger(__name__)

NORMAL_RECOVERY_SEGMENTS = 3  # RocketMQ recoverNormally starts from the third-to-last file


class DispatchBatch(NamedTuple):
    requests: list[DispatchRequest]
    next_offset: int  # where the next iter_dispatch call continues


class CommitLog:
    def __init__(
        self,
        config: StoreConfig,
        observer: Any = None,
        checkpoint: StoreCheckpoint | None = None,
    ) -> None:
        """``observer``: optional ``StoreObserver`` (on_flush, on_group_commit)."""
        self.config = config
        self.observer = observer
        self.checkpoint = checkpoint
        self.store_path = os.path.join(config.store_path_root_dir, "commitlog")
        self.file_size = config.mapped_file_size_commit_log
        self.queue = MappedFileQueue(
            self.store_path, self.file_size, warm=config.warm_mapped_file_enable
        )
        self._io = ThreadPoolExecutor(2, thread_name_prefix="commitlog-io")
        self.transient_pool: TransientStorePool | None = None
        if config.transient_store_pool_enable:
            if config.flush_disk_type == SYNC_FLUSH:
                log.warning("transientStorePoolEnable needs ASYNC_FLUSH (as RocketMQ): ignored")
            else:
                self.transient_pool = TransientStorePool(
                    config.transient_store_pool_size, self.file_size
                )
        self.allocator = AllocateMappedFileService(self.queue)
        self.group_commit = GroupCommitService(
            self._sync_blocking,
            lambda: self.queue.flushed_where,
            config.sync_flush_timeout / 1000,
            self._after_group_commit,
            self._mark_flush_failed,
            self._io,
        )
        self.flush_service = FlushRealTimeService(
            self._flush_blocking,
            lambda: self.queue.flushed_where,
            config.flush_interval_commit_log,
            config.flush_commit_log_least_pages,
            config.flush_commit_log_thorough_interval,
            self._after_async_flush
            if config.flush_disk_type != SYNC_FLUSH
            else self._after_sync_checkpoint_tick,
            self._mark_flush_failed,
            self._io,
            flush_data=config.flush_disk_type != SYNC_FLUSH,
        )
        self.commit_service: CommitRealTimeService | None = None
        if self.transient_pool is not None:
            self.commit_service = CommitRealTimeService(
                self.queue.commit_blocking,
                config.commit_interval_commit_log,
                config.commit_commit_log_least_pages,
                self._after_commit,
                self._mark_flush_failed,
                self._io,
            )
        self._error: StoreNotWritableError | None = None
        self._started = False
        self._closed = False
        self._io_closed = False
        self.last_store_timestamp = 0  # of the last appended record
        self._durable_timestamp = 0  # of a record known flushed (checkpoint physic timestamp)
        self.messages_put_total = 0
        self.bytes_put_total = 0
        self.flush_count = 0  # syncs that moved the flushed offset
        self.last_flush_seconds = 0.0

    # === lifecycle ==============================================================================
    def load_blocking(self) -> None:
        self.queue.load_blocking()
        if self.transient_pool is not None:
            self.transient_pool.init_blocking()

    def start(self) -> None:
        """Start the services on the running loop; preallocate the next segments."""
        if self._closed:
            raise StoreShutDownError("the commit log was shut down")
        self._started = True
        self.allocator.start()
        last = self.queue.last()
        self.allocator.request_after(last.file_from_offset if last else -self.file_size)
        self.group_commit.start()
        self.flush_service.start()
        if self.commit_service is not None:
            self.commit_service.start()

    async def shutdown(self, close_files: bool = False) -> None:
        """Stop the services (each finishes its last commit/flush), sync once more, write the
        checkpoint. Reads keep working until ``close()`` (or pass ``close_files=True``)."""
        if self._closed or self._io_closed:
            return
        if self._error is None:
            self._error = StoreShutDownError("the store is shutting down")
        if self.commit_service is not None:
            await self.commit_service.stop()
        await self.flush_service.stop()
        await self.group_commit.stop()
        await self.allocator.stop()
        if not isinstance(self._error, FlushFailedError):
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._io, self._sync_blocking)
            self._advance_checkpoint(self.queue.flushed_where)
            if self.checkpoint is not None:
                await loop.run_in_executor(self._io, self.checkpoint.flush_blocking)
        self._io_closed = True
        self._io.shutdown(wait=True)
        if close_files:
            self.close()

    def close(self) -> None:
        """Unmap every segment (no reads after this)."""
        self._closed = True
        if self._error is None:
            self._error = StoreShutDownError("the store is shut down")
        self._io_closed = True
        self._io.shutdown(wait=False)
        self.queue.close()

    # === writes =================================================================================
    @property
    def writable(self) -> bool:
        return self._error is None

    @property
    def not_writable_reason(self) -> str:
        return "" if self._error is None else str(self._error)

    @property
    def write_error(self) -> StoreNotWritableError | None:
        """Why appends are refused (sticky flush failure, shutdown), or None."""
        return self._error

    def append(
        self,
        topic: str,
        queue_id: int,
        first_queue_offset: int,
        messages: Sequence[MessageInput],
        store_timestamp: int | None = None,
    ) -> AppendResult:
        """Encode and write a batch as consecutive records (queue offsets first_queue_offset,
        +1, ...); ``store_timestamp`` defaults to now (ms). Never awaits. Raises
        InvalidMessageError (nothing written) or StoreNotWritableError (sticky flush failure,
        shutdown)."""
        if self._error is not None:
            raise self._error
        if store_timestamp is None:
            store_timestamp = int(time.time() * 1000)
        mapped = self.queue.last()
        if mapped is None or mapped.is_full:
            mapped = self._roll()
        start = mapped.file_from_offset + mapped.wrote_position
        config = self.config
        batch = encode_batch(
            topic,
            queue_id,
            first_queue_offset,
            messages,
            start,
            store_timestamp,
            config.store_host,
            config.max_message_size,
        )
        size = len(batch.data)
        if size + END_FILE_MIN_BLANK_LENGTH > mapped.remaining:
            if size + END_FILE_MIN_BLANK_LENGTH > self.file_size:
                raise InvalidMessageError(
                    f"the batch encodes to {size} bytes, more than a commit log segment holds "
                    f"({self.file_size - END_FILE_MIN_BLANK_LENGTH}): send fewer messages per batch"
                )
            mapped.append_blank()
            mapped = self._roll()
            start = mapped.file_from_offset
            batch = encode_batch(
                topic,
                queue_id,
                first_queue_offset,
                messages,
                start,
                store_timestamp,
                config.store_host,
                config.max_message_size,
            )
        mapped.append(batch.data, store_timestamp)
        self.last_store_timestamp = store_timestamp
        self.messages_put_total += len(batch.sizes)
        self.bytes_put_total += size
        return AppendResult(
            topic,
            queue_id,
            first_queue_offset,
            batch.offsets,
            batch.sizes,
            store_timestamp,
            start + size,
        )

    def _roll(self) -> MappedFile:
        mapped = self.queue.roll()
        if self.transient_pool is not None:
            buffer = self.transient_pool.borrow()
            if buffer is not None:
                mapped.attach_write_buffer(buffer)
        return mapped

    # === durability =============================================================================
    async def wait_flushed(self, end_offset: int) -> bool:
        """SYNC_FLUSH: True once everything below ``end_offset`` is on disk, False if that took
        longer than syncFlushTimeout (FLUSH_DISK_TIMEOUT). FlushFailedError if a sync failed."""
        if isinstance(self._error, FlushFailedError):
            raise self._error
        if self.queue.flushed_where >= end_offset:
            return True
        if end_offset > self.queue.max_wrote_offset:
            raise ValueError(
                f"cannot wait for offset {end_offset}: the log ends at {self.queue.max_wrote_offset}"
            )
        if not self.group_commit.running:
            raise StoreShutDownError("the commit log's flush services are not running")
        return await self.group_commit.wait_flushed(end_offset)

    async def flush(self) -> int:
        """Commit and sync everything appended so far, now; returns the flushed offset."""
        if isinstance(self._error, FlushFailedError):
            raise self._error
        if self._io_closed:
            raise StoreShutDownError("the commit log was shut down: nothing left to flush")
        started = time.perf_counter()
        before = self.queue.flushed_where
        try:
            flushed = await asyncio.get_running_loop().run_in_executor(
                self._io, self._sync_blocking
            )
        except Exception as exc:
            raise self._mark_flush_failed(exc) from exc
        self._after_async_flush(flushed, time.perf_counter() - started, flushed - before)
        return flushed

    def wakeup_flush(self) -> None:
        """ASYNC_FLUSH: nudge the flush (and commit) service after an append."""
        if self.commit_service is not None:
            self.commit_service.wakeup()
        else:
            self.flush_service.wakeup()

    def _sync_blocking(self) -> int:
        """Group commit / shutdown: everything appended so far, committed and synced."""
        return self._flush_blocking(0, commit_first=self.transient_pool is not None)

    def _flush_blocking(self, least_pages: int, commit_first: bool = False) -> int:
        """Sync and remember the store time of a record known durable. The timestamp is read
        BEFORE the end offset, so a concurrent append can only make it older (safe)."""
        timestamp = self.last_store_timestamp
        mark = self.queue.max_wrote_offset
        if commit_first:
            self.queue.commit_blocking(0)
        flushed = self.queue.flush_blocking(least_pages)
        if flushed >= mark and timestamp > self._durable_timestamp:
            self._durable_timestamp = timestamp
        return flushed

    def _mark_flush_failed(self, exc: BaseException) -> FlushFailedError:
        if not isinstance(self._error, FlushFailedError):
            self._error = FlushFailedError(
                f"commit log sync failed ({exc!r}); writes are refused until the broker is "
                "restarted and recovers: the state of the file after a failed sync is unknown"
            )
            log.critical("%s", self._error)
        return self._error

    def _after_group_commit(self, flushed: int, seconds: float, nbytes: int, waiters: int) -> None:
        self._advance_checkpoint(flushed)
        self.flush_count += 1
        self.last_flush_seconds = seconds
        if self.observer is not None:
            self.observer.on_flush("sync", seconds, nbytes)
            self.observer.on_group_commit(waiters)

    def _after_async_flush(self, flushed: int, seconds: float, nbytes: int) -> None:
        self._advance_checkpoint(flushed)
        if nbytes:
            self.flush_count += 1
            self.last_flush_seconds = seconds
        if self.checkpoint is not None and nbytes and not self._io_closed:
            self._io.submit(self._persist_checkpoint_blocking)
        if self.observer is not None and nbytes:
            self.observer.on_flush("async", seconds, nbytes)

    def _after_sync_checkpoint_tick(self, flushed: int, seconds: float, nbytes: int) -> None:
        """SYNC_FLUSH: group commits advanced the checkpoint; write it every flush interval."""
        if self.checkpoint is not None and nbytes and not self._io_closed:
            self._io.submit(self._persist_checkpoint_blocking)

    def _persist_checkpoint_blocking(self) -> None:
        assert self.checkpoint is not None
        try:
            self.checkpoint.flush_blocking()
        except OSError as exc:
            # Not sticky: the data is durable; only a later recovery starts earlier.
            log.error("writing the checkpoint %s failed: %r", self.checkpoint.path, exc)

    def _after_commit(self) -> None:
        """Return buffers of fully committed segments to the pool; let the flush follow."""
        if self.transient_pool is not None:
            for mapped in self.queue.files[:-1]:
                if (
                    mapped.write_buffer is not None
                    and mapped.committed_position >= mapped.file_size
                ):
                    buffer = mapped.detach_write_buffer()
                    if buffer is not None:
                        self.transient_pool.give_back(buffer)
        self.flush_service.wakeup()

    def _advance_checkpoint(self, flushed: int) -> None:
        checkpoint = self.checkpoint
        if checkpoint is None:
            return
        checkpoint.physic_offset = max(checkpoint.physic_offset, flushed)
        checkpoint.physic_msg_timestamp = max(
            checkpoint.physic_msg_timestamp, self._durable_timestamp
        )

    # === reads ==================================================================================
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

    @property
    def segment_count(self) -> int:
        return len(self.queue.files)

    def read_bytes(self, offset: int, size: int) -> bytes | None:
        """A copy of ``[offset, offset + size)`` if it lies in one segment's readable data."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return None
        return mapped.read(offset - mapped.file_from_offset, size)

    def read_message(self, offset: int, size: int | None = None) -> StoredMessage | None:
        """The message record at ``offset`` (None if deleted, not written, or not a message).
        CorruptRecordError if the bytes there are not a well-formed record."""
        if size is None:
            header = self.read_bytes(offset, BLANK_HEADER.size)
            if header is None:
                return None
            size, magic = BLANK_HEADER.unpack(header)
            if magic != MESSAGE_MAGIC_CODE:
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
        for chunk, base, positions in self._scan(offset, max_count, max_bytes):
            messages.extend(decode_record(chunk, pos, base) for pos in positions)
        return messages

    def iter_dispatch(self, from_offset: int, max_bytes: int = 1024 * 1024) -> DispatchBatch:
        """Decode the records from ``from_offset`` for dispatch: at most about ``max_bytes`` (at
        least one record), never past the readable end; blank tails are skipped. A
        ``from_offset`` below the minimum (deleted) continues at the minimum."""
        requests: list[DispatchRequest] = []
        next_offset = max(from_offset, self.queue.min_offset)
        for chunk, base, positions in self._scan(next_offset, 1 << 62, max_bytes):
            for pos in positions:
                requests.append(decode_dispatch(chunk, pos, base))
        if requests:
            last = requests[-1]
            next_offset = last.commit_log_offset + last.size
        return DispatchBatch(requests, self._skip_blank(next_offset))

    def _skip_blank(self, offset: int) -> int:
        """If ``offset`` is a blank tail, the start of the next segment."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return offset
        header = mapped.read(offset - mapped.file_from_offset, BLANK_HEADER.size)
        if header is not None and BLANK_HEADER.unpack(header)[1] == BLANK_MAGIC_CODE:
            return mapped.file_from_offset + self.file_size
        return offset

    def _scan(
        self, offset: int, max_count: int, max_bytes: int
    ) -> list[tuple[ReadableBuffer, int, list[int]]]:
        """Record positions from ``offset``, in place in each segment's map (no chunk copy:
        the decoders copy out only what they keep, and a 1 MiB copy costs more in cache misses
        than it saves): [(map, segment start offset, [positions in the segment])]. At least one
        record, then as many as fit ``max_bytes``; stops at the readable end."""
        result: list[tuple[ReadableBuffer, int, list[int]]] = []
        count = 0
        budget = max_bytes
        unpack = BLANK_HEADER.unpack_from
        while count < max_count:
            mapped = self.queue.find(offset)
            if mapped is None:
                break
            buf = mapped.raw
            limit = mapped.read_position
            start = pos = offset - mapped.file_from_offset
            positions: list[int] = []
            end_of_segment = False
            try:
                while count < max_count and pos + BLANK_HEADER.size <= limit:
                    total, magic = unpack(buf, pos)
                    if magic == BLANK_MAGIC_CODE:
                        end_of_segment = True
                        break
                    if (positions or result) and pos - start + total > budget:
                        break  # before validating: a caller may stop just short of bad data
                    if magic != MESSAGE_MAGIC_CODE or total <= 0 or pos + total > limit:
                        raise CorruptRecordError(
                            mapped.file_from_offset + pos,
                            f"bad record header (magic 0x{magic:08X}, size {total})",
                        )
                    positions.append(pos)
                    pos += total
                    count += 1
            except ValueError:  # the segment was deleted (closed) under us: nothing to read
                break
            if positions:
                result.append((buf, mapped.file_from_offset, positions))
            budget -= pos - start
            if not end_of_segment or budget <= 0:
                break
            offset = mapped.file_from_offset + self.file_size
        return result

    # === recovery ===============================================================================
    def recover_blocking(self, abnormal: bool, checkpoint: StoreCheckpoint | None = None) -> int:
        """Validate from the start point (see the module docstring), truncate after the last
        valid record, and return that offset: the commit log's max offset. Run in a thread."""
        checkpoint = checkpoint if checkpoint is not None else self.checkpoint
        files = self.queue.files
        if not files:
            return 0
        index, pos = self._recovery_start(abnormal, checkpoint)
        check_crc = self.config.check_crc_on_recover
        log.info(
            "commit log %s recovery from offset %d (%s restart, CRC %s)",
            self.store_path,
            files[index].file_from_offset + pos,
            "abnormal" if abnormal else "normal",
            "on" if check_crc else "off",
        )
        while True:
            mapped = files[index]
            raw = mapped.raw
            base = mapped.file_from_offset
            result = check_record(raw, pos, check_crc, base + pos)
            while result > 0:
                pos += result
                result = check_record(raw, pos, check_crc, base + pos)
            if result == RECORD_BLANK and index + 1 < len(files):
                index, pos = index + 1, 0
                continue
            if result == RECORD_BLANK:
                end = base + self.file_size
            else:
                end = base + pos
                if result == RECORD_CORRUPT:
                    log.error(
                        "commit log: invalid record at offset %d (torn write or corruption); "
                        "treating it as the end of valid data and truncating there",
                        end,
                    )
            break
        if result == RECORD_END and pos < self.file_size and index + 1 < len(files):
            log.warning("commit log: data ends at %d inside a segment that is not the last", end)
        self.queue.truncate_blocking(end)
        if checkpoint is not None and checkpoint.physic_offset > end:
            checkpoint.physic_offset = end
        return end

    def _recovery_start(
        self, abnormal: bool, checkpoint: StoreCheckpoint | None
    ) -> tuple[int, int]:
        files = self.queue.files
        if checkpoint is not None and checkpoint.valid and checkpoint.physic_offset > 0:
            start = self._checkpoint_start(checkpoint.physic_offset)
            if start is not None:
                return start
        if not abnormal:
            return max(0, len(files) - NORMAL_RECOVERY_SEGMENTS), 0
        low = checkpoint.min_timestamp if checkpoint is not None else 0
        for index in range(len(files) - 1, -1, -1):
            first_ts = STORE_TIMESTAMP.unpack_from(files[index].raw, OFFSET_STORE_TIMESTAMP)[0]
            if 0 < first_ts <= low:
                return index, 0
        return 0, 0

    def _checkpoint_start(self, offset: int) -> tuple[int, int] | None:
        files = self.queue.files
        first = files[0].file_from_offset
        if offset < first:
            return None  # retention removed it: everything left is newer, validate it all
        index = (offset - first) // self.file_size
        if index >= len(files):
            if offset == files[-1].file_from_offset + self.file_size:
                return len(files) - 1, self.file_size
            log.warning("checkpoint offset %d is beyond the last segment: ignoring it", offset)
            return None
        mapped = files[index]
        pos = offset - mapped.file_from_offset
        result = check_record(mapped.raw, pos, True, offset)
        if (
            result > 0
            or result == RECORD_BLANK
            or (result == RECORD_END and index == len(files) - 1)
        ):
            return index, pos
        log.warning("checkpoint offset %d is not at a valid record: validating more", offset)
        return None

    # === truncation and retention (threads) =====================================================
    def truncate_blocking(self, offset: int) -> None:
        """Make ``offset`` (a record boundary) the end of the log."""
        if not self.queue.min_offset <= offset <= self.queue.max_wrote_offset:
            raise ValueError(
                f"truncate offset {offset} outside [{self.queue.min_offset}, "
                f"{self.queue.max_wrote_offset}]"
            )
        self.queue.truncate_blocking(offset)
        if self.checkpoint is not None and self.checkpoint.physic_offset > offset:
            self.checkpoint.physic_offset = offset

    def delete_expired_files_blocking(
        self,
        expired_ms: int,
        force: bool = False,
        delete_interval_ms: int | None = None,
        max_batch: int | None = None,
        now_ms: int | None = None,
    ) -> int:
        """Delete segments older than ``expired_ms`` (oldest first; any age when ``force``),
        never the last one nor unflushed ones. Returns how many were deleted."""
        return self.queue.delete_expired_blocking(
            expired_ms,
            self.config.delete_commit_log_files_interval
            if delete_interval_ms is None
            else delete_interval_ms,
            force,
            self.config.delete_file_batch_max if max_batch is None else max_batch,
            now_ms,
        )

    async def delete_expired(
        self,
        expired_ms: int,
        delete_interval_ms: int | None = None,
        force: bool = False,
        max_batch: int | None = None,
        now_ms: int | None = None,
    ) -> int:
        """``delete_expired_files_blocking`` in a thread."""
        return await asyncio.to_thread(
            self.delete_expired_files_blocking,
            expired_ms,
            force,
            delete_interval_ms,
            max_batch,
            now_ms,
        )

    @property
    def sync_segment_creations(self) -> int:
        """Rolls that created a segment on the event loop (preallocation was late)."""
        return self.queue.sync_creations
