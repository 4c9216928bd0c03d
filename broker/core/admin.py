"""The admin operations every protocol's tools reach (wharf.v1's AdminService, mqadmin and the
Dashboard over remoting, Kafka's CreateTopics/DeleteTopics): topics and subscription groups
created, changed and deleted with their side effects (offsets, store files, metrics), topic
statistics and a group's progress, as core values each front end renders its own way.

A change is answered once it is on disk (``TopicConfigManager.durable``, the persister's next
round): a kill -9 right after an answer keeps what it acknowledged."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wharf.broker.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from wharf.broker.meta.groups import (
    SubscriptionGroup,
    SubscriptionGroupManager,
    validate_group_name,
)
from wharf.broker.meta.offsets import ConsumerOffsetManager
from wharf.broker.meta.topics import (
    TopicConfig,
    TopicConfigManager,
    checked_attributes,
    validate_perm,
    validate_queue_nums,
    validate_topic_name,
)
from wharf.store.errors import StoreError
from wharf.store.model import QueueStat

if TYPE_CHECKING:
    from wharf.broker.core.clients import ClientRegistry
    from wharf.store import MessageStore

__all__ = [
    "AdminCore",
    "ConsumerProgress",
    "QueueProgress",
    "QueueStats",
    "TopicSpec",
    "TopicStats",
]


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic to create: 0 queues take the broker's default."""

    name: str
    read: int
    write: int
    perm: int
    attributes: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int  # ms of the newest record, 0 for an empty queue


@dataclass(frozen=True, slots=True)
class TopicStats:
    name: str
    queues: list[QueueStats]  # every read or write queue of the topic, by id
    total_messages: int  # held now (max - min over the queues)


@dataclass(frozen=True, slots=True)
class QueueProgress:
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int  # -1: never committed
    lag: int
    last_timestamp: int  # store time of the last consumed record, 0 if none


@dataclass(frozen=True, slots=True)
class ConsumerProgress:
    consumer_group: str
    queues: list[QueueProgress]
    total_lag: int
    online_clients: int


