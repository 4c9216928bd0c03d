"""The one offset read every front end's pull shares: read one queue from an offset, filtered,
long-polling while caught up, with a protocol-neutral outcome (``ReadStatus``) that each front
end maps to its own statuses (wharf.v1 ``PullStatus``, apache.rocketmq.v2 ``Code``, remoting
response codes).

``ReadCore.read_waiting(..., early=...)``: a parked read is answered in place (``LongPollHolder``
"Answer in place"): the arrival's callback reads the queue and hands what it found to
``early``, whose value the read then returns instead of a ``Read``.

Kafka transactions (``txn_index.py``): every read here stops at the queue's last stable offset
and skips markers and aborted records (a range of them only reads as NO_MATCHED, the client
goes on at ``next_begin_offset``), except Kafka's own Fetch (``all_records``), which decides by
its isolation level.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

from wharf.broker.config import BrokerConfig
from wharf.broker.core.long_poll import LongPollHolder
from wharf.broker.core.txn_index import TxnIndex
from wharf.broker.errors import ResourceExhaustedError
from wharf.store import DEFERRED, DURABLE, REFUSED
from wharf.store.model import GetResult, GetStatus, RawGetResult, TagFilter

if TYPE_CHECKING:
    from wharf.store import MessageStore

__all__ = [
    "DEFERRED",
    "DURABLE",
    "REFUSED",
    "DurableWriter",
    "Read",
    "ReadCore",
    "ReadStatus",
    "visible_reads",
]
# ReadCore.write_when_durable: (end, socket fd, bytes, done(outcome)) -> DEFERRED (the sync
# thread will write it) | DURABLE (durable already: write it yourself) | REFUSED (declined).
DurableWriter = Callable[[int, int, bytes, Callable[[int], None]], int]
MAX_WAIT_MS = 60_000  # longer waits would outlive typical client deadlines
DISPATCH_WAIT_S = 1.0  # how long a read that finds nothing waits for pending dispatch, once


class ReadStatus(enum.Enum):
    """What a read found, in RocketMQ's pull terms."""

    FOUND = "found"
    NO_NEW = "no_new"  # caught up: wait and read the same offset again
    NO_MATCHED = "no_matched"  # a range filtered out (or unreadable): go on at next_begin
    OFFSET_ILLEGAL = "offset_illegal"  # outside the queue: go on at next_begin


class Read(NamedTuple):
    """One read's store result and its neutral status."""

    result: GetResult | RawGetResult
    status: ReadStatus


_STATUS = {
    GetStatus.FOUND: ReadStatus.FOUND,
    GetStatus.NO_MATCHED_MESSAGE: ReadStatus.NO_MATCHED,
    GetStatus.OFFSET_OVERFLOW_ONE: ReadStatus.NO_NEW,
    GetStatus.OFFSET_OVERFLOW_BADLY: ReadStatus.OFFSET_ILLEGAL,
    GetStatus.OFFSET_TOO_SMALL: ReadStatus.OFFSET_ILLEGAL,
    # The unit points below the commit log's min offset, or retention is deleting it: skip
    # ahead to next_begin_offset like a filtered-out range.
    GetStatus.OFFSET_FOUND_NULL: ReadStatus.NO_MATCHED,
    GetStatus.MESSAGE_WAS_REMOVING: ReadStatus.NO_MATCHED,
}


def read_status(result: GetResult | RawGetResult, offset: int) -> ReadStatus:
    if result.status is GetStatus.NO_MESSAGE_IN_QUEUE:
        # An empty queue: offset 0 simply waits; any other offset is illegal (RocketMQ:
        # PULL_OFFSET_MOVED), the result's next_begin_offset says where to go.
        return ReadStatus.NO_NEW if offset == 0 else ReadStatus.OFFSET_ILLEGAL
    return _STATUS[result.status]


class ReplyGate(Protocol):
    """A front end's budget of unread replies (broker/frontends/reply_budget.py): the read waits
    for ``room`` while ``full``, ``admit`` refuses (ResourceExhaustedError) before a read when
    the client's budget is spent, ``long_polling`` marks a parked read."""

    @property
    def full(self) -> bool: ...

    async def room(self) -> None: ...

    def admit(self) -> None: ...

    def long_polling(self) -> None: ...


class _Ungated:
    """No budget (callers without one: v2's pull, remoting)."""

    full = False

    async def room(self) -> None:
        pass

    def admit(self) -> None:
        pass

    def long_polling(self) -> None:
        pass


UNGATED: ReplyGate = _Ungated()
T = TypeVar("T")


