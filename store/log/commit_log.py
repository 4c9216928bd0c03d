"""The CommitLog: one append-only log of message records for all topics, in mmap'd segments.

API (the MessageStore facade drives it; one event loop owns it)::

    cl = CommitLog(config, observer=None, checkpoint=None)
    cl.load_blocking()                                   # open segments (thread)
    end = cl.recover_blocking(abnormal, checkpoint)      # validate, truncate torn tail (thread)
    cl.prepare_blocking()                                # next segment ready (recovery does it)
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
    cl.delete_expired_files_blocking(expired_ms, force, delete_interval_ms, max_batch, now_ms,
                                     keep_from_offset)   # keep_from: the dispatch offset
    await cl.delete_expired(expired_ms, delete_interval_ms, force, max_batch, now_ms,
                            keep_from_offset)
    await cl.flush()                                     # sync now -> flushed offset
    cl.truncate_blocking(offset)
    cl.write_error / cl.writable / cl.flush_count / cl.last_flush_seconds
    await cl.shutdown(); cl.close()                      # stop services + final flush; unmap

Reads come from ``store/log/reader.py`` (a mixin), recovery from
``store/log/recovery.py``; this module holds lifecycle, appends and durability.

``max_offset`` is the end of READABLE data (== ``wrote_offset`` unless the transient store pool
holds uncommitted appends); dispatch and reads stop there.

Failure policy (LevelDB log_reader style, written down):

- Appends validate the whole batch before writing a byte (InvalidMessageError); a batch larger
  than a segment is invalid. A batch never spans segments: the tail gets the blank marker.
- A failed fdatasync / commit is STICKY: the state of the file is unknown, so every later append
  and every flush waiter gets FlushFailedError (until restart and recovery). A sync that failed
  with ENOSPC/EDQUOT is SyncDiskFullError: sticky too, but reported as disk full.
- Disk full (ENOSPC/EDQUOT) from an append's write or a segment creation (roll), or from the
  transient pool's commit, is NOT sticky: nothing of the batch is acknowledged nor left in the
  file (``mapped_file``), the commit log enters its disk-full state (one log line per episode,
  ``not_writable_reason``, ``disk_full_episodes``) and refuses appends with DiskFullError for
  ``DISK_FULL_RETRY_S``; then the next append tries again, and its success ends the episode.
  A failed commit is retried by the commit service (the committed position did not move), and
  the episode ends when one succeeds; appends are refused meanwhile. So when dispatch cannot
  write a consume queue or index file (``report_dispatch_disk_full``), until it can again.
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
- Power loss (which fsync makes what durable; a file's fsync/fdatasync never makes its NAME
  durable, only an fsync of its directory does): a segment is created ahead of the writer in
  the preallocation thread (``create_segment_blocking``; on the loop only when the writer
  outran it), posix_fallocate'd and fsynced (its size), linked into place, and ``commitlog/``
  fsynced (its name) before it is handed over, so no record in it is acknowledged under
  SYNC_FLUSH before the segment survives a power cut; the group commit's fdatasync then makes
  the records durable. The abort marker and the store's directories: ``store/paths.py``; the
  checkpoint: ``checkpoint.py``; queue and index files: ``services/queue_flush.py``. After a cut
  the newest segments may come back 0 bytes or short and all zeros (created ahead, size never
  synced, e.g. by an older version): the load removes them with a warning (they never held an
  acknowledged record), as it removes ``.alloc`` leftovers; a short segment followed by
  another, or a short one holding data, is damage and refused.
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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import accumulate, pairwise
from typing import Any, NamedTuple, TypeVar

import numpy as np
from wharf.store.codec.hosts import born_host_bytes, encode_host
from wharf.store.codec.layout import END_FILE_MIN_BLANK_LENGTH
from wharf.store.codec.records import encode_batch
from wharf.store.config import SYNC_FLUSH, StoreConfig
from wharf.store.errors import (
    DiskFullError,
    FlushFailedError,
    InvalidMessageError,
    ReplicationError,
    StoreNotWritableError,
    StoreShutDownError,
    SyncDiskFullError,
    is_disk_full,
)
from wharf.store.fast.record_check import patch_columns, patch_records
from wharf.store.log.allocate import AllocateMappedFileService
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.fill_ahead import FillAhead
from wharf.store.log.flush import CommitRealTimeService, FlushRealTimeService
from wharf.store.log.group_commit import GroupCommitService
from wharf.store.log.mapped_file import MappedFile
from wharf.store.log.mapped_file_queue import MappedFileQueue, create_segment_blocking
from wharf.store.log.reader import CommitLogReads, DispatchBatch
from wharf.store.log.recovery import recover_queue_blocking
from wharf.store.log.sync_engine import (
    NativeSyncEngine,
    SyncEngine,
    SyncPlan,
    ThreadSyncEngine,
    native_syncer_type,
)
from wharf.store.log.transient_pool import TransientStorePool
from wharf.store.model import AppendResult, MessageInput

log = logging.getLogger(__name__)

__all__ = [
    "AppendedMany",
    "CommitLog",
    "DispatchBatch",
    "RecordsBatch",
]  # DispatchBatch is part of iter_dispatch's API

# After a disk-full failure, appends are refused this long before one tries again: a try on a
# full disk costs a failed pwrite or a failed open + posix_fallocate of a segment (a few ms
# for 1 GiB on ext4), so at most one a second, while a freed disk is used within a second.
DISK_FULL_RETRY_S = 1.0


_W = TypeVar("_W")


class RecordsBatch(NamedTuple):
    """One queue's checked records for ``append_records_many`` (``positions``: where each
    starts in ``data``, from ``record_check.check_records``)."""

    topic: str
    queue_id: int
    first_queue_offset: int
    data: bytes | memoryview
    positions: np.ndarray


class AppendedMany(NamedTuple):
    """Where ``append_records_many``'s batches landed, as columns (per-batch result objects
    cost ~4 us a batch at 32 topics' batches a request): batch i is ``counts[i]``
    records, following batch i-1's, at commit log ``offsets`` of ``sizes`` bytes (int64)."""

    offsets: np.ndarray
    sizes: np.ndarray
    counts: list[int]
    store_timestamp: int

    @property
    def end_offset(self) -> int:
        """The commit log offset right after the last record."""
        return int(self.offsets[-1] + self.sizes[-1])

    def first_offsets(self) -> list[int]:
        """Each batch's first record's commit log offset."""
        counts = np.asarray(self.counts, dtype=np.int64)
        return self.offsets[np.cumsum(counts) - counts].tolist()  # type: ignore[no-any-return]


