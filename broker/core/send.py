"""The send admission every front end calls: ONE for wharf.v1, apache.rocketmq.v2 and whatever
protocol comes next (RocketMQ 4 remoting).

In order, for a request of messages to one topic:

1. ``topic(name)``: the broker is not shutting down (SHUTTING_DOWN); the topic is a legal name
   and not reserved for the broker (ILLEGAL_TOPIC; with ``own_topics=False`` also none of the
   broker's own topics, %RETRY% included: OWN_TOPIC); it exists or is auto-created
   (autoCreateTopicEnable, else TOPIC_NOT_FOUND); its permission bits allow writes
   (NOT_WRITABLE). ``lookup(name, create=...)``: the same without the writable check, for a
   protocol that names a topic before sending (Kafka's Metadata).
2. ``queue(topic, queue_id)``: an explicit queue id is checked against the write queues
   (ILLEGAL_QUEUE); none -> the next turn of the topic's ONE round-robin counter, shared by
   every protocol (one turn per request: a request is one append into one queue).
   ``group_queue`` is the stable queue of a FIFO message group.
3. ``check_inputs(messages)``: the message rules of ``validate.py`` (one set).
4. The store: ``put`` / ``put_records`` (write + durability wait, ``PutResult``), or the split
   forms the fast paths use (``append`` / ``append_records`` now: the store's ``Written``,
   ``durable`` later, or ``flush_waiter`` + ``flushed_result`` as a done-callback; ``dispatch_lagging`` /
   ``dispatch_room`` for the dispatch back-pressure). ``put_once``: the de-duplicated put of
   messages with producer ids (a retry of a stored (topic, message id) gets its first result
   back, no second copy; a retry racing the first attempt waits for it).

Errors are ``errors.Refused`` (with a ``Reason``) or what the store raises; nothing here knows a
protocol's codes. Producer-encoded records (wharf.v1's ``records``) are checked by the store's
append (the record format), not by ``check_inputs``: that path never decodes them here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from itertools import count
from operator import attrgetter, itemgetter, mod
from typing import TYPE_CHECKING, cast

from wharf.broker.core.errors import (
    InvalidSend,
    Reason,
    ShuttingDown,
    TopicNotFound,
    TopicNotWritable,
)
from wharf.broker.core.model import Failed, Planned, SendOutcome, Stored
from wharf.broker.core.validate import check_inputs
from wharf.broker.errors import InvalidArgumentError, NotFoundError, UnavailableError
from wharf.broker.meta.topics import (
    RESERVED_FOR_SEND,
    SYSTEM_TOPIC_PREFIXES,
    TopicConfig,
    TopicConfigManager,
    is_system_topic,
    validate_topic_name,
)
from wharf.store import Written, WrittenMany, durable_all
from wharf.store.codec.properties import PROPERTY_TIMER_DELIVER_MS, PROPERTY_TRANSACTION_PREPARED
from wharf.store.errors import StoreNotWritableError
from wharf.store.model import MessageInput, PutResult, PutStatus

if TYPE_CHECKING:
    from wharf.store import MessageStore

DEDUPE_WINDOW = 65536
# Topics ``admit_round_robin`` remembers as admitted (emptied when full: a miss only costs the
# full check again).
ADMITTED_TOPICS = 4096
_WRITE_QUEUE_NUMS = attrgetter("write_queue_nums")
_NAME = attrgetter("name")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_Key = tuple[str, str]  # (topic, message id)


def _never() -> bool:
    return False


def is_own_topic(name: str) -> bool:
    """The broker's own topics: schedule, retry, dead letters, TBW102, timer and transactions."""
    return (
        is_system_topic(name) or name in RESERVED_FOR_SEND or name.startswith(SYSTEM_TOPIC_PREFIXES)
    )


def group_queue(group: str, write_queue_nums: int) -> int:
    """The queue of a FIFO message group: stable (crc32, not Python's salted hash)."""
    return zlib.crc32(group.encode()) % write_queue_nums


