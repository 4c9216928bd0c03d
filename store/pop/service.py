"""PopService: pop-style consumption with invisible time (RocketMQ 5's POP_MESSAGE /
ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME, RIP-19), durable through the pop journal.

The API and its contract are in the package docstring (``wharf.store.pop``). This module holds
the mechanics:

- every change is a ``PopRecord`` applied to ``PopState`` and appended to the journal
  (``_record``); a pop, an ack or a change answers only after ``JournalWriter.sync()``;
- the choice of messages for one queue (``_pop_queue``) runs without an await, so concurrent
  pops, acks and changes on the loop never see a half-made choice; only the DLQ puts and the
  journal sync await, and an entry being dead-lettered is flagged so no one hands it out then;
- reads go through the callables the store passes (``read``, ``queue_ids``, ``min_offset``),
  DLQ copies through ``put``: nothing here imports the facade or the read path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Executor
from pathlib import Path

from wharf.store.codec.layout import (
    MAX_TOPIC_LENGTH,
    POP_RECORD_ACK,
    POP_RECORD_CHANGE,
    POP_RECORD_DONE,
    POP_RECORD_POP,
    POP_RECORD_RESET,
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
)
from wharf.store.codec.properties import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_ORIGIN_MESSAGE_ID,
    TOPIC_PATTERN,
    name_rule,
    validate_topic,
)
from wharf.store.errors import (
    InvalidMessageError,
    InvalidReceiptHandleError,
    StoreError,
    StoreShutDownError,
)
from wharf.store.model import (
    GetResult,
    GetStatus,
    MessageInput,
    PoppedMessage,
    PutResult,
    StoredMessage,
    TagFilter,
)
from wharf.store.pop.handles import format_handle, new_nonce, parse_handle
from wharf.store.pop.journal import DEFAULT_COMPACT_BYTES, JournalWriter, load_journal_blocking
from wharf.store.pop.records import PopRecord, encode_record
from wharf.store.pop.state import InFlight, PopState, QueueKey, QueueState
from wharf.store.pop.wakeups import Waiter, Wakeups

log = logging.getLogger(__name__)

# The message group of a FIFO message: RocketMQ's PROPERTY_SHARDING_KEY, where its proxy stores
# the v2 ``system_properties.message_group``. An empty or missing value: not ordered.
MESSAGE_GROUP_PROPERTY = PROPERTY_MESSAGE_GROUP  # one name with the v2 send path
# Properties of a dead-lettered copy (RocketMQ 5's MessageConst names).
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

MAX_BATCH = 1024
MAX_INVISIBLE_MS = 24 * 3600 * 1000
MAX_ATTEMPTS = 1000
# Offsets between a queue's pop offset and its scan cursor: bounds the acked set and the gap
# scans (a message in flight at the pop offset holds the window; later ones still flow until
# this many are behind it).
DEFAULT_MAX_WINDOW = 65536
# FIFO pops read every passed-over message again on each pop: a smaller window bounds that.
FIFO_MAX_WINDOW = 2048
_MAX_FRESH_READS = 4  # reads of new messages per queue per pop
_FIFO_READ_AHEAD = 32  # messages a FIFO pop reads at least per read
_MIN_EXPIRED_SCAN = 256  # expired entries considered per queue per pop: at least this many

ReadFn = Callable[[str, int, int, int, "TagFilter | None"], GetResult]
PutFn = Callable[[str, int, Sequence[MessageInput]], Awaitable[PutResult]]

_MATCH_ALL = TagFilter(tags=frozenset(), codes=frozenset())
_READABLE = (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING)


class PopService:
    def __init__(
        self,
        journal_path: Path,
        *,
        read: ReadFn,
        queue_ids: Callable[[str], list[int]],
        min_offset: Callable[[str, int], int],
        put: PutFn,
        committed: Callable[[str, str, int], int] | None = None,
        clock_ms: Callable[[], int] | None = None,
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
        max_window: int = DEFAULT_MAX_WINDOW,
        executor: Executor | None = None,
    ) -> None:
        self.journal_path = journal_path
        self._read = read
        self._queue_ids = queue_ids
        self._min_offset = min_offset
        self._put = put
        self._committed = committed or (lambda group, topic, queue_id: -1)
        self._clock = clock_ms or (lambda: int(time.time() * 1000))
        self._compact_bytes = compact_bytes
        self._max_window = max_window
        self._executor = executor
        self.state = PopState()
        self._writer: JournalWriter | None = None
        self._wakeups = Wakeups()
        self._rotation: dict[tuple[str, str], int] = {}
        self._running = False
        self.replayed_records = 0
        self.delivered_total = 0
        self.redelivered_total = 0
        self.acked_total = 0
        self.dead_lettered_total = 0

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the journal (in a thread), replay it, open it for appends."""
        loop = asyncio.get_running_loop()
        self.state, self.replayed_records, size = await loop.run_in_executor(
            self._executor, _replay_blocking, self.journal_path
        )
        self._writer = await loop.run_in_executor(
            self._executor,
            lambda: JournalWriter(
                self.journal_path, size, self._snapshot, self._compact_bytes, self._executor
            ),
        )
        self._running = True

    async def stop(self) -> None:
        """Refuse new calls, wake long polls (they answer what they have), sync and close."""
        self._running = False
        self._wakeups.close()
        if self._writer is not None:
            await self._writer.close()

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's arrival listener (registered by the facade)."""
        self._wakeups.on_arrival(topic, queue_id, max_offset)

    def filter_reads(self, wrap: Callable[[ReadFn], ReadFn]) -> None:
        """Pass this service's queue reads through ``wrap`` (the broker's view: Kafka
        transactions' records hidden until committed, their markers never delivered)."""
        self._read = wrap(self._read)

    def quiet(self) -> bool:
        """No pop waits for arrivals (``Arrivals.add``: the listener is left out)."""
        return self._wakeups.quiet()

    # --- the API ------------------------------------------------------------------------------
    async def pop(
        self,
        group: str,
        topic: str,
        queue_ids: Sequence[int] | None = None,
        tag_filter: TagFilter | None = None,
        batch: int = 32,
        invisible_ms: int = 60_000,
        max_attempts: int = 17,
        fifo: bool = False,
        now: int | None = None,
    ) -> list[PoppedMessage]:
        found, _, _ = await self._pop(
            group, topic, queue_ids, tag_filter, batch, invisible_ms, max_attempts, fifo, now
        )
        return found

    async def _pop(
        self,
        group: str,
        topic: str,
        queue_ids: Sequence[int] | None,
        tag_filter: TagFilter | None,
        batch: int,
        invisible_ms: int,
        max_attempts: int,
        fifo: bool,
        now: int | None,
    ) -> tuple[list[PoppedMessage], bool, bool]:
        """``pop``; whether a queue has messages left unscanned (its read budget ran out
        before the batch filled): a long poll then pops again instead of waiting; and whether
        it awaited (journal sync, DLQ puts): an arrival may have come meanwhile."""
        writer = self._check_running()
        _check_group_topic(group, topic)
        _check_range("batch", batch, 1, MAX_BATCH)
        _check_range("invisible_ms", invisible_ms, 1, MAX_INVISIBLE_MS)
        _check_range("max_attempts", max_attempts, 1, MAX_ATTEMPTS)
        queues = self._queues(topic, queue_ids)
        now = self._clock() if now is None else now
        tag_filter = tag_filter or _MATCH_ALL
        out: list[PoppedMessage] = []
        dead: list[tuple[QueueKey, int, StoredMessage, InFlight]] = []
        more = False
        if queues:
            start = self._rotation.get((group, topic), 0) % len(queues)
            self._rotation[(group, topic)] = start + 1
            for queue_id in queues[start:] + queues[:start]:
                if len(out) >= batch:
                    break
                more |= self._pop_queue(
                    (group, topic, queue_id),
                    tag_filter,
                    batch,
                    now + invisible_ms,
                    max_attempts,
                    fifo,
                    now,
                    out,
                    dead,
                )
        for queue_id in {p.message.queue_id for p in out}:  # re-arm the group's long polls
            self._wakeups.on_expiry(group, topic, queue_id, now + invisible_ms)
        for key, offset, message, entry in dead:
            await self._dead_letter(key, offset, message, entry)
        if out or dead:
            await writer.sync()
        return out, more, bool(out or dead)

    async def pop_wait(
        self,
        group: str,
        topic: str,
        queue_ids: Sequence[int] | None = None,
        tag_filter: TagFilter | None = None,
        batch: int = 32,
        invisible_ms: int = 60_000,
        max_attempts: int = 17,
        fifo: bool = False,
        timeout_ms: int = 0,
    ) -> list[PoppedMessage]:
        """``pop``, long-polling up to ``timeout_ms`` when nothing is visible: woken by an
        arrival on one of the queues, an ack or dead-letter of the group (FIFO groups and full
        windows free up), or the earliest in-flight expiry of the group's queues; returns []
        when the time runs out or the store stops."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        # The waiter is registered after a first pop that found nothing: most receives under
        # load find messages at once, and then cost no waiter (nor make every arrival and
        # expiry of the topic visit it: 32 receives in flight were 32 waiters each time).
        waiter: Waiter | None = None
        try:
            while True:
                found, more, awaited = await self._pop(
                    group, topic, queue_ids, tag_filter, batch, invisible_ms, max_attempts, fifo,
                    None,
                )  # fmt: skip
                remaining = deadline - loop.time()
                if found or remaining <= 0 or not self._running:
                    return found
                if waiter is None:
                    waiter = self._wakeups.register(group, topic, queue_ids)
                    if awaited:  # an arrival during its await woke no one: look again
                        continue
                if more:  # a read budget ran out: scan on, after letting the loop breathe
                    await asyncio.sleep(0)
                    continue
                now = self._clock()
                next_at = self.next_visible_at(group, topic, queue_ids, now)
                waiter.wake_at_ms = next_at
                delay = remaining
                if next_at is not None:
                    delay = min(delay, max(next_at - now, 1) / 1000)
                await waiter.wait(delay)
                if not self._running:
                    return []
        finally:
            if waiter is not None:
                self._wakeups.unregister(waiter)

    async def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """Finish the delivery named by the handle. InvalidReceiptHandleError when it is not
        the live delivery of a message in flight for that group and topic (nothing changes).
        An ack after the invisible time passed is accepted while the message was not handed
        out again. Returns once the ACK record is durable."""
        writer = self._check_running()
        self._ack_one(group, topic, receipt_handle)
        await writer.sync()

    async def ack_many(
        self, group: str, topic: str, receipt_handles: Sequence[str]
    ) -> list[InvalidReceiptHandleError | None]:
        """``ack`` of each handle in order, journaled together: one write and one fdatasync
        for the lot (a v2 AckMessage's entries), where one ``ack`` after another would sync
        each. Per handle, None (acked) or the InvalidReceiptHandleError ``ack`` would raise;
        returns once every ACK record is durable."""
        writer = self._check_running()
        outcomes: list[InvalidReceiptHandleError | None] = []
        for receipt_handle in receipt_handles:
            try:
                self._ack_one(group, topic, receipt_handle)
                outcomes.append(None)
            except InvalidReceiptHandleError as exc:
                outcomes.append(exc)
        if len(outcomes) > sum(map(bool, outcomes)):  # something was acked
            await writer.sync()
        return outcomes

    def _ack_one(self, group: str, topic: str, receipt_handle: str) -> None:
        """Check the handle and journal its ACK (not yet synced)."""
        handle = parse_handle(receipt_handle)
        self._live_entry(group, topic, handle.queue_id, handle.queue_offset, handle.nonce)
        self._record(
            PopRecord(
                POP_RECORD_ACK,
                group,
                topic,
                handle.queue_id,
                handle.queue_offset,
                nonce=handle.nonce,
            )
        )
        self.acked_total += 1
        self._wake_if_unblocked((group, topic, handle.queue_id))

    async def change_invisible(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
        invisible_ms: int,
        now: int | None = None,
    ) -> str:
        """Make the message invisible for ``invisible_ms`` from now (from the call, not from
        the pop) and return its new receipt handle; the old one is then stale. Same handle
        checks as ``ack``; the attempt does not change. Returns once the CHANGE is durable."""
        writer = self._check_running()
        _check_range("invisible_ms", invisible_ms, 1, MAX_INVISIBLE_MS)
        handle = parse_handle(receipt_handle)
        self._live_entry(group, topic, handle.queue_id, handle.queue_offset, handle.nonce)
        now = self._clock() if now is None else now
        nonce = new_nonce()
        visible_at = now + invisible_ms
        self._record(
            PopRecord(
                POP_RECORD_CHANGE,
                group,
                topic,
                handle.queue_id,
                handle.queue_offset,
                visible_at=visible_at,
                nonce=nonce,
            )
        )
        self._wakeups.on_expiry(group, topic, handle.queue_id, visible_at)
        await writer.sync()
        return format_handle(handle.queue_id, handle.queue_offset, nonce)

    async def dead_letter(self, group: str, topic: str, receipt_handle: str) -> None:
        """Move the delivery named by the handle to ``%DLQ%<group>`` now, whatever its attempt
        (the consumer gave up on it: RocketMQ 5's ForwardMessageToDeadLetterQueue). Same handle
        checks as ``ack``; a message retention already deleted is finished without a copy.
        Raises the put's StoreError (disk full ...) with the message left in flight. Returns
        once the copy is stored and the DONE record durable."""
        writer = self._check_running()
        handle = parse_handle(receipt_handle)
        entry = self._live_entry(group, topic, handle.queue_id, handle.queue_offset, handle.nonce)
        key = (group, topic, handle.queue_id)
        if entry.dead_lettering:
            raise InvalidReceiptHandleError(
                f"receipt handle {receipt_handle} is being dead-lettered already"
            )
        message = self._read_one(topic, handle.queue_id, handle.queue_offset)
        if message is None:
            self._done(key, handle.queue_offset, 1)
        else:
            entry.dead_lettering = True
            await self._forward(key, handle.queue_offset, message, entry)
        await writer.sync()

    def forget(self, *, topics: Sequence[str] = (), groups: Sequence[str] = ()) -> int:
        """Drop the pop state of every queue of these topics and of these groups (the topic or
        group was deleted: one created again under that name starts over, from the queue's
        minimum offset). Journaled (RESET records, synced with the next burst); their receipt
        handles become invalid. Returns the number of queue states dropped."""
        if self._writer is None:
            return 0
        topic_set, group_set = set(topics), set(groups)
        doomed = [k for k in self.state.queues if k[1] in topic_set or k[0] in group_set]
        for group, topic, queue_id in doomed:
            try:
                self._record(PopRecord(POP_RECORD_RESET, group, topic, queue_id, 0, 0))
            except StoreError as exc:  # journal failed or closed: forget in memory anyway
                log.warning(
                    "pop: forgetting %s/%s/%d not journaled: %s", group, topic, queue_id, exc
                )
                self.state.queues.pop((group, topic, queue_id), None)
        return len(doomed)

    def progress(self) -> Iterator[tuple[str, str, int, int]]:
        """(group, topic, queue id, pop offset) of every queue state: everything below the pop
        offset is finished. The broker commits it as the group's consumer offset, which
        replicas follow, so a master elected after a failover starts there (``committed``)."""
        for (group, topic, queue_id), state in self.state.queues.items():
            yield group, topic, queue_id, state.pop_offset

    def next_visible_at(
        self, group: str, topic: str, queue_ids: Sequence[int] | None, now: int
    ) -> int | None:
        """The earliest time after ``now`` at which a message of the group in flight on these
        queues becomes visible again (None: nothing in flight expires later)."""
        queues = self._queues(topic, queue_ids)
        best: int | None = None
        for queue_id in queues:
            state = self.state.queues.get((group, topic, queue_id))
            if state is None:
                continue
            for entry in state.in_flight.values():
                at = entry.visible_at_ms
                if at > now and (best is None or at < best):
                    best = at
        return best

    def stats(self) -> dict[str, int]:
        writer = self._writer
        return {
            "queues": len(self.state.queues),
            "in_flight": sum(len(s.in_flight) for s in self.state.queues.values()),
            "delivered_total": self.delivered_total,
            "redelivered_total": self.redelivered_total,
            "acked_total": self.acked_total,
            "dead_lettered_total": self.dead_lettered_total,
            "journal_bytes": writer.size if writer else 0,
            "journal_syncs": writer.syncs if writer else 0,
            "journal_compactions": writer.compactions if writer else 0,
            "replayed_records": self.replayed_records,
            "waiting": self._wakeups.waiting,
        }

    # --- mechanics ----------------------------------------------------------------------------
    def _check_running(self) -> JournalWriter:
        if not self._running or self._writer is None:
            raise StoreShutDownError("the pop service is not running (store stopped)")
        return self._writer

    def _queues(self, topic: str, queue_ids: Sequence[int] | None) -> list[int]:
        """The queue ids to pop from, ascending (the store lists a topic's queues from a
        per-topic index: cheap on every receive)."""
        if queue_ids is None:
            return list(self._queue_ids(topic))
        for queue_id in queue_ids:
            _check_range("queue id", queue_id, 0, 0x7FFFFFFF)
        return list(dict.fromkeys(queue_ids))

    def _record(self, record: PopRecord) -> None:
        assert self._writer is not None
        self._writer.append(encode_record(record))  # raises a sticky journal error first
        self.state.apply(record)

    def _snapshot(self) -> bytes:
        return b"".join(encode_record(record) for record in self.state.snapshot_records())

    def _live_entry(
        self, group: str, topic: str, queue_id: int, offset: int, nonce: int
    ) -> InFlight:
        state = self.state.queues.get((group, topic, queue_id))
        entry = state.in_flight.get(offset) if state is not None else None
        if entry is None or entry.nonce != nonce:
            raise InvalidReceiptHandleError(
                f"receipt handle {format_handle(queue_id, offset, nonce)} is not in flight for "
                f"group {group!r} topic {topic!r}: acked, dead-lettered, redelivered or changed "
                "since (use the newest handle), or not from this broker"
            )
        return entry

    def _wake_if_unblocked(self, key: QueueKey) -> None:
        """After an ack or dead-letter: wake the group's long polls only when that may have
        freed something -- passed-over (FIFO) messages wait, or the window was full -- not
        on every ack of a drained queue."""
        state = self.state.queues.get(key)
        if state is not None and (state.has_gaps or state.window >= FIFO_MAX_WINDOW - 1):
            self._wakeups.on_state_change(*key)

    def _read_one(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        result = self._read(topic, queue_id, offset, 1, None)
        if result.status == GetStatus.FOUND and result.messages:
            message = result.messages[0]
            if message.queue_offset == offset:
                return message
        return None  # deleted by retention (or the queue is gone)

    def _message_group(self, topic: str, queue_id: int, offset: int, entry: InFlight) -> str:
        if entry.message_group is None:
            message = self._read_one(topic, queue_id, offset)
            entry.message_group = _message_group_of(message) if message else ""
        return entry.message_group

    def _deliver(
        self,
        key: QueueKey,
        message: StoredMessage,
        visible_at: int,
        attempt: int,
        message_group: str | None,
        out: list[PoppedMessage],
    ) -> None:
        group, topic, queue_id = key
        nonce = new_nonce()
        offset = message.queue_offset
        self._record(
            PopRecord(POP_RECORD_POP, group, topic, queue_id, offset, 1, visible_at, nonce, attempt)
        )
        if message_group is not None:  # FIFO: known now, kept in memory only
            self.state.queues[key].in_flight[offset].message_group = message_group
        out.append(PoppedMessage(message, format_handle(queue_id, offset, nonce), attempt))
        self.delivered_total += 1
        if attempt > 1:
            self.redelivered_total += 1

    def _done(self, key: QueueKey, offset: int, count: int) -> None:
        if count > 0:
            self._record(PopRecord(POP_RECORD_DONE, key[0], key[1], key[2], offset, count))

    def _pop_queue(
        self,
        key: QueueKey,
        tag_filter: TagFilter,
        want: int,
        visible_at: int,
        max_attempts: int,
        fifo: bool,
        now: int,
        out: list[PoppedMessage],
        dead: list[tuple[QueueKey, int, StoredMessage, InFlight]],
    ) -> bool:
        """Choose this queue's messages (no await in here: see the module docstring). True
        when the read budget ran out with messages left to scan."""
        group, topic, queue_id = key
        state = self.state.queue(key)
        # Below the queue's minimum retention deleted them; below the group's committed offset
        # another master (before a failover) or an operator finished them.
        floor = max(self._min_offset(topic, queue_id), self._committed(group, topic, queue_id))
        if state.pop_offset < floor:  # nothing left to deliver below it
            self._done(key, state.pop_offset, floor - state.pop_offset)
        # the earliest expiries first, bounded: a dead consumer's thousands of expired
        # messages cost a pop O(batch log n), not O(n)
        expired = state.expired(now, max(4 * want, _MIN_EXPIRED_SCAN))
        blocked = self._busy_groups(topic, queue_id, state, expired) if fifo else set()
        if not self._pop_behind(
            key,
            state,
            expired,
            blocked,
            tag_filter,
            want,
            visible_at,
            max_attempts,
            fifo,
            out,
            dead,
        ):
            return False
        return self._pop_fresh(key, state, blocked, tag_filter, want, visible_at, fifo, out)

    def _busy_groups(
        self, topic: str, queue_id: int, state: QueueState, expired: list[int]
    ) -> set[str]:
        """FIFO: the message groups of this queue with a message in flight and not expired (or
        being dead-lettered): none of their messages is handed out now."""
        blocked: set[str] = set()
        expired_set = set(expired)
        for offset, busy in list(state.in_flight.items()):
            if offset not in expired_set or busy.dead_lettering:
                blocked.add(self._message_group(topic, queue_id, offset, busy))
        blocked.discard("")
        return blocked

    def _pop_behind(
        self,
        key: QueueKey,
        state: QueueState,
        expired: list[int],
        blocked: set[str],
        tag_filter: TagFilter,
        want: int,
        visible_at: int,
        max_attempts: int,
        fifo: bool,
        out: list[PoppedMessage],
        dead: list[tuple[QueueKey, int, StoredMessage, InFlight]],
    ) -> bool:
        """Step 1 of ``_pop_queue``, below the scan cursor: expired deliveries and passed-over
        messages, in order (most pops have neither: no set nor sort then). False once ``out``
        is full."""
        topic, queue_id = key[1], key[2]
        behind = sorted(set(expired).union(state.gaps())) if expired or state.has_gaps else ()
        for offset in behind:
            if len(out) >= want:
                return False
            entry = state.in_flight.get(offset)
            if entry is not None and entry.dead_lettering:
                continue
            message = self._read_one(topic, queue_id, offset)
            if message is None or not _matches(tag_filter, message):
                self._done(key, offset, 1)
                continue
            message_group = _message_group_of(message) if fifo else None
            if entry is not None and message_group is not None:
                entry.message_group = message_group
            if message_group in blocked:
                continue
            if message_group:
                blocked.add(message_group)
            if entry is not None and entry.attempt >= max_attempts:
                entry.dead_lettering = True
                dead.append((key, offset, message, entry))
                continue
            attempt = entry.attempt + 1 if entry is not None else 1
            self._deliver(key, message, visible_at, attempt, message_group, out)
        return True

    def _pop_fresh(
        self,
        key: QueueKey,
        state: QueueState,
        blocked: set[str],
        tag_filter: TagFilter,
        want: int,
        visible_at: int,
        fifo: bool,
        out: list[PoppedMessage],
    ) -> bool:
        """Step 2 of ``_pop_queue``: new messages from the scan cursor on. True when the read
        budget ran out with messages left to scan."""
        topic, queue_id = key[1], key[2]
        max_window = min(self._max_window, FIFO_MAX_WINDOW) if fifo else self._max_window
        for _ in range(_MAX_FRESH_READS):
            room = max_window - state.window
            if len(out) >= want or room <= 0:
                return False
            start = state.high
            # FIFO reads ahead: messages of busy message groups are passed over
            count = max(want - len(out), _FIFO_READ_AHEAD) if fifo else want - len(out)
            result = self._read(topic, queue_id, start, min(count, room), tag_filter)
            if result.status not in _READABLE:
                return False
            end = min(result.next_begin_offset, start + room)
            if end <= start:
                return False
            by_offset = {m.queue_offset: m for m in result.messages}
            finished_from = start
            stop = end
            for offset in range(start, end):
                message = by_offset.get(offset)
                if message is None:
                    continue  # filtered out or deleted: finished with the run below
                if offset > finished_from:  # filtered out or deleted before it
                    self._done(key, finished_from, offset - finished_from)
                finished_from = offset + 1
                if len(out) >= want:
                    finished_from = stop = offset
                    break
                message_group = _message_group_of(message) if fifo else None
                if message_group in blocked:
                    continue  # left as a gap: handed out once its group is free
                if message_group:
                    blocked.add(message_group)
                self._deliver(key, message, visible_at, 1, message_group, out)
            self._done(key, finished_from, stop - finished_from)
            if stop > state.high:
                state.high = stop
        return len(out) < want

    async def _dead_letter(
        self, key: QueueKey, offset: int, message: StoredMessage, entry: InFlight
    ) -> None:
        """A pop's dead-lettering after the last attempt: ``_forward``; a failed put (disk
        full ...) leaves the message in flight and expired: the next pop tries again."""
        group, topic, queue_id = key
        try:
            await self._forward(key, offset, message, entry)
        except StoreError as exc:
            log.warning(
                "pop: dead-lettering %s queue %d offset %d for group %s failed (%s); retried "
                "at the next pop",
                topic,
                queue_id,
                offset,
                group,
                exc,
            )

    async def _forward(
        self, key: QueueKey, offset: int, message: StoredMessage, entry: InFlight
    ) -> None:
        """Copy the message to %DLQ%<group> queue 0, then journal DONE (the caller syncs)."""
        group, topic, _ = key
        try:
            await self._put(
                DLQ_GROUP_TOPIC_PREFIX + group, 0, [_dlq_copy(message, topic, entry.attempt)]
            )
        finally:
            entry.dead_lettering = False
        state = self.state.queues.get(key)
        if state is not None and offset >= state.pop_offset and offset not in state.acked:
            self._done(key, offset, 1)
        self.dead_lettered_total += 1
        self._wake_if_unblocked(key)


def _replay_blocking(path: Path) -> tuple[PopState, int, int]:
    """(the journaled state, records replayed, journal bytes): in a thread at start (replay
    costs ~3 us per record: not on the loop)."""
    records, size = load_journal_blocking(path)
    state = PopState()
    for record in records:
        state.apply(record)
    return state, len(records), size


def _message_group_of(message: StoredMessage) -> str:
    return message.properties.get(MESSAGE_GROUP_PROPERTY, "")


def _matches(tag_filter: TagFilter, message: StoredMessage) -> bool:
    return tag_filter.match_all or tag_filter.matches(message.properties)


def _dlq_copy(message: StoredMessage, origin_topic: str, attempts: int) -> MessageInput:
    properties = dict(message.properties)
    properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)  # a DLQ copy is not delayed again
    properties[PROPERTY_DLQ_ORIGIN_TOPIC] = origin_topic
    origin_id = message.unique_id
    if origin_id:
        properties[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = origin_id
        properties.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, origin_id)
    return MessageInput(
        body=message.body,
        properties=properties,
        flag=message.flag,
        sys_flag=message.sys_flag & (SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS),
        born_timestamp=message.born_timestamp,
        born_host=message.born_host,
        reconsume_times=attempts,
    )


def _check_group_topic(group: str, topic: str) -> None:
    validate_topic(topic)
    if (
        not isinstance(group, str)
        or TOPIC_PATTERN.fullmatch(DLQ_GROUP_TOPIC_PREFIX + group) is None
        or not group
    ):
        raise InvalidMessageError(
            # %DLQ%<group> is a topic name
            f"consumer group {group!r} is invalid: use "
            f"{name_rule(MAX_TOPIC_LENGTH - len(DLQ_GROUP_TOPIC_PREFIX))}"
        )


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidMessageError(f"{name} {value!r} must be an integer in [{low}, {high}]")
