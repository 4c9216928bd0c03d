"""The write path: one operation, ``Writer.write``, appends a batch on the spot (never awaits)
and returns a ``Written`` that tells its durability; ``put`` is that plus the dispatch
back-pressure wait and the durability wait, for callers that simply await.

A batch is either ``MessageInput``s or the bytes of producer-encoded records
(``wharf.store.codec.send_records``: checked by ``fast/record_check.py``). Messages go where
the put hook the store was given says (the broker's core parks delayed, timed and half
messages in their system topics: ``wharf.store.model.PutHook``), then are encoded as records;
both forms reach the commit log's one leader write (broker-owned fields patched on a private
copy, one copy into the segment), producer records with their properties as given.

Durability of a ``Written`` (the same statuses and errors for every form):

- ``await written.durable()``: none in ASYNC_FLUSH; SYNC_FLUSH awaits the group commit, then
  lets dispatch follow (it only dispatches what is on disk); a SYNC_MASTER also awaits its
  replicas, in parallel with the flush: FLUSH_DISK_TIMEOUT first, then the replicas' verdict.
- ``written.flush_waiter()``: the fast path of SYNC_FLUSH without replicas to wait for, the
  group commit's future filed now (the sync starts at once; cancelling it withdraws the wait),
  then ``written.flushed(waiter)`` once it is done: no task per write. None when the wait is
  more (a SYNC_MASTER) or nothing: then await ``durable()``.
- ``await durable_all(writes)``: several writes made in order, one wait (the last one's:
  durability reaches offsets in order), whose status every one gets.

The writer asks the store's ``Role`` whether it may write (fence, in-sync replicas, replica)
and what an acknowledgement waits for; ``gate()`` (``WriteGate.check``: the store's lifecycle
and the cleanup service's disk reports) raises while the store is not started or the disk is
full.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from itertools import accumulate, repeat
from operator import add
from typing import Any, Protocol

import numpy as np
from wharf import hops
from wharf.store.config import SYNC_FLUSH, StoreConfig
from wharf.store.dispatch.reput import ReputService
from wharf.store.errors import (
    DiskFullError,
    InvalidMessageError,
    StoreBusyError,
    StoreError,
    StoreNotWritableError,
    StoreShutDownError,
)
from wharf.store.fast.record_check import check_records, check_records_many
from wharf.store.log.commit_log import AppendedMany, CommitLog, RecordsBatch
from wharf.store.model import AppendResult, MessageInput, PutHook, PutResult, PutStatus
from wharf.store.queue.table import ConsumeQueueTable
from wharf.store.retention.keys import (
    CompactedTopics,
    check_keyed_messages,
    check_keyed_records,
)
from wharf.store.role import Role

log = logging.getLogger(__name__)

__all__ = [
    "Batch",
    "Durability",
    "WriteGate",
    "Writer",
    "Written",
    "WrittenMany",
    "durable_all",
]

# What one write appends: messages to encode, or producer-encoded records.
Batch = Sequence[MessageInput] | bytes

_MAX_QUEUE_ID = 0x7FFFFFFF


class Durability(Protocol):
    """What a ``Written`` asks of the writer that made it (``Writer``; a test fake may stand in)."""

    async def durable(self, result: AppendResult) -> PutResult: ...

    def flush_waiter(self, result: AppendResult) -> asyncio.Future[bool] | None: ...

    def flushed_result(self, result: AppendResult, waiter: asyncio.Future[bool]) -> PutResult: ...


class Written:
    """One append (``appended``: offsets, ids) and the way to its acknowledgement."""

    __slots__ = ("_writer", "appended")

    def __init__(self, writer: Durability, appended: AppendResult) -> None:
        self._writer = writer
        self.appended = appended

    async def durable(self) -> PutResult:
        """Wait until durable (disk and replicas, per the store's settings)."""
        return await self._writer.durable(self.appended)

    def flush_waiter(self) -> asyncio.Future[bool] | None:
        """SYNC_FLUSH without replicas to wait for: the group commit's future, filed now;
        None otherwise (await ``durable()``). Raises FlushFailedError/StoreShutDownError."""
        return self._writer.flush_waiter(self.appended)

    def flushed(self, waiter: asyncio.Future[bool]) -> PutResult:
        """The PutResult of a done ``flush_waiter()``: PUT_OK or FLUSH_DISK_TIMEOUT; raises
        the sync's error, or MasterFencedError when this master was fenced meanwhile."""
        return self._writer.flushed_result(self.appended, waiter)


async def durable_all(writes: Sequence[Written]) -> list[PutResult]:
    """``durable`` of several writes made in order: one wait, for the last one, whose status
    every one gets (a time-out of the last one is reported for all: a retry of an earlier one
    may store it twice, as after any time-out)."""
    last = await writes[-1].durable()
    return [PutResult(last.status, w.appended) for w in writes[:-1]] + [last]


_NO_SIZES = np.zeros(0, dtype=np.int64)


class WrittenMany:
    """``Writer.write_many``'s batches, appended together, as columns: one object for a
    request of 32 topics' batches (an AppendResult, a Written and a PutResult a batch cost
    ~4 us of Python each). Batch i either failed alone (``errors[i]``, not written;
    -1 / 0 in the columns) or landed in queue ``queue_ids[i]`` from ``first_queue_offsets[i]``,
    its ``counts[i]`` records from commit log offset ``first_offsets[i]``; ``sizes`` holds
    the written records' sizes in batch order. One durability wait covers them all."""

    __slots__ = (
        "_writer",
        "counts",
        "end_offset",
        "errors",
        "first_offsets",
        "first_queue_offsets",
        "queue_ids",
        "sizes",
        "store_timestamp",
        "topics",
    )

    def __init__(self, writer: Writer, topics: list[str], count: int) -> None:
        self._writer = writer
        self.topics = topics
        self.queue_ids = [-1] * count
        self.first_queue_offsets = [0] * count
        self.first_offsets = [0] * count
        self.counts = [0] * count
        self.errors: dict[int, Exception] = {}
        self.sizes = _NO_SIZES  # int64, every written record's size, in batch order
        self.end_offset = -1  # nothing written
        self.store_timestamp = 0

    @property
    def stored(self) -> int:
        """How many records were written (the batches without an error)."""
        return len(self.sizes)

    def appended(self, index: int) -> AppendResult:
        """Batch ``index`` as the AppendResult a write of its own returns."""
        count = self.counts[index]
        start = sum(self.counts[:index])
        first = self.first_offsets[index]
        sizes = self.sizes[start : start + count].tolist()
        offsets = list(accumulate(sizes[:-1], initial=first))
        end = offsets[-1] + sizes[-1]
        return AppendResult(
            self.topics[index],
            self.queue_ids[index],
            self.first_queue_offsets[index],
            offsets,
            sizes,
            self.store_timestamp,
            end,
        )

    async def durable(self) -> PutStatus:
        """Wait until every written batch is durable: the last one's wait covers the others
        (offsets grow), its status (a flush or replica time-out) is every batch's."""
        return await self._writer.durable_until(self.end_offset)


class WriteGate:
    """The store's own part of "may it write" (the role's is ``Role.refusal``): its lifecycle
    (``state``: new -> started -> stopping -> stopped) and the disk state the cleanup service
    reports after each pass (``on_disk_state``), with the last used ratio ``stats()`` shows."""

    def __init__(self) -> None:
        self.state = "new"
        self.disk_full_reason = ""
        self.disk_used_ratio = 0.0

    def check(self) -> None:
        """The writer's check before an append: started, disk not full."""
        if self.state != "started":
            raise StoreShutDownError(f"the store is {self.state}: writes are refused")
        if self.disk_full_reason:
            raise DiskFullError(self.disk_full_reason)

    def on_disk_state(self, used_ratio: float, full_reason: str) -> None:
        """The cleanup service's report of each pass: the ratio is cached for ``stats()``; a
        non-empty reason refuses writes with DiskFullError until a pass reports "" again."""
        self.disk_used_ratio = used_ratio
        if full_reason and not self.disk_full_reason:
            log.error("store not writable: %s", full_reason)
        elif not full_reason and self.disk_full_reason:
            log.warning("store writable again: disk use back under the warning level")
        self.disk_full_reason = full_reason

    def not_writable_reason(self, commit_log: CommitLog | None) -> str:
        """Why writes are refused now ('' when they are not): the store's state, a full
        disk, then the commit log's own reason (a sticky flush failure)."""
        if self.state != "started":
            return f"store {self.state}"
        if self.disk_full_reason:
            return self.disk_full_reason
        return commit_log.not_writable_reason if commit_log is not None else ""


class Writer:
    """Appends, the queue offsets they take, their accounting and their durability."""

    def __init__(
        self,
        config: StoreConfig,
        role: Role,
        gate: Callable[[], None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        put_hook: PutHook | None = None,
    ) -> None:
        self._config = config
        self._role = role
        self._put_hook = put_hook  # where messages go (system topics): the composer's rule
        self._gate = gate
        self._spawn = spawn
        self._sync_flush = config.flush_disk_type == SYNC_FLUSH
        self._commit_log: CommitLog | None = None  # set by start()
        self._reput: ReputService | None = None
        self._queues: ConsumeQueueTable | None = None
        self._request_disk_check: Callable[[], None] = lambda: None
        self.offset_table: dict[tuple[str, int], int] = {}  # (topic, queue id) -> next offset
        self.messages_put_total = 0
        self.throttled_puts = 0  # puts that waited for dispatch to catch up
        self.busy_refusals = 0  # puts answered StoreBusyError (the wait was not enough)
        self._busy = False  # refusing since the last time dispatch had room (one log line)
        self.bytes_put_total = 0
        # Disk use is re-sampled after this many appended bytes (set at start: 1 % of the
        # filesystem, 1..64 MiB), not only every cleanResourceInterval.
        self.disk_check_bytes = 64 << 20
        self._bytes_since_disk_check = 0
        # The compacted topics, whose messages must have keys (retention/keys.py): the
        # facade hands RetentionService's holder over, which it keeps up to date.
        self.compacted = CompactedTopics()

    def start(
        self,
        commit_log: CommitLog,
        reput: ReputService,
        queues: ConsumeQueueTable,
        request_disk_check: Callable[[], None],
        filesystem_bytes: int,
    ) -> None:
        """What recovery opened; ``request_disk_check()`` asks the cleanup service for a disk
        sample, after every 1 % of the filesystem (``filesystem_bytes``) appended, 1..64 MiB."""
        self._commit_log, self._reput, self._queues = commit_log, reput, queues
        self.take_offsets()
        self._request_disk_check = request_disk_check
        self.disk_check_bytes = max(1 << 20, min(64 << 20, filesystem_bytes // 100))

    def take_offsets(self) -> None:
        """Each queue's next offset from the queues themselves: at start, and when a replica
        is promoted (``Role.promote``, once everything it has is dispatched)."""
        assert self._queues is not None
        self.offset_table = {(q.topic, q.queue_id): q.max_offset for q in self._queues}

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's next offsets go: created again, its queues start at offset 0."""
        for key in [key for key in self.offset_table if key[0] == topic]:
            del self.offset_table[key]

    # --- the write ---------------------------------------------------------------------------
    def write(self, topic: str, queue_id: int, batch: Batch, born_host: str = "") -> Written:
        """Validate and append ``batch`` (consecutive queue offsets in one queue) now. Raises
        InvalidMessageError (nothing written: for records it names the first bad one),
        StoreNotWritableError and its kin. No dispatch back-pressure: check
        ``dispatch_lagging()`` first and ``await dispatch_room()`` while it is True."""
        if isinstance(batch, bytes):
            return Written(self, self._append_records(topic, queue_id, batch, born_host))
        return Written(self, self._append(topic, queue_id, batch))

    async def put(self, topic: str, queue_id: int, batch: Batch, born_host: str = "") -> PutResult:
        """``write`` after the dispatch back-pressure wait, then its durability wait."""
        await self.dispatch_room()
        if isinstance(batch, bytes):  # (no Written: one coroutine less per put)
            return await self.durable(self._append_records(topic, queue_id, batch, born_host))
        return await self.durable(self._append(topic, queue_id, batch))

    def append(self, topic: str, queue_id: int, batch: Sequence[MessageInput]) -> AppendResult:
        """``write`` whose durability nobody awaits: under SYNC_FLUSH a background group
        commit request is filed, so dispatch (which only follows synced data) still comes."""
        result = self._append(topic, queue_id, batch)
        if self._sync_flush:
            self.sync_in_background(result.end_offset)
        return result

    def write_many(
        self, batches: Sequence[tuple[str, int, bytes | memoryview]], born_host: str
    ) -> WrittenMany:
        """``write`` of several (topic, queue id, records) at once, appended together
        (``CommitLog.append_records_many``: one write) and answered as columns. A batch that
        fails its checks gets its error (``errors``) and is not written; the others are. A
        failed write raises (nothing of it is in the queues' offsets). Where they do not fit
        the segment together, each is appended on its own, an error failing its batch alone."""
        self._check_writable()
        written = WrittenMany(self, [batch[0] for batch in batches], len(batches))
        if len(batches) == 1:
            written.sizes = np.array(
                self._write_alone(written, 0, batches[0], born_host), dtype=np.int64
            )
            return written
        checked: list[RecordsBatch] = []
        where: list[int] = []
        next_offsets: dict[tuple[str, int], int] = {}
        offset_table = self.offset_table
        limit = self._config.max_message_size
        compacted = self.compacted.topics
        for index, (topic, queue_id, data) in enumerate(batches):
            try:
                positions = check_records(data, topic, limit)
                _check_queue_id(queue_id)
                if topic in compacted:
                    check_keyed_records(topic, data, positions)
            except InvalidMessageError as exc:
                written.errors[index] = exc
                continue
            key = (topic, queue_id)
            first = next_offsets.get(key)
            if first is None:
                first = offset_table.get(key, 0)
            next_offsets[key] = first + len(positions)
            checked.append(RecordsBatch(topic, queue_id, first, data, positions))
            where.append(index)
        if not checked:
            return written
        commit_log = self._commit_log
        assert commit_log is not None
        appended = commit_log.append_records_many(checked, born_host)
        if appended is None:  # not in the rest of the segment together
            sizes: list[int] = []
            for index in where:
                sizes.extend(self._write_alone(written, index, batches[index], born_host))
            written.sizes = np.array(sizes, dtype=np.int64)
            return written
        offset_table.update(next_offsets)
        rows = zip(where, checked, appended.first_offsets(), appended.counts, strict=True)
        for index, batch, first, count in rows:
            written.queue_ids[index] = batch[1]
            written.first_queue_offsets[index] = batch[2]
            written.first_offsets[index] = first
            written.counts[index] = count
        return self._landed(commit_log, written, appended)

    def write_columns(
        self,
        topics: list[str],
        queue_ids: list[int],
        data: bytes,
        sizes: list[int],
        born_host: str,
    ) -> WrittenMany:
        """``write_many`` of batches that lie one after another in ``data`` (batch i:
        ``sizes[i]`` bytes of records for ``topics[i]``, queue ``queue_ids[i]``): one compiled
        check for all and one patch, no slice or object a batch (~2.5 us of Python a batch
        less at 32 topics' batches a request). A bad batch, or batches that do not
        fit the segment together: ``write_many`` (each error its own batch's)."""
        self._check_writable()
        compacted = self.compacted.topics
        if len(topics) < 2 or (compacted and not compacted.isdisjoint(topics)):
            # one batch: write_many's lone append checks it (once); a compacted topic's keys
            # are checked there too
            return self._write_slices(topics, queue_ids, data, sizes, born_host)
        checked = check_records_many(data, sizes, topics, self._config.max_message_size)
        if checked is None:
            return self._write_slices(topics, queue_ids, data, sizes, born_host)
        starts, counts = checked
        if not 0 <= min(queue_ids) <= max(queue_ids) <= _MAX_QUEUE_ID:
            return self._write_slices(topics, queue_ids, data, sizes, born_host)
        offset_table = self.offset_table
        keys = list(zip(topics, queue_ids, strict=True))
        # The usual request, a batch a queue: each step a pass of C (map), not ~25 bytecodes a
        # batch (32 topics' batches a request).
        firsts = list(map(offset_table.get, keys, repeat(0)))
        next_offsets = dict(zip(keys, map(add, firsts, counts), strict=True))
        if len(next_offsets) < len(keys):  # a queue twice: its later batches follow its first
            firsts = []
            next_offsets = {}
            for key, count in zip(keys, counts, strict=True):
                first = next_offsets.get(key)
                if first is None:
                    first = offset_table.get(key, 0)
                firsts.append(first)
                next_offsets[key] = first + count
        commit_log = self._commit_log
        assert commit_log is not None
        appended = commit_log.append_columns(data, starts, counts, queue_ids, firsts, born_host)
        if appended is None:  # not in the rest of the segment together
            return self._write_slices(topics, queue_ids, data, sizes, born_host)
        offset_table.update(next_offsets)
        written = WrittenMany(self, topics, 0)
        written.queue_ids = queue_ids
        written.first_queue_offsets = firsts
        written.counts = counts
        written.first_offsets = appended.first_offsets()
        return self._landed(commit_log, written, appended)

    def _landed(
        self, commit_log: CommitLog, written: WrittenMany, appended: AppendedMany
    ) -> WrittenMany:
        """The rest of a together-append's answer (sizes, end, time) and its accounting."""
        written.sizes = appended.sizes
        written.end_offset = appended.end_offset
        written.store_timestamp = appended.store_timestamp
        self._account(
            commit_log, len(appended.sizes), appended.end_offset - int(appended.offsets[0])
        )
        return written

    def _write_slices(
        self,
        topics: list[str],
        queue_ids: list[int],
        data: bytes,
        sizes: list[int],
        born_host: str,
    ) -> WrittenMany:
        view = memoryview(data)
        bounds = list(accumulate(sizes, initial=0))
        return self.write_many(
            [
                (topic, queue_id, view[a:b])
                for topic, queue_id, a, b in zip(
                    topics, queue_ids, bounds, bounds[1:], strict=False
                )
            ],
            born_host,
        )

    def _write_alone(
        self,
        written: WrittenMany,
        index: int,
        batch: tuple[str, int, bytes | memoryview],
        born_host: str,
    ) -> list[int]:
        """Batch ``index`` of ``write_many`` appended on its own, into its columns; its
        records' sizes (none when it failed)."""
        topic, queue_id, data = batch
        try:
            result = self._append_records(topic, queue_id, data, born_host)
        except StoreError as exc:  # this batch's alone, as a request of its own would get
            written.errors[index] = exc
            return []
        written.queue_ids[index] = result.queue_id
        written.first_queue_offsets[index] = result.first_queue_offset
        written.first_offsets[index] = result.offsets[0]
        written.counts[index] = len(result.sizes)
        written.end_offset = result.end_offset
        written.store_timestamp = result.store_timestamp
        return result.sizes

    def _append(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> AppendResult:
        """Messages: the put hook says where they go (a delayed, timed or half message parks
        in its system topic), then they are encoded as records and appended as producer
        records are (``CommitLog.append``: one write path)."""
        if self._sync_flush and self._commit_log is not None:
            self._commit_log.prewake_sync()  # its wake-up overlaps this append's encoding
        self._check_writable()
        if not messages:
            raise InvalidMessageError("a batch needs at least one message")
        _check_queue_id(queue_id)
        if topic in self.compacted.topics:
            check_keyed_messages(topic, messages)
        now = int(time.time() * 1000)
        if self._put_hook is not None:
            topic, queue_id, messages = self._put_hook(topic, queue_id, messages, now)
        return self._append_to_queue(
            topic,
            queue_id,
            len(messages),
            lambda log, first: log.append(topic, queue_id, first, messages, now),
        )

    def _append_records(
        self, topic: str, queue_id: int, data: bytes | memoryview, born_host: str
    ) -> AppendResult:
        if self._sync_flush and self._commit_log is not None:
            self._commit_log.prewake_sync()  # its wake-up overlaps this append's checks
        positions = check_records(data, topic, self._config.max_message_size)
        self._check_writable()
        _check_queue_id(queue_id)
        if topic in self.compacted.topics:
            check_keyed_records(topic, data, positions)
        return self._append_to_queue(
            topic,
            queue_id,
            len(positions),
            lambda log, first: log.append_records(
                topic, queue_id, first, data, positions, born_host
            ),
        )

    def _append_to_queue(
        self,
        topic: str,
        queue_id: int,
        count: int,
        write: Callable[[CommitLog, int], AppendResult],
    ) -> AppendResult:
        """Give ``write`` the queue's next offset, then advance it by ``count`` and account
        for the batch (one place for every kind of append)."""
        key = (topic, queue_id)
        first_queue_offset = self.offset_table.get(key, 0)
        commit_log = self._commit_log
        assert commit_log is not None
        result = write(commit_log, first_queue_offset)
        self.offset_table[key] = first_queue_offset + count
        self._account(commit_log, count, result.end_offset - result.offsets[0])
        return result

    def _account(self, commit_log: CommitLog, count: int, nbytes: int) -> None:
        """After an append of ``count`` messages in ``nbytes``: totals, the disk check, the
        wakeups of the flush, the dispatch and the replicas."""
        self.messages_put_total += count
        self.bytes_put_total += nbytes
        self._bytes_since_disk_check += nbytes
        if self._bytes_since_disk_check >= self.disk_check_bytes:
            self._bytes_since_disk_check = 0
            self._request_disk_check()
        if hops.ENABLED:
            hops.stamp("b.appended")
        if not self._sync_flush:
            commit_log.wakeup_flush()
            assert self._reput is not None
            self._reput.wakeup()
        self._role.notify_append()

    def _check_writable(self) -> None:
        self._role.refusal()
        self._gate()
        # A sticky flush failure is raised by CommitLog.append itself (FlushFailedError).

    # --- durability --------------------------------------------------------------------------
    async def durable(self, result: AppendResult) -> PutResult:
        return PutResult(await self.durable_until(result.end_offset), result)

    async def durable_until(self, end_offset: int) -> PutStatus:
        """Wait until the log is durable up to ``end_offset`` (disk and replicas, per the
        store's settings); the status of an acknowledgement there."""
        replicated = self._role.replicated(end_offset)
        status = PutStatus.PUT_OK
        if self._sync_flush:
            assert self._commit_log is not None
            status = self._flush_status(end_offset, await self._commit_log.wait_flushed(end_offset))
        if replicated is not None:
            verdict = await replicated
            if status is PutStatus.PUT_OK:
                status = verdict
        self._role.check_ack()
        return status

    def flush_waiter(self, result: AppendResult) -> asyncio.Future[bool] | None:
        if not self._sync_flush or self._role.waits_for_replicas:
            return None
        assert self._commit_log is not None
        return self._commit_log.flush_waiter(result.end_offset)

    def flushed_result(self, result: AppendResult, waiter: asyncio.Future[bool]) -> PutResult:
        status = self._flush_status(result.end_offset, waiter.result())
        self._role.check_ack()
        return PutResult(status, result)

    def _flush_status(self, end_offset: int, flushed: bool) -> PutStatus:
        """After the group commit answered: dispatch follows (it only dispatches synced data)."""
        assert self._reput is not None
        if hops.ENABLED:
            hops.stamp("b.put_resumed")
        self._reput.wakeup_for(end_offset)
        return PutStatus.PUT_OK if flushed else PutStatus.FLUSH_DISK_TIMEOUT

    def sync_in_background(self, end_offset: int) -> None:
        """SYNC_FLUSH, nobody awaiting: request the sync, then let dispatch follow it."""
        self._spawn(self._sync_then_dispatch(end_offset))

    async def _sync_then_dispatch(self, end_offset: int) -> None:
        assert self._commit_log is not None and self._reput is not None
        try:
            await self._commit_log.wait_flushed(end_offset)
        except StoreNotWritableError:
            return  # sticky failure / shutdown: already surfaced to writers and in health()
        self._reput.wakeup_for(end_offset)

    # --- dispatch back-pressure --------------------------------------------------------------
    def dispatch_lagging(self) -> bool:
        """True while ``put`` would first wait for dispatch to catch up (it is more than
        ``max_dispatch_lag_bytes`` behind the written end)."""
        limit = self._config.max_dispatch_lag_bytes
        commit_log, reput = self._commit_log, self._reput
        if limit <= 0 or commit_log is None or reput is None:
            return False
        return commit_log.wrote_offset - reput.reput_from_offset > limit

    async def dispatch_room(self) -> None:
        """Hold a put while dispatch is more than ``max_dispatch_lag_bytes`` behind, until it
        is back to half of that, for at most ``wait_time_mills_in_send_queue``; still behind
        (or the reput failing) then: StoreBusyError, nothing written (one log line an
        episode). A caller writing several batches at once waits here once for all."""
        if not self.dispatch_lagging():
            if self._busy:
                self._busy = False
                log.warning("dispatch caught up: writes accepted again (%d refused busy so far)",
                            self.busy_refusals)  # fmt: skip
            return
        assert self._commit_log is not None and self._reput is not None
        self.throttled_puts += 1
        config = self._config
        target = self._commit_log.wrote_offset - config.max_dispatch_lag_bytes // 2
        wait_ms = config.wait_time_mills_in_send_queue
        if wait_ms > 0 and await self._reput.wait_dispatched(target, wait_ms / 1000):
            return
        if not self.dispatch_lagging():
            return  # back under the limit, if not yet to half of it
        self.busy_refusals += 1
        behind = self._commit_log.wrote_offset - self._reput.reput_from_offset
        message = (
            f"broker busy: the dispatch is {behind:,} bytes behind the written end "
            f"(maxDispatchLagBytes {config.max_dispatch_lag_bytes:,}) after {wait_ms} ms "
            f"(waitTimeMillsInSendQueue); nothing was written: retry after a back-off (the "
            f"clients do) or produce slower"
        )
        if not self._busy:
            self._busy = True
            log.warning("%s; this is logged once until the dispatch catches up", message)
        raise StoreBusyError(message)


def _check_queue_id(queue_id: int) -> None:
    if not isinstance(queue_id, int) or not 0 <= queue_id <= _MAX_QUEUE_ID:
        raise InvalidMessageError(f"queue id {queue_id!r} must be an int in [0, 2^31-1]")