class _Early(Generic[T]):
    """What an in-place answer returned (told apart from park's True / False)."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


class ReadCore:
    """The broker's one offset read (``port.read``)."""

    def __init__(self, config: BrokerConfig, store: MessageStore, long_poll: LongPollHolder):
        self._config = config
        self._store = store
        self._long_poll = long_poll
        # Kafka transactions' open and aborted records (txn_index.py): filled by the Kafka
        # coordinator, honoured by every read here
        self.txns = TxnIndex()

    async def own_writes_visible(self, timeout_s: float = DISPATCH_WAIT_S) -> bool:
        """Read-your-writes: acknowledgements precede the dispatch that makes a message
        readable (its queue offset, the queue's max offset), so a read right after a send's
        ack, or at an offset taken from one, can miss it. Wait once, at most ``timeout_s``
        (``DISPATCH_WAIT_S``), for the dispatch to reach what is written now; True when there
        was something to wait for (the caller reads again), False when all was dispatched.
        Every protocol's read asks this one wait (``read_answering``, Kafka's Fetch and
        ListOffsets)."""
        store = self._store
        if not store.dispatch_pending:
            return False
        await store.wait_dispatched(timeout_s)
        return True

    def write_when_durable(
        self, end: int, fd: int, data: bytes, done: Callable[[int], None]
    ) -> int:
        """A reply built ahead of the sync (``read_answering``'s ``durable``), written to
        socket ``fd`` by the sync thread once the log is durable to ``end``
        (``MessageStore.write_when_durable``: DEFERRED, DURABLE or REFUSED)."""
        return self._store.write_when_durable(end, fd, data, done)

    async def read_waiting(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_filter: TagFilter,
        max_wait_ms: int,
        raw: bool = False,
        replies: ReplyGate = UNGATED,
        max_bytes: int = 0,
        all_records: bool = False,
    ) -> Read:
        """Read one queue from ``offset`` (at most ``max_messages``, 0 = the default batch,
        and ``max_bytes``, 0 = maxPullBytes, which also caps it), long-polling up to
        ``max_wait_ms`` while caught up. ``raw``: stored record bytes, tag HASH filter only
        (the client re-checks). A stream's ``replies`` may be ``full``: the read then waits for
        its client to take replies."""
        read = await self.read_answering(
            topic,
            queue_id,
            offset,
            max_messages,
            tag_filter,
            max_wait_ms,
            raw,
            replies,
            max_bytes,
            all_records=all_records,
        )
        assert isinstance(read, Read)  # no early: never answered in place
        return read

    async def read_answering(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_filter: TagFilter,
        max_wait_ms: int,
        raw: bool,
        replies: ReplyGate,
        max_bytes: int,
        early: Callable[[Read], T] | None = None,
        durable: Callable[[Read, int], T | None] | None = None,
        all_records: bool = False,
    ) -> Read | T:
        """``read_waiting``; with ``early``, a parked read is answered in place (module
        docstring): ``early`` gets what the arrival's read found and its value is returned.
        With ``durable`` (a raw read), it may be answered ahead of the sync: ``durable(read,
        end)`` gets what the running sync will make visible and must see its reply written
        only once the log is durable to ``end``; its value (None: declined) is returned."""
        cfg = self._config
        max_count = min(max_messages or cfg.default_pull_batch_size, cfg.max_pull_batch_size)
        byte_cap = min(max_bytes, cfg.max_pull_bytes) if max_bytes > 0 else cfg.max_pull_bytes
        wait_ms = min(max_wait_ms, MAX_WAIT_MS) if cfg.long_polling_enable else 0
        deadline = time.monotonic() + wait_ms / 1000
        store = self._store
        long_poll = self._long_poll
        read: Callable[..., GetResult | RawGetResult] = (
            store.get_raw_records if raw else store.get_messages
        )
        txns = self.txns if self.txns and not all_records else None
        if txns is not None:
            read = visible_reads(txns, read)
        waited_for_dispatch = False
        while True:
            if replies.full:
                await replies.room()
            replies.admit()
            result = read(topic, queue_id, offset, max_count, tag_filter, byte_cap)
            status = read_status(result, offset)
            if status is ReadStatus.FOUND:
                break
            # Park only when caught up (nothing new, or everything new filtered out).
            caught_up = status is ReadStatus.NO_NEW or (
                status is ReadStatus.NO_MATCHED and result.next_begin_offset >= result.max_offset
            )
            remaining = deadline - time.monotonic()
            can_park = wait_ms > 0 and caught_up and remaining > 0 and not long_poll.closed
            if not can_park and not waited_for_dispatch and store.dispatch_pending:
                # Read-your-writes (``own_writes_visible``; its flag tested here first, so an
                # empty read with nothing pending does not pay a coroutine), once, before
                # answering NO_NEW / OFFSET_ILLEGAL. A read that parks needs no such wait:
                # dispatching this queue's data wakes it at once, whereas waiting for the
                # whole log to be dispatched cost every empty long poll under SYNC_FLUSH load
                # a sync plus 5 ms polling steps.
                waited_for_dispatch = True
                await self.own_writes_visible()
                continue
            if not can_park:
                break
            offset = max(offset, result.next_begin_offset)
            replies.long_polling()
            answer = ahead = None
            at = _At(topic, queue_id, offset, max_count, tag_filter, byte_cap)
            if early is not None:
                answer = _answer(early, read, at, replies)
            if durable is not None and raw:
                ahead = _ahead(durable, store, at, replies, txns)
            woken = await long_poll.park(topic, queue_id, offset, remaining, answer, ahead)
            if isinstance(woken, _Early):
                return woken.value
            if not woken and (long_poll.closed or time.monotonic() >= deadline):
                if replies.full:
                    await replies.room()
                replies.admit()
                result = read(topic, queue_id, offset, max_count, tag_filter, byte_cap)
                status = read_status(result, offset)
                break
        return Read(result, status)