class AdminCore:
    """Topic and group administration over the metadata tables and the store."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        clients: ClientRegistry,
        default_retry_max_times: int,
        topic_gone: Callable[[str], None],
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.default_retry_max_times = default_retry_max_times
        self.topic_gone = topic_gone  # a deleted topic's per-topic metrics and caches

    # --- topics -----------------------------------------------------------------------------
    async def create_topic(
        self, name: str, read: int, write: int, perm: int, attributes: Mapping[str, str]
    ) -> TopicConfig:
        """A new topic (AlreadyExistsError if it exists); 0 queues take the default."""
        (outcome,) = await self.create_topics([TopicSpec(name, read, write, perm, attributes)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def create_topics(self, specs: Sequence[TopicSpec]) -> list[TopicConfig | Exception]:
        """Each spec made in the table in turn, its own refusal (AlreadyExistsError,
        InvalidArgumentError) in its slot, then one wait for the disk for all of them: a
        request of n topics (Kafka's CreateTopics) waits one persist round, not n. A failed
        write is the error of every topic this call made."""
        default = self.topics.default_queue_nums
        outcomes: list[TopicConfig | Exception] = []
        for spec in specs:
            try:
                outcomes.append(
                    self.topics.create(
                        spec.name, spec.read or default, spec.write or default, spec.perm,
                        dict(spec.attributes),
                    )
                )  # fmt: skip
            except (AlreadyExistsError, InvalidArgumentError) as exc:
                outcomes.append(exc)
        if any(isinstance(o, TopicConfig) for o in outcomes):
            try:
                await self.topics.durable()
            except Exception as exc:
                outcomes = [exc if isinstance(o, TopicConfig) else o for o in outcomes]
        return outcomes

    async def update_topic(
        self,
        name: str,
        read: int | None,
        write: int | None,
        perm: int | None,
        attributes: Mapping[str, str],
    ) -> TopicConfig:
        """Change what is given (None keeps it); an attribute with an empty value is removed."""
        validate_topic_name(name)
        current = self.topics.require(name)
        new_read = current.read_queue_nums if read is None else read
        new_write = current.write_queue_nums if write is None else write
        new_perm = current.perm if perm is None else perm
        validate_queue_nums(new_read, new_write)
        validate_perm(new_perm)
        merged = dict(current.attributes)
        for key, value in attributes.items():
            if value:
                merged[key] = value
            else:
                merged.pop(key, None)
        updated = TopicConfig(name, new_read, new_write, new_perm, checked_attributes(merged))
        replaced = self.topics.replace(updated)
        await self.topics.durable()
        return replaced

    async def delete_topic(self, name: str) -> None:
        """The topic, its committed offsets and its files (NotFoundError if unknown)."""
        validate_topic_name(name)
        self.topics.delete(name)
        self.offsets.remove_topic(name)
        self.topic_gone(name)
        try:
            await self.store.delete_topics([name])
        finally:  # gone from the table either way: that is what is made durable
            await self.topics.durable()

    def message_counts(self, topics: Sequence[TopicConfig]) -> list[tuple[str, int, int]]:
        """(name, messages held, messages ever written) of each topic, from its queues' min
        and max offsets only: no log read per queue (a listing of thousands of topics)."""
        max_offset, min_offset = self.store.get_max_offset, self.store.get_min_offset
        out = []
        for topic in topics:
            name = topic.name
            total = written = 0
            for queue_id in range(max(topic.read_queue_nums, topic.write_queue_nums)):
                high = max_offset(name, queue_id)
                total += high - min_offset(name, queue_id)
                written += high
            out.append((name, total, written))
        return out

    def reset_offsets_to_time(self, group: str, name: str, timestamp_ms: int) -> dict[int, int]:
        """Commit, for each readable queue of topic ``name``, the first offset stored at or
        after ``timestamp_ms`` (the max offset if none) as ``group``'s (auto-created when
        allowed); the offsets committed. Refused, in this order: a bad group or topic name, an
        unknown topic (NotFoundError), a negative time, an unknown group without auto-create."""
        validate_group_name(group)
        validate_topic_name(name)
        topic = self.topics.require(name)
        if timestamp_ms < 0:
            raise InvalidArgumentError(f"timestamp must be >= 0, got {timestamp_ms}")
        self.groups.for_use(group)
        offsets = {}
        for queue_id in range(topic.read_queue_nums):
            offset = self.store.get_offset_by_timestamp(topic.name, queue_id, timestamp_ms)
            self.offsets.commit(group, topic.name, queue_id, offset)
            offsets[queue_id] = offset
        return offsets

    def topic_stats(self, name: str) -> TopicStats:
        validate_topic_name(name)
        topic = self.topics.require(name)
        stats = {s.queue_id: s for s in self.store.get_queue_stats(name)}
        queues = []
        total = 0
        for queue_id in range(max(topic.read_queue_nums, topic.write_queue_nums)):
            stat = stats.get(queue_id)
            low, high = (stat.min_offset, stat.max_offset) if stat else (0, 0)
            total += high - low
            stamp = stat.last_update_timestamp if stat else 0
            queues.append(QueueStats(queue_id, low, high, stamp))
        return TopicStats(name, queues, total)

    # --- groups -----------------------------------------------------------------------------
    async def put_group(
        self,
        name: str,
        *,
        consume_enable: bool | None = None,
        consume_broadcast_enable: bool = False,
        retry_max_times: int = 0,
        retry_queue_nums: int = 0,
        consume_from_where: int = 0,
        consume_timestamp: int = 0,
        consume_message_orderly: bool | None = None,
    ) -> SubscriptionGroup:
        """Create or replace a group. None keeps what an existing group had (a new one is
        enabled and not orderly); 0 retries take the broker's default, 0 retry queues one."""
        validate_group_name(name)
        if retry_max_times < 0 or retry_queue_nums < 0:
            raise InvalidArgumentError("retry_max_times and retry_queue_nums must be >= 0")
        existing = self.groups.get(name)
        if consume_enable is None:
            consume_enable = existing is None or existing.consume_enable
        if consume_message_orderly is None:
            consume_message_orderly = existing is not None and existing.consume_message_orderly
        group = SubscriptionGroup(
            group_name=name,
            consume_enable=consume_enable,
            consume_broadcast_enable=consume_broadcast_enable,
            retry_max_times=retry_max_times or self.default_retry_max_times,
            retry_queue_nums=retry_queue_nums or 1,
            consume_from_where=consume_from_where,
            consume_timestamp=consume_timestamp,
            consume_message_orderly=consume_message_orderly,
        )
        stored = self.groups.put(group)
        await self.groups.durable()
        return stored

    async def delete_group(self, name: str, *, offsets: bool = True) -> None:
        """The group's config (NotFoundError if unknown) and, with ``offsets``, its committed
        offsets and pop state (mqadmin deleteSubGroup keeps them without removeOffset)."""
        validate_group_name(name)
        self.groups.delete(name)
        if offsets:
            self.offsets.remove_group(name)
            with contextlib.suppress(StoreError):  # a replica serves no pop: nothing to forget
                self.store.pop.forget(groups=[name])
        await self.groups.durable()

    async def delete_offsets(self, group: str, topic: str, queue_ids: set[int]) -> None:
        """A group's committed offsets of some queues of a topic (Kafka's OffsetDelete),
        answered once on disk as a Kafka commit is."""
        validate_group_name(group)
        self.offsets.remove_queues(group, topic, queue_ids)
        await self.offsets.durable()

    async def delete_group_and_offsets(self, name: str) -> None:
        """A group's config when it has one, its committed offsets and pop state (Kafka's
        DeleteGroups: a group may have offsets and no config); NotFoundError when it has
        neither. Answered once both tables are on disk."""
        validate_group_name(name)
        if self.groups.get(name) is None:
            if name not in self.offsets.groups():
                raise NotFoundError(f"consumer group {name!r} has no offsets and is not known")
            self.offsets.remove_group(name)
        else:
            await self.delete_group(name)
        await self.offsets.durable()

    def forget_offsets(self, group: str) -> None:
        """A group's committed offsets only (its config may be gone already: mqadmin
        deleteSubGroup with removeOffset of a group without config)."""
        self.offsets.remove_group(group)

    def consumer_progress(self, group: str, topic: str = "") -> ConsumerProgress:
        """Each queue's broker and committed offsets and lag, for ``topic`` or every topic the
        group committed or subscribes to (NotFoundError for a group nobody knows)."""
        validate_group_name(group)
        committed = self.offsets.of_group(group)
        topics = set(committed) | self.clients.subscribed_topics(group)
        if topic:
            validate_topic_name(topic)
            topics = {topic}
        if self.groups.get(group) is None and not committed:
            raise NotFoundError(f"consumer group {group!r} has no offsets and is not known")
        queues = []
        total = 0
        for name in sorted(topics):
            offsets = committed.get(name, {})
            for stat in sorted(self.store.get_queue_stats(name), key=lambda s: s.queue_id):
                consumer = offsets.get(stat.queue_id, -1)
                lag = max(0, stat.max_offset - max(consumer, stat.min_offset))
                total += lag
                last = self._last_consumed_timestamp(name, stat, consumer)
                queues.append(
                    QueueProgress(name, stat.queue_id, stat.max_offset, consumer, lag, last)
                )
        return ConsumerProgress(group, queues, total, self.clients.online_count(group))

    def _last_consumed_timestamp(self, topic: str, stat: QueueStat, consumer: int) -> int:
        if consumer <= stat.min_offset:
            return 0
        result = self.store.get_messages(topic, stat.queue_id, consumer - 1, 1)
        return result.messages[0].store_timestamp if result.messages else 0