class SendCore:
    """Send admission and storage for every protocol (see the module docstring)."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        *,
        shutting_down: Callable[[], bool] = _never,
        dedupe_window: int = DEDUPE_WINDOW,
    ) -> None:
        self.store = store
        self.topics = topics
        self.shutting_down = shutting_down
        self.max_message_size: int = store.config.max_message_size
        self.dedupe_window = dedupe_window
        # topic -> its round-robin turns: a counter object (``next`` in C) that the admitted
        # entries hold too, so a request's batches take their turns in one pass (map), not a
        # get and an update of this dict each.
        self._turns: dict[str, Iterator[int]] = {}
        # admit_round_robin's, bounded: topic -> (its config when admitted, its turns), valid
        # while the topic table's generation is ``_admitted_at``
        self._admitted: dict[str, tuple[TopicConfig, Iterator[int]]] = {}
        self._admitted_at = -1
        self._done: OrderedDict[_Key, Stored] = OrderedDict()
        self._pending: dict[_Key, asyncio.Future[Stored]] = {}

    # --- admission -------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Raise what the store's next write would be refused with for its role (a master
        whose lease ran out, too few in-sync replicas, a replica), before anything is
        appended: a protocol that checks state of its own first (Kafka's producer sequences)
        answers as the append would (a later request's sequence check must not answer
        OUT_OF_ORDER_SEQUENCE_NUMBER for a gap the refusal of an earlier one made)."""
        role = getattr(self.store, "role", None)  # a test's stand-in store has none
        if role is not None:
            role.refusal()
            reason = self.store.not_writable_reason  # stopping, disk full, a failed sync
            if reason:
                raise StoreNotWritableError(reason)

    def check_open(self) -> None:
        """Refuse sends while the broker shuts down (also the first thing ``topic`` does)."""
        if self.shutting_down():
            raise ShuttingDown(
                Reason.SHUTTING_DOWN, "the broker is shutting down; retry on another broker"
            )

    def topic(self, name: str, *, own_topics: bool = True) -> TopicConfig:
        """The topic a send writes to (step 1); ``own_topics=False`` refuses the broker's own
        topics even when they exist (a producer of that protocol never writes there)."""
        topic = self.lookup(name, create=True, own_topics=own_topics)  # check_open first
        if not topic.writable:
            raise TopicNotWritable(
                Reason.NOT_WRITABLE,
                f"topic {name!r} is not writable (perm={topic.perm}); "
                "UpdateTopic perm=6 to allow sends",
            )
        return topic

    def lookup(self, name: str, *, create: bool, own_topics: bool = True) -> TopicConfig:
        """A topic a producer names before it sends (Kafka's Metadata): step 1's name rules
        and refusals without the writable check. ``create``: made as a send makes it
        (autoCreateTopicEnable), which a broker shutting down refuses (SHUTTING_DOWN) rather
        than make a topic on its way out; else an unknown topic is TOPIC_NOT_FOUND."""
        if create:
            self.check_open()
        if not own_topics and is_own_topic(name):
            raise InvalidSend(
                Reason.OWN_TOPIC, f"topic {name!r} is the broker's own: producers cannot send to it"
            )
        topics = self.topics
        try:
            if not create and topics.get(name) is None:
                validate_topic_name(name)
                raise NotFoundError(f"topic {name!r} does not exist")
            return topics.for_send(name)
        except InvalidArgumentError as exc:
            raise InvalidSend(Reason.ILLEGAL_TOPIC, str(exc)) from None
        except NotFoundError as exc:
            raise TopicNotFound(Reason.TOPIC_NOT_FOUND, str(exc)) from None

    def queue(self, topic: TopicConfig, queue_id: int | None = None) -> int:
        """The queue of a request (step 2): ``queue_id`` checked, or the next turn."""
        if queue_id is None:
            return self.next_queue(topic)
        if not 0 <= queue_id < topic.write_queue_nums:
            raise InvalidSend(
                Reason.ILLEGAL_QUEUE,
                f"queue_id {queue_id} is out of range: topic {topic.name!r} has "
                f"{topic.write_queue_nums} write queues (0..{topic.write_queue_nums - 1})",
            )
        return queue_id

    def next_queue(self, topic: TopicConfig) -> int:
        """The topic's next round-robin queue: one counter per topic for every protocol."""
        return next(self._turns_of(topic.name)) % topic.write_queue_nums

    def _turns_of(self, name: str) -> Iterator[int]:
        turns = self._turns.get(name)
        if turns is None:
            turns = self._turns[name] = count()
        return turns

    def admit_round_robin(self, names: list[str], refused: dict[int, Exception]) -> list[int]:
        """``admit`` of a request's batches (``names[i]`` batch i's topic, its queue the
        topic's next turn): the queue ids of the admitted ones, in order; a refusal goes into
        ``refused`` by index (an index there already is skipped). A topic admitted before is
        taken as it was while no topic has changed since (a change, a deletion or a new
        auto-created topic empties the admitted ones): 32 topics' batches a request paid
        ~0.6 us a batch for the whole ``topic``, and checking each config against
        the topic table was a lookup a batch in a dict of every topic (11,361 in the bench's
        full program), cold at 256 topics. An admitted ``names[i]`` is
        replaced by its config's name, the equal string the broker holds: the request's own
        strings are new objects, and each later lookup of one (turns, queue offsets, record
        tails, metrics) compared its bytes with a cold key's, where the broker's own string is
        that key or compares by identity."""
        self.check_open()
        admitted = self._admitted
        generation = self.topics.generation
        if self._admitted_at != generation:  # a topic changed, came or went since
            admitted.clear()
            self._admitted_at = generation
        if not refused and len(set(names)) == len(names):
            # The usual request: distinct topics, each admitted before. The same steps as the
            # loop below, a pass of C each (map) instead of ~20 bytecodes a batch.
            found = list(map(admitted.get, names))
            if all(found):  # (config, turns) each; a miss is None
                entries = cast("list[tuple[TopicConfig, Iterator[int]]]", found)
                topics = list(map(_FIRST, entries))
                names[:] = map(_NAME, topics)
                taken = map(next, map(_SECOND, entries))
                return list(map(mod, taken, map(_WRITE_QUEUE_NUMS, topics)))
        queue_ids: list[int] = []
        for index, name in enumerate(names):
            if refused and index in refused:
                continue
            entry = admitted.get(name)
            if entry is None:
                try:
                    topic = self.topic(name)
                except Exception as exc:
                    refused[index] = exc
                    continue
                if len(admitted) >= ADMITTED_TOPICS:
                    admitted.clear()
                entry = admitted[topic.name] = (topic, self._turns_of(topic.name))
            topic, turns = entry
            names[index] = topic.name
            # ``next_queue``'s turn: the same counter, so every protocol's sends to a topic
            # share its round robin.
            queue_ids.append(next(turns) % topic.write_queue_nums)
        return queue_ids

    def admit(
        self, name: str, queue_id: int | None = None, *, own_topics: bool = True
    ) -> tuple[TopicConfig, int]:
        """Steps 1 and 2 at once: (topic, queue id)."""
        topic = self.topic(name, own_topics=own_topics)
        return topic, self.queue(topic, queue_id)

    def check_inputs(self, messages: Sequence[MessageInput]) -> None:
        """Step 3: every message against the rules, before anything is stored."""
        check_inputs(messages, self.max_message_size)

    # --- the store: whole puts ---------------------------------------------------------------

    async def put(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> PutResult:
        """Append (after the dispatch back-pressure wait) and wait until durable."""
        return await self.store.put(topic, queue_id, messages)

    async def put_records(
        self, topic: str, queue_id: int, records: bytes, born_host: str
    ) -> PutResult:
        """``put`` of producer-encoded records (the store checks their format)."""
        return await self.store.put(topic, queue_id, records, born_host)

    # --- the store: the split forms of the fast paths ----------------------------------------

    def dispatch_lagging(self) -> bool:
        """True while ``put`` would hold a request for the dispatch to catch up."""
        return self.store.dispatch_lagging()

    async def dispatch_room(self) -> None:
        """The dispatch back-pressure wait of ``put``, once for several appends."""
        await self.store.dispatch_room()

    def append(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> Written:
        """The append, now (no back-pressure wait); ``durable`` or ``flush_waiter`` follow."""
        return self.store.write(topic, queue_id, messages)

    def append_records(self, topic: str, queue_id: int, records: bytes, born_host: str) -> Written:
        return self.store.write(topic, queue_id, records, born_host)

    def append_records_many(
        self, batches: Sequence[tuple[str, int, bytes | memoryview]], born_host: str
    ) -> WrittenMany:
        """Several (topic, queue id, records) appended together (one commit log write), as
        columns: each batch's place or its own error, in order; one ``durable()`` for all."""
        return self.store.write_many(batches, born_host)

    def append_columns(
        self,
        topics: list[str],
        queue_ids: list[int],
        records: bytes,
        sizes: list[int],
        born_host: str,
    ) -> WrittenMany:
        """``append_records_many`` of batches laid out one after another in ``records``
        (``sizes[i]`` bytes for ``topics[i]``, queue ``queue_ids[i]``)."""
        return self.store.write_columns(topics, queue_ids, records, sizes, born_host)

    async def durable_many(self, results: Sequence[Written]) -> list[PutResult]:
        """``durable`` of appends made together, in order: one wait (the last one's)."""
        return await durable_all(results)

    async def durable(self, result: Written) -> PutResult:
        """Wait until an append is durable (disk and replicas, per the store's settings)."""
        return await result.durable()

    def flush_waiter(self, result: Written) -> asyncio.Future[bool] | None:
        """The group commit's future for an append (None: await ``durable`` instead)."""
        return result.flush_waiter()

    def flushed_result(self, result: Written, waiter: asyncio.Future[bool]) -> PutResult:
        """The verdict of a done ``flush_waiter`` future (raises a failed flush's error)."""
        return result.flushed(waiter)

    # --- the store: de-duplicated ------------------------------------------------------------

    async def put_once(self, topic: str, planned: Sequence[Planned]) -> list[SendOutcome]:
        """Store messages with producer ids, once per (topic, message id) within the last
        ``dedupe_window`` stored: one outcome per message, in order. One append per queue
        and kind (the store makes half messages of a batch as a whole; timed ones may share a
        batch). The window is in memory: a retry across a restart may store a second copy."""
        results: list[SendOutcome | None] = [None] * len(planned)
        waits: list[tuple[int, asyncio.Future[Stored]]] = []
        by_queue: dict[tuple[int, bool, str | None], list[int]] = {}
        for index, item in enumerate(planned):
            key = (topic, item.message_id)
            done = self._done.get(key)
            if done is not None:
                results[index] = done
            elif key in self._pending:
                waits.append((index, self._pending[key]))
            else:
                self._pending[key] = asyncio.get_running_loop().create_future()
                props = item.message.properties
                batch_key = (
                    item.queue_id,
                    PROPERTY_TIMER_DELIVER_MS in props,
                    props.get(PROPERTY_TRANSACTION_PREPARED),
                )
                by_queue.setdefault(batch_key, []).append(index)
        try:
            for (queue_id, _, _), indexes in by_queue.items():
                outcomes = await self._put_batch(topic, queue_id, [planned[i] for i in indexes])
                for index, outcome in zip(indexes, outcomes, strict=True):
                    results[index] = outcome
        finally:
            # Cancelled half-way: the appends not started answer their waiters (a retry
            # stores them) instead of leaving them parked forever.
            for indexes in by_queue.values():
                for index in indexes:
                    future = self._pending.pop((topic, planned[index].message_id), None)
                    if future is not None and not future.done():
                        future.set_exception(UnavailableError("cancelled"))
                        future.exception()
        for index, future in waits:
            try:
                results[index] = await asyncio.shield(future)
            except Exception as exc:
                results[index] = Failed(planned[index].message_id, exc)
        return [r for r in results if r is not None]

    async def _put_batch(
        self, topic: str, queue_id: int, batch: Sequence[Planned]
    ) -> list[SendOutcome]:
        keys = [(topic, item.message_id) for item in batch]
        try:
            result = await self.store.put(topic, queue_id, [item.message for item in batch])
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else UnavailableError("cancelled")
            for key in keys:
                future = self._pending.pop(key, None)
                if future is not None and not future.done():
                    future.set_exception(error)
                    future.exception()  # retrieved: a lone failure is not "never retrieved"
            if not isinstance(exc, Exception):
                raise
            return [Failed(item.message_id, exc) for item in batch]
        first = result.append.first_queue_offset
        outcomes: list[SendOutcome] = []
        for i, (item, key) in enumerate(zip(batch, keys, strict=True)):
            props = item.message.properties
            timed = PROPERTY_TIMER_DELIVER_MS in props
            stored = Stored(
                item.message_id,
                queue_id,
                first + i,
                result.status,
                timed=timed,
                prepared=not timed and PROPERTY_TRANSACTION_PREPARED in props,
            )
            outcomes.append(stored)
            remembered = dataclasses.replace(stored, status=PutStatus.PUT_OK, retried=True)
            self._done[key] = remembered
            if len(self._done) > self.dedupe_window:
                self._done.popitem(last=False)
            self._pending.pop(key).set_result(remembered)
        return outcomes