class _At(NamedTuple):
    """Where a parked read reads once answered."""

    topic: str
    queue_id: int
    offset: int
    max_count: int
    tag_filter: TagFilter
    byte_cap: int


def _room_for(replies: ReplyGate) -> bool:
    """An answer may be built: the stream's replies have room and the client's budget admits
    it (a refusal is left to the read, which meets it itself when it resumes)."""
    if replies.full:
        return False
    try:
        replies.admit()
    except ResourceExhaustedError:
        return False
    return True


def _answer(
    early: Callable[[Read], T],
    read: Callable[..., GetResult | RawGetResult],
    at: _At,
    replies: ReplyGate,
) -> Callable[[int], _Early[T] | None]:
    """A parked read's in-place answer (LongPollHolder): the read it would do once resumed,
    answered through ``early`` when it finds messages; None (the read resumes and goes on as
    usual) when its stream's replies are full or nothing matched."""

    def answer(_max_offset: int) -> _Early[T] | None:
        if not _room_for(replies):
            return None
        result = read(*at)
        if result.status is not GetStatus.FOUND:
            return None
        return _Early(early(Read(result, ReadStatus.FOUND)))

    return answer


def _ahead(
    durable: Callable[[Read, int], T | None],
    store: MessageStore,
    at: _At,
    replies: ReplyGate,
    txns: TxnIndex | None = None,
) -> Callable[[int, int], _Early[T] | None]:
    """A parked raw read's answer ahead of the sync (LongPollHolder ``on_planned``): the read
    of what the running sync will make visible, handed to ``durable`` with the log offset it
    waits for; None (the read stays parked) when its stream's replies are full, nothing
    planned matched, or ``durable`` declined."""

    def ahead(_max_offset: int, _durable_end: int) -> _Early[T] | None:
        if txns is not None and txns.queue(at.topic, at.queue_id) is not None:
            return None  # a Kafka transaction's queue: answered after the sync, filtered
        if not _room_for(replies):
            return None
        found = store.get_raw_records_ahead(*at)
        if found is None or found[0].status is not GetStatus.FOUND:
            return None
        result, end = found
        value = durable(Read(result, ReadStatus.FOUND), end)
        return None if value is None else _Early(value)

    return ahead


_NO_OPEN = 1 << 62
Reader = Callable[..., GetResult | RawGetResult]


def visible_reads(txns: TxnIndex, read: Reader) -> Reader:
    """``read`` up to the queue's last stable offset, without Kafka's markers and aborted
    records (txn_index.py): at the LSO it answers OFFSET_OVERFLOW_ONE (caught up: a long
    poll parks until the marker's arrival), a range of hidden records NO_MATCHED."""

    plain = read

    def read_visible(
        topic: str, queue_id: int, offset: int, max_count: int, tag_filter: TagFilter | None,
        *byte_cap: int,
    ) -> GetResult | RawGetResult:  # fmt: skip
        if txns.loading:  # (a new master replaying its transactions: nothing stable yet)
            result = read(topic, queue_id, offset, 1, tag_filter, *byte_cap)
            if result.status is not GetStatus.FOUND:
                return result
            return _nothing(result, GetStatus.OFFSET_OVERFLOW_ONE, offset)
        if txns.queue(topic, queue_id) is None:  # never a Kafka transaction here
            return plain(topic, queue_id, offset, max_count, tag_filter, *byte_cap)
        lso = txns.lso(topic, queue_id, _NO_OPEN)
        if lso <= offset:
            result = read(topic, queue_id, offset, 1, tag_filter, *byte_cap)
            if result.status is not GetStatus.FOUND:
                return result
            return _nothing(result, GetStatus.OFFSET_OVERFLOW_ONE, offset)
        result = read(topic, queue_id, offset, min(max_count, lso - offset), tag_filter, *byte_cap)
        if result.status is not GetStatus.FOUND:
            return result
        if isinstance(result, RawGetResult):
            kept = txns.keep_raw(topic, queue_id, result.records, result.count)
            if kept is None:
                return result
            if not kept[1]:
                return _nothing(result, GetStatus.NO_MATCHED_MESSAGE, result.next_begin_offset)
            return dataclasses.replace(result, records=kept[0], count=kept[1])
        messages = txns.visible(topic, queue_id, result.messages)
        if len(messages) == len(result.messages):
            return result
        if not messages:
            return _nothing(result, GetStatus.NO_MATCHED_MESSAGE, result.next_begin_offset)
        return dataclasses.replace(result, messages=messages)

    return read_visible


def _nothing(result: GetResult | RawGetResult, status: GetStatus, next_begin: int) -> Any:
    if isinstance(result, RawGetResult):
        return RawGetResult(status, next_begin, result.min_offset, result.max_offset)
    return GetResult(status, next_begin, result.min_offset, result.max_offset)