class _DiskFull(NamedTuple):
    """The disk-full state, replaced as a whole (the commit thread sets it too)."""

    error: DiskFullError
    retry_at: float  # time.monotonic() from which an append may try again
    source: str  # "append" (a write or roll), "commit" (transient pool) or "dispatch" (queues)


class CommitLog(CommitLogReads):
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
        fill_mbps = config.zero_fill_ahead_mbps if config.flush_disk_type == SYNC_FLUSH else 0
        self.allocator = AllocateMappedFileService(self.queue, zero_fill_bps=fill_mbps * 10**6)
        # The segment being written, zero-filled ahead of the writer (those made ahead are the
        # allocator's): fdatasyncs into written extents log no extent change (fill_ahead.py).
        self.fill_ahead = FillAhead(fill_mbps * 10**6, self._io) if fill_mbps else None
        self.group_commit = GroupCommitService(
            self._sync_engine(config),
            lambda: self.queue.flushed_where,
            config.sync_flush_timeout / 1000,
            self._after_group_commit,
            self._mark_flush_failed,
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
                self._commit_blocking,
                config.commit_interval_commit_log,
                config.commit_commit_log_least_pages,
                self._after_commit,
                self._mark_flush_failed,
                self._io,
                config.commit_commit_log_thorough_interval,
            )
        self._error: StoreNotWritableError | None = None
        self._disk_full: _DiskFull | None = None
        self.disk_full_episodes = 0
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

    def prepare_blocking(self) -> None:
        """Create the segment the next append will roll to, if it needs one, and hand it to
        the allocator: the first put after start must not wait for a segment on the event loop.
        Run in a thread before ``start``; ``recover_blocking`` does it, so
        ``MessageStore.start`` (which awaits recovery in a thread) gets it. Its read prefault
        runs in the allocator's thread once the broker serves (``start``): done here it was
        1.0-2.4 s of every start of a broker with 1 GiB segments (most of its 1.3-3.3 s to
        serving); fallocate and its fsync take ~7 ms."""
        last = self.queue.last()
        if last is not None and not last.is_full:
            return
        offset = 0 if last is None else last.file_from_offset + self.file_size
        if self.allocator.has_ready(offset):
            return
        try:
            mapped = create_segment_blocking(
                self.store_path, offset, self.file_size, self.config.warm_mapped_file_enable
            )
        except DiskFullError as exc:
            # A broker must start on a full disk (and serve reads); the first append reports it.
            log.warning("not preparing the next commit log segment: %s", exc)
            return
        self.allocator.adopt(mapped, prefault=not self.config.warm_mapped_file_enable)

    def start(self) -> None:
        """Start the services on the running loop; preallocate the next segments (call
        ``prepare_blocking`` in a thread first, or the first append creates its segment)."""
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
        if self.fill_ahead is not None:
            self.fill_ahead.cancel()
        await self.allocator.stop()
        if not isinstance(self._error, FlushFailedError):
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._io, self._sync_blocking)
            except DiskFullError as exc:  # transient pool: buffered appends not committed
                lost = self.queue.max_wrote_offset - self.queue.committed_where
                log.error("final commit failed, %d buffered bytes not written: %s", lost, exc)
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
        if not self._started:
            self.allocator.discard_ready_blocking()  # prepared but never started: no data
        self.queue.close()

    # === writes =================================================================================
    @property
    def writable(self) -> bool:
        return self._error is None and self._disk_full is None

    @property
    def not_writable_reason(self) -> str:
        error = self.write_error
        return "" if error is None else str(error)

    @property
    def write_error(self) -> StoreNotWritableError | None:
        """Why appends are refused (sticky flush failure, shutdown, disk full), or None."""
        if self._error is not None:
            return self._error
        full = self._disk_full
        return None if full is None else full.error

    def append(
        self,
        topic: str,
        queue_id: int,
        first_queue_offset: int,
        messages: Sequence[MessageInput],
        store_timestamp: int | None = None,
    ) -> AppendResult:
        """Encode a batch of messages (``encode_batch``, every field the message carries: its
        born host, flags, reconsume times, prepared offset) and append the records the way
        ``append_records`` does, each keeping its born host: one write path for every batch
        (queue offsets first_queue_offset, +1, ...). ``store_timestamp`` defaults to now (ms).
        Never awaits. Raises InvalidMessageError (nothing written) or StoreNotWritableError
        (sticky flush failure, shutdown), DiskFullError (nothing acknowledged, nothing left in
        the file)."""
        config = self.config

        def write(stamp: int) -> AppendResult:
            # Encoded at position 0: the patch writes the offsets where the batch lands.
            encoded = encode_batch(
                topic, queue_id, first_queue_offset, messages, 0, stamp, config.store_host,
                config.max_message_size,
            )  # fmt: skip
            return self._append_one(
                topic, queue_id, first_queue_offset, encoded.data, encoded.offsets, b"", stamp,
                encoded.sizes,
            )  # fmt: skip

        return self._guarded(write, store_timestamp)

    def _guarded(self, write: Callable[[int], _W], store_timestamp: int | None) -> _W:
        """The rules every append follows around ``write(store timestamp)``: a sticky failure
        or a full disk refuses it first; a write that fails on the disk becomes the log's
        state (``_write_failed``); one that wrote something (not None) ends a disk-full
        episode."""
        if self._error is not None:
            raise self._error
        full = self._disk_full
        if full is not None:
            self._check_disk_full(full)
        if store_timestamp is None:
            store_timestamp = int(time.time() * 1000)
        try:
            result = write(store_timestamp)
        except (DiskFullError, FlushFailedError) as exc:
            raise self._write_failed(exc) from exc
        if full is not None and result is not None:
            self._leave_disk_full("append")
        return result

    def append_records(
        self,
        topic: str,
        queue_id: int,
        first_queue_offset: int,
        data: bytes | memoryview,
        positions: np.ndarray,
        born_host: str,
        store_timestamp: int | None = None,
    ) -> AppendResult:
        """Append a send batch of pre-encoded records already checked by
        ``record_check.check_records`` (``positions``: where each starts in ``data``): the
        broker-owned fields are patched on a private copy, which is written with one copy.
        Same contract as ``append``."""
        born = born_host_bytes(born_host)
        return self._guarded(
            lambda stamp: self._append_one(
                topic, queue_id, first_queue_offset, data, positions, born, stamp
            ),
            store_timestamp,
        )

    def _append_one(
        self,
        topic: str,
        queue_id: int,
        first_queue_offset: int,
        data: bytes | memoryview,
        positions: np.ndarray | list[int],
        born_host: bytes,
        store_timestamp: int,
        sizes: list[int] | None = None,
    ) -> AppendResult:
        """One batch: into the current segment, or a new one when it does not fit the rest (a
        batch never spans segments); its broker-owned fields patched on a private copy
        (``patch_records``, one compiled call), then one copy in (``_copy_in``). No numpy
        column work here: a lone message's append is the latency path (the columns of
        ``_append_patched`` cost ~20 us more a call at 1 message a batch)."""
        size = len(data)
        mapped = self._segment_with_room(size)
        start = mapped.file_from_offset + mapped.wrote_position
        buf = bytearray(data)
        patch_records(
            buf, positions, queue_id, first_queue_offset, start, born_host, store_timestamp,
            encode_host(self.config.store_host),
        )  # fmt: skip
        if isinstance(positions, np.ndarray):
            offsets = (positions + start).tolist()
        else:
            offsets = [start + position for position in positions]
        if sizes is None:
            sizes = [b - a for a, b in pairwise(offsets)]
            sizes.append(start + size - offsets[-1])
        self._copy_in(mapped, buf, len(offsets), store_timestamp)
        return AppendResult(
            topic, queue_id, first_queue_offset, offsets, sizes, store_timestamp, start + size
        )

    def append_records_many(
        self,
        batches: Sequence[RecordsBatch],
        born_host: str,
        store_timestamp: int | None = None,
    ) -> AppendedMany | None:
        """``append_records`` of several batches (queues) at once: one buffer patched for all
        and ONE write (a request of 32 topics' batches paid 32 writes: ~0.3 us a 1 KiB message
        more). None, with nothing written, when they do not fit the current segment
        together: the caller appends them one by one (a batch never spans segments). Where
        they landed comes back as columns, in the order of ``batches``; an error fails them
        all, nothing written."""
        return self._guarded(
            lambda stamp: self._append_records_many(batches, born_host, stamp), store_timestamp
        )

    def _append_records_many(
        self, batches: Sequence[RecordsBatch], born_host: str, store_timestamp: int
    ) -> AppendedMany | None:
        total = sum(len(batch[3]) for batch in batches)
        if not self._fits(total):
            return None
        # Every record's position in the joined buffer at once (numpy calls cost ~1 us each:
        # once per request, not per batch).
        counts = [len(batch[4]) for batch in batches]
        bases = list(accumulate((len(batch[3]) for batch in batches[:-1]), initial=0))
        local = np.concatenate([batch[4] for batch in batches])
        local += np.repeat(np.array(bases, dtype=np.int64), counts)
        return self._append_patched(
            bytearray().join(batch[3] for batch in batches),  # one copy, patched in place
            local,
            counts,
            [batch[1] for batch in batches],
            [batch[2] for batch in batches],
            born_host_bytes(born_host),
            store_timestamp,
        )

    def append_columns(
        self,
        data: bytes,
        starts: np.ndarray,
        counts: list[int],
        queue_ids: list[int],
        first_queue_offsets: list[int],
        born_host: str,
        store_timestamp: int | None = None,
    ) -> AppendedMany | None:
        """``append_records_many`` of batches that lie one after another in ``data`` (a
        request's records blob, checked by ``check_records_many``: ``starts`` every record's
        start in it, ``counts`` each batch's records): no join, no per-batch list. Batch i is
        for queue ``queue_ids[i]`` from ``first_queue_offsets[i]``. None as there."""
        return self._guarded(
            lambda stamp: (
                self._append_patched(
                    bytearray(data), starts, counts, queue_ids, first_queue_offsets,
                    born_host_bytes(born_host), stamp,
                )
                if self._fits(len(data))
                else None
            ),
            store_timestamp,
        )  # fmt: skip

    def _fits(self, size: int) -> bool:
        """``size`` bytes fit the rest of the current segment (with its end marker)."""
        mapped = self.queue.last()
        return not (
            mapped is None or mapped.is_full or size + END_FILE_MIN_BLANK_LENGTH > mapped.remaining
        )

    def _append_patched(
        self,
        buf: bytearray,
        starts: np.ndarray,
        counts: list[int],
        queue_ids: list[int],
        first_queue_offsets: list[int],
        born_host: bytes,
        store_timestamp: int,
    ) -> AppendedMany:
        """Several batches' broker-owned fields patched in one compiled call (one call per
        batch cost ~3 us of Python each: 32 topics' batches in a request; ``born_host`` empty
        keeps each record's own), then ONE copy into the segment (``_copy_in``, as a lone
        batch's)."""
        mapped = self.queue.last()
        assert mapped is not None
        start = mapped.file_from_offset + mapped.wrote_position
        patch_columns(
            buf,
            starts,
            counts,
            queue_ids,
            first_queue_offsets,
            start,
            born_host,
            store_timestamp,
            encode_host(self.config.store_host),
        )
        self._copy_in(mapped, buf, len(starts), store_timestamp)
        sizes = np.empty_like(starts)  # np.diff(append=) is ~10 us here: a concatenate more
        np.subtract(starts[1:], starts[:-1], out=sizes[:-1])
        sizes[-1] = len(buf) - starts[-1]
        return AppendedMany(starts + start, sizes, counts, store_timestamp)

    def _copy_in(
        self, mapped: MappedFile, buf: bytearray, count: int, store_timestamp: int
    ) -> None:
        """The one copy of patched records into the segment, and its accounting."""
        mapped.append(buf, store_timestamp)
        self._appended(mapped)
        self.last_store_timestamp = store_timestamp
        self.messages_put_total += count
        self.bytes_put_total += len(buf)

    def append_raw(self, offset: int, data: bytes | memoryview, store_timestamp: int) -> int:
        """A replica's append: ``data`` (whole records a master wrote at ``offset``, inside one
        of its segments) written as it is, so the segments stay byte-identical. ``offset`` must
        be where this log ends (a gap or an overlap is ReplicationError); an empty log starts at
        ``offset`` (a master whose oldest segments are gone). Returns the new end. Never
        awaits; DiskFullError / FlushFailedError as ``append``."""
        if self._error is not None:
            raise self._error
        end = self.queue.max_wrote_offset
        if self.queue.last() is not None and offset != end:
            raise ReplicationError(f"replicated bytes at {offset} but this log ends at {end}")
        try:
            mapped = self._replica_segment(offset)
            if len(data) > mapped.remaining:
                raise ReplicationError(
                    f"{len(data)} replicated bytes at {offset} cross the segment end "
                    f"{mapped.file_from_offset + self.file_size}: segment sizes differ"
                )
            mapped.append(data, store_timestamp)
        except (DiskFullError, FlushFailedError) as exc:
            raise self._write_failed(exc) from exc
        self._appended(mapped)
        if store_timestamp:
            self.last_store_timestamp = store_timestamp
        self.bytes_put_total += len(data)
        if self._disk_full is not None:
            self._leave_disk_full("append")
        return mapped.file_from_offset + mapped.wrote_position

    def append_blank_raw(self, offset: int) -> int:
        """A replica's copy of the master's segment end at ``offset``; returns the new end."""
        end = self.queue.max_wrote_offset
        mapped = self.queue.last()
        if mapped is None or offset != end or mapped.is_full:
            raise ReplicationError(f"segment end replicated at {offset} but this log ends at {end}")
        mapped.append_blank()
        return mapped.file_from_offset + mapped.wrote_position

    def _replica_segment(self, offset: int) -> MappedFile:
        mapped = self.queue.last()
        if mapped is not None and not mapped.is_full:
            return mapped
        if mapped is None and offset % self.file_size:
            raise ReplicationError(
                f"an empty replica cannot start at {offset}: not a segment start "
                f"(segments of {self.file_size} bytes)"
            )
        if mapped is None and offset:
            # The master's log starts past 0: drop the segment prepared at 0 and start there.
            self.allocator.discard_ready_blocking()
            return self.queue.roll(start=offset)
        return self._roll()

    def _segment_with_room(self, size: int) -> MappedFile:
        """The segment a batch of ``size`` bytes goes to: the current one, or a new one after
        the blank marker when the batch does not fit its rest (a batch never spans segments).
        InvalidMessageError (nothing written) if no segment could hold it."""
        if size + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise InvalidMessageError(
                f"the batch encodes to {size} bytes, more than a commit log segment holds "
                f"({self.file_size - END_FILE_MIN_BLANK_LENGTH}): send fewer messages per batch"
            )
        mapped = self.queue.last()
        if mapped is None or mapped.is_full:
            mapped = self._roll()
        if size + END_FILE_MIN_BLANK_LENGTH > mapped.remaining:
            mapped.append_blank()
            mapped = self._roll()
        return mapped

    def _appended(self, mapped: MappedFile) -> None:
        fill = self.fill_ahead
        if fill is not None:
            fill.after_append(mapped)

    # --- disk full ----------------------------------------------------------------------------
    def _check_disk_full(self, full: _DiskFull) -> None:
        """Refuse an append during a disk-full episode, except one try per retry interval
        (an episode the commit service started ends only when a commit succeeds)."""
        if full.source != "append" or time.monotonic() < full.retry_at:
            raise DiskFullError(str(full.error))  # a fresh one: no traceback pile-up

    def _write_failed(self, exc: DiskFullError | FlushFailedError) -> StoreNotWritableError:
        """An append's write or roll failed: disk full starts (or extends) an episode; a
        partial write that could not be undone is sticky (see mapped_file)."""
        if isinstance(exc, DiskFullError):
            self._enter_disk_full(exc, "append")
            return exc
        if self._error is None:
            self._error = exc
            log.critical("%s", exc)
        return self._error

    def _enter_disk_full(self, exc: DiskFullError, source: str) -> None:
        """Start or extend the disk-full state: ONE log line per episode (loop or commit
        thread: the state is replaced as a whole)."""
        first = self._disk_full is None
        self._disk_full = _DiskFull(exc, time.monotonic() + DISK_FULL_RETRY_S, source)
        if first:
            self.disk_full_episodes += 1
            log.error("commit log refuses writes: %s", exc)

    def _leave_disk_full(self, source: str) -> None:
        full = self._disk_full
        if full is not None and full.source == source:
            self._disk_full = None
            log.warning("commit log writable again: a %s succeeded after the disk was full", source)

    def report_dispatch_disk_full(self, error: DiskFullError | None) -> None:
        """Dispatch could not write a consume queue or index file (``error``): appends are
        refused until it writes again (None), since accepted records would pile up unseen."""
        if error is None:
            self._leave_disk_full("dispatch")
        else:
            self._enter_disk_full(error, "dispatch")

    def _commit_blocking(self, least_pages: int) -> int:
        """The commit service's commit (thread): disk full is the disk-full state, retried on
        the service's next run, not a sticky failure (nothing was lost: the committed
        position did not move)."""
        try:
            committed = self.queue.commit_blocking(least_pages)
        except DiskFullError as exc:
            self._enter_disk_full(exc, "commit")
            return self.queue.committed_where
        if self._disk_full is not None:
            self._leave_disk_full("commit")
        return committed

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
        return await self.flush_waiter(end_offset)

    def flush_waiter(self, end_offset: int) -> asyncio.Future[bool]:
        """``wait_flushed`` without the await: the group commit request is filed (its sync
        started) now, the same errors are raised at once, and the future is answered as
        ``wait_flushed`` would be (done already when the data is on disk)."""
        if isinstance(self._error, FlushFailedError):
            raise self._error
        if self.queue.flushed_where >= end_offset:
            done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            done.set_result(True)
            return done
        if end_offset > self.queue.max_wrote_offset:
            raise ValueError(
                f"cannot wait for offset {end_offset}: the log ends at {self.queue.max_wrote_offset}"
            )
        if not self.group_commit.running:
            raise StoreShutDownError("the commit log's flush services are not running")
        return self.group_commit.waiter(end_offset)

    def prewake_sync(self) -> None:
        """SYNC_FLUSH: an append whose sync will be requested follows (sync_engine)."""
        self.group_commit.engine.prewake()

    def write_when_durable(
        self, end: int, fd: int, data: bytes, done: Callable[[int], None]
    ) -> int:
        """Send ``data`` on socket ``fd`` once ``end`` is durable (see sync_engine)."""
        return self.group_commit.engine.write_when_durable(end, fd, data, done)

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
        """ASYNC_FLUSH: nudge the commit service (transient pool) after an append: pooled data
        is invisible until committed. The flush itself keeps its own pace (every
        flushIntervalCommitLog, 500 ms): woken by every append it ran an fdatasync -- and a
        thread hand-off on the loop -- for nearly every batch, ~5% of the loop under load."""
        if self.commit_service is not None:
            self.commit_service.wakeup()

    def _sync_engine(self, config: StoreConfig) -> SyncEngine:
        """The compiled GIL-free sync thread under SYNC_FLUSH when it is built (and the
        fdatasync seam is the real one); the Python thread otherwise, and always with the
        transient store pool (whose commit is Python code)."""
        syncer_type = None
        if config.flush_disk_type == SYNC_FLUSH and self.transient_pool is None:
            syncer_type = native_syncer_type()
        if syncer_type is None:
            return ThreadSyncEngine(self._sync_blocking, self._flushed_where)
        return NativeSyncEngine(
            syncer_type, self._sync_plan, self._settle_sync, self._flushed_where
        )

    def _flushed_where(self) -> int:
        return self.queue.flushed_where

    def _sync_plan(self, max_fds: int) -> SyncPlan | None:
        """Loop: a native sync of everything appended so far (None: nothing dirty). The
        timestamp is read with the positions: the durable one is recorded when it settles."""
        targets = self.queue.sync_targets()[:max_fds]
        if not targets:
            return None
        last, position = targets[-1]
        mark = last.file_from_offset + position
        fds = tuple(mapped.fileno() for mapped, _ in targets)
        return SyncPlan(fds, mark, (targets, mark, self.last_store_timestamp))

    def _settle_sync(self, token: tuple[list[tuple[MappedFile, int]], int, int]) -> int:
        """Loop: the plan's segments are synced; returns the new flushed offset."""
        targets, mark, timestamp = token
        flushed = self.queue.synced(targets)
        if flushed >= mark and timestamp > self._durable_timestamp:
            self._durable_timestamp = timestamp
        return flushed

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
            if is_disk_full(exc) or isinstance(exc, DiskFullError):
                self._error = SyncDiskFullError(
                    f"disk full: a commit log sync failed ({exc}); writes are refused until "
                    "space is freed and the broker restarted: the state of the file after a "
                    "failed sync is unknown"
                )
            else:
                self._error = FlushFailedError(
                    f"commit log sync failed ({exc!r}); writes are refused until the broker "
                    "is restarted and recovers: the state of the file after a failed sync is "
                    "unknown"
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

    # === recovery (store/log/recovery.py) ===============================================
    def recover_blocking(self, abnormal: bool, checkpoint: StoreCheckpoint | None = None) -> int:
        """Validate from the start point (see the module docstring), truncate after the last
        valid record, and return that offset: the commit log's max offset. Run in a thread."""
        checkpoint = checkpoint if checkpoint is not None else self.checkpoint
        end = recover_queue_blocking(
            self.queue, abnormal, checkpoint, self.config.check_crc_on_recover
        )
        self.prepare_blocking()
        return end

    def sync_tail_blocking(self, from_offset: int) -> int:
        """Abnormal recovery: fdatasync every segment holding data at or past ``from_offset``
        (the checkpoint's last flushed offset); returns how many. Recovery sets the flushed
        offset to the valid end, but after a kill -9 the records past the last flush may sit in
        the page cache only: a later power cut would drop records a replica has reported or a
        consumer has read. After a power cut nothing is dirty and each call is a no-op."""
        synced = 0
        for mapped in self.queue.files:
            if mapped.file_from_offset + mapped.file_size > from_offset and mapped.wrote_position:
                os.fdatasync(mapped.fileno())
                synced += 1
        return synced

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
        keep_from_offset: int | None = None,
    ) -> int:
        """Delete segments older than ``expired_ms`` (oldest first; any age when ``force``),
        never the last one, unflushed ones, nor one reaching ``keep_from_offset`` (the
        store's dispatch offset). Returns how many were deleted."""
        return self.queue.delete_expired_blocking(
            expired_ms,
            self.config.delete_commit_log_files_interval
            if delete_interval_ms is None
            else delete_interval_ms,
            force,
            self.config.delete_file_batch_max if max_batch is None else max_batch,
            now_ms,
            keep_from_offset,
        )

    async def delete_expired(
        self,
        expired_ms: int,
        delete_interval_ms: int | None = None,
        force: bool = False,
        max_batch: int | None = None,
        now_ms: int | None = None,
        keep_from_offset: int | None = None,
    ) -> int:
        """``delete_expired_files_blocking`` in a thread."""
        return await asyncio.to_thread(
            self.delete_expired_files_blocking,
            expired_ms,
            force,
            delete_interval_ms,
            max_batch,
            now_ms,
            keep_from_offset,
        )

    @property
    def sync_segment_creations(self) -> int:
        """Rolls that created a segment on the event loop (preallocation was late)."""
        return self.queue.sync_creations
