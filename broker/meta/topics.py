"""TopicConfigManager: the topic table, persisted as RocketMQ's ``config/topics.json``.

System topics: ``SCHEDULE_TOPIC_XXXX`` (one queue per delay level, made at start),
``%RETRY%<group>`` (1 queue, made on heartbeat / send-back), ``%DLQ%<group>`` (1 queue, made on
the first dead letter). They are hidden from ListTopics unless include_system is set.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from wharf.broker.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from wharf.broker.meta import topic_configs
from wharf.broker.meta.persist import PendingWrite, TableJournal, nothing_to_write
from wharf.store.codec.layout import MAX_TOPIC_LENGTH as STORE_MAX_TOPIC_LENGTH
from wharf.store.codec.layout import MAX_TOPIC_LENGTH_V1
from wharf.store.codec.properties import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    name_rule,
    valid_name,
)

PERM_READ = 4
PERM_WRITE = 2
PERM_READ_WRITE = PERM_READ | PERM_WRITE
# Topic names: up to 249 characters (Kafka's limit: a name over 127 is stored in RocketMQ 5's
# second record version, store/codec/layout.py) for every reader and writer. RocketMQ 4.x
# clients know only the first version and refuse names over 127 themselves: the remoting front
# end creates no longer topic (MAX_ROCKETMQ_TOPIC_LENGTH) and refuses its PULLs.
MAX_TOPIC_LENGTH = STORE_MAX_TOPIC_LENGTH
MAX_ROCKETMQ_TOPIC_LENGTH = MAX_TOPIC_LENGTH_V1
MAX_QUEUE_NUMS = 1024
# Names a producer may not send to directly (the broker writes them itself).
# Kafka's internal topics too: Wharf keeps a group's offsets (and a transaction's state) in
# its own tables, and a topic of that name would be taken by Kafka's tools for Kafka's own.
RESERVED_FOR_SEND = (SCHEDULE_TOPIC, "TBW102", "__consumer_offsets", "__transaction_state")
# The timer's and the transactions' topics (RocketMQ's rmq_sys_ / RMQ_SYS_ prefixes).
SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_")


log = logging.getLogger("broker")


def validate_topic_name(name: str, limit: int = MAX_TOPIC_LENGTH) -> None:
    """A topic name any protocol may name (read, list, send to); ``limit``
    MAX_ROCKETMQ_TOPIC_LENGTH for a name RocketMQ 4.x remoting is about to create."""
    if not name:
        raise InvalidArgumentError("topic is required")
    if len(name) > limit:
        why = (
            "RocketMQ 4.x clients read only records of topics up to 127 characters; create "
            "longer names over Kafka or wharf.v1"
            if limit == MAX_ROCKETMQ_TOPIC_LENGTH
            else "Kafka's limit"
        )
        raise InvalidArgumentError(
            f"topic name is {len(name)} characters; the limit is {limit} ({why})"
        )
    if not valid_name(name):
        raise InvalidArgumentError(f"topic name {name!r} is invalid: use {name_rule()}")


def is_system_topic(name: str) -> bool:
    return (
        name == SCHEDULE_TOPIC
        or name.startswith(RETRY_GROUP_TOPIC_PREFIX)
        or name.startswith(DLQ_GROUP_TOPIC_PREFIX)
    )


# RocketMQ 5's topic attribute: which message types its producers may send (TopicMessageType);
# absent = any, as a topic created before the attribute existed.
MESSAGE_TYPE_ATTRIBUTE = "message.type"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")


def checked_attributes(attributes: dict[str, str]) -> dict[str, str]:
    """The attributes to store: ``message.type`` upper-cased and one of MESSAGE_TYPES; the
    cleanup configs (``topic_configs.KEYS``) in their stored form; others as given. A name in
    RocketMQ 5's "add" spelling (``+cleanup.policy``, as mqadmin and its clients write it)
    is stored without the ``+``, whichever protocol carried it, and wins over the plain one."""
    out = {k: v for k, v in attributes.items() if not k.startswith("+")}
    out.update({k[1:]: v for k, v in attributes.items() if k.startswith("+") and k[1:]})
    for name in out.keys() & topic_configs.KEYS.keys():
        try:
            out[name] = topic_configs.checked(name, out[name])
        except topic_configs.ConfigError as exc:
            raise InvalidArgumentError(str(exc)) from None
    kind = out.get(MESSAGE_TYPE_ATTRIBUTE)
    if kind is not None:
        out[MESSAGE_TYPE_ATTRIBUTE] = kind = kind.strip().upper()
        if kind not in MESSAGE_TYPES:
            raise InvalidArgumentError(
                f"{MESSAGE_TYPE_ATTRIBUTE} must be one of {', '.join(MESSAGE_TYPES)}; got {kind!r}"
            )
    return out


def validate_queue_nums(read: int, write: int) -> None:
    for label, value in (("read_queue_nums", read), ("write_queue_nums", write)):
        if not 1 <= value <= MAX_QUEUE_NUMS:
            raise InvalidArgumentError(f"{label} must be 1..{MAX_QUEUE_NUMS}, got {value}")


def validate_perm(perm: int) -> None:
    if perm & ~PERM_READ_WRITE or perm < 0:
        raise InvalidArgumentError(
            f"perm must combine 4 (read) and 2 (write): 2, 4 or 6; got {perm}"
        )


@dataclass(slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    def to_json(self) -> dict[str, Any]:
        return {
            "topicName": self.name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        return cls(
            name=str(data["topicName"]),
            read_queue_nums=int(data["readQueueNums"]),
            write_queue_nums=int(data["writeQueueNums"]),
            perm=int(data.get("perm", PERM_READ_WRITE)),
            attributes={str(k): str(v) for k, v in data.get("attributes", {}).items()},
        )


class TopicConfigManager:
    FILE_NAME = "topics.json"

    def __init__(self, default_queue_nums: int, auto_create: bool) -> None:
        self.default_queue_nums = default_queue_nums
        self.auto_create = auto_create
        self.table: dict[str, TopicConfig] = {}
        self.dirty = False
        self.version = 0  # bumped on every change (dataVersion)
        # Bumped on every change and load, never reset (version follows a file's or a
        # master's): what caches configs (SendCore's admitted topics) compares.
        self.generation = 0
        # Bumped when a topic with attributes (message.type, the cleanup configs) is put or
        # deleted, and on every load: what the store's policy view is rebuilt on
        # (broker/core/policies.py), so that auto-creating 10,000 plain topics does not
        # rescan the table 10,000 times (~1.2 ms a scan at 10,000 topics).
        self.attributes_generation = 0
        # Told after such a change, the table updated (the store's retention: a compacted
        # topic's keyless messages are refused from the next write on).
        self.attributes_listeners: list[Callable[[], None]] = []
        # Called after every change: the controller persists topics within ~50 ms instead of
        # the periodic 5 s, so a crash right after an auto-create does not forget the topic.
        self.on_change: Callable[[], None] = lambda: None
        # Awaited by admin answers: returns once the changes so far are on disk (the
        # controller's MetadataPersister.durable; a table without files has nothing to wait for).
        self.durable: Callable[[], Awaitable[None]] = nothing_to_write
        # What changed since the last persist (broker/meta/persist.py: a journal record).
        self.journal = TableJournal("topicConfigTable", TopicConfig.to_json)

    def __len__(self) -> int:
        return sum(1 for name in self.table if not is_system_topic(name))

    def get(self, name: str) -> TopicConfig | None:
        return self.table.get(name)

    def require(self, name: str) -> TopicConfig:
        topic = self.table.get(name)
        if topic is None:
            raise NotFoundError(f"topic {name!r} does not exist; create it with CreateTopic")
        return topic

    def _put(self, topic: TopicConfig) -> TopicConfig:
        old = self.table.get(topic.name)
        self.table[topic.name] = topic
        if topic.attributes or (old is not None and old.attributes):
            self._attributes_changed()
        self._changed(topic.name)
        return topic

    def _attributes_changed(self) -> None:
        self.attributes_generation += 1
        for listener in self.attributes_listeners:
            listener()

    def _changed(self, name: str) -> None:
        self.journal.changed(name)
        self.dirty = True
        self.version += 1
        self.generation += 1
        self.on_change()

    def create(
        self, name: str, read: int, write: int, perm: int, attributes: dict[str, str]
    ) -> TopicConfig:
        validate_topic_name(name)
        validate_queue_nums(read, write)
        validate_perm(perm)
        if name in self.table:
            raise AlreadyExistsError(f"topic {name!r} already exists; use UpdateTopic to change it")
        return self._put(TopicConfig(name, read, write, perm, checked_attributes(attributes)))

    def for_send(self, name: str) -> TopicConfig:
        """The topic a producer writes to, auto-created when allowed. The broker's own
        topics are refused even once they exist (SCHEDULE_TOPIC_XXXX exists from the start:
        a send there reached the delay service with no destination)."""
        if (
            name in RESERVED_FOR_SEND
            or name.startswith(DLQ_GROUP_TOPIC_PREFIX)
            or name.startswith(SYSTEM_TOPIC_PREFIXES)
        ):
            raise InvalidArgumentError(f"topic {name!r} is reserved for the broker")
        topic = self.table.get(name)
        if topic is not None:
            return topic
        validate_topic_name(name)
        if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self.ensure_system(name, 1)
        if not self.auto_create:
            raise NotFoundError(
                f"topic {name!r} does not exist and autoCreateTopicEnable is off; "
                "create it first (CreateTopic or `wharf topic create`)"
            )
        n = self.default_queue_nums
        return self._put(TopicConfig(name, n, n))

    def replace(self, topic: TopicConfig) -> TopicConfig:
        """UpdateTopic: swap in a validated config for an existing topic."""
        self.require(topic.name)
        return self._put(topic)

    def ensure_system(self, name: str, queue_nums: int) -> TopicConfig:
        topic = self.table.get(name)
        if topic is None:
            topic = self._put(TopicConfig(name, queue_nums, queue_nums))
        return topic

    def delete(self, name: str) -> TopicConfig:
        topic = self.require(name)
        del self.table[name]
        if topic.attributes:
            self._attributes_changed()
        self._changed(name)
        return topic

    def adopt(self, stored: dict[str, int]) -> list[TopicConfig]:
        """At start: a topic the store holds queues of but this table lacks gets a config back
        (read = write = its highest queue id + 1, at least the auto-create default for a user
        topic), so its records stay reachable. The table reaches disk ~50 ms after a change
        (``MetadataPersister``): a kill -9 in between, after records were appended to an
        auto-created topic, left them in consumequeue/ under a name no route, Metadata or pull
        knew (a Kafka producer then re-created the topic with other partitions). Returns the
        configs made (each logged)."""
        made = []
        for name, queue_count in sorted(stored.items()):
            if name in self.table or name.startswith(SYSTEM_TOPIC_PREFIXES) or name == "TBW102":
                continue  # the timer's and transactions' topics live in no table
            n = queue_count if is_system_topic(name) else max(queue_count, self.default_queue_nums)
            made.append(self._put(TopicConfig(name, n, n)))
            log.warning(
                "topic %s has records but no config (a crash before its config was written): "
                "recreated with %d queues", name, n,
            )  # fmt: skip
        return made

    def listing(self, include_system: bool) -> list[TopicConfig]:
        return [
            t
            for name, t in sorted(self.table.items())
            if include_system or not is_system_topic(name)
        ]

    # --- persistence ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "topicConfigTable": {name: t.to_json() for name, t in self.table.items()},
            "dataVersion": {"counter": self.version},
        }

    def capture(self) -> PendingWrite:
        """The changes since the last capture, cheaply (on the loop), for
        ``persist.write_text_atomic_blocking`` to serialize and write in a thread."""
        return self.journal.capture(self.table, {"dataVersion": {"counter": self.version}})

    def load(self, data: dict[str, Any] | None) -> None:
        self.journal.reset()  # the next persist compares the whole table with the files
        self.generation += 1  # (a replica clears the table first: nothing cached is valid)
        for raw in (data or {}).get("topicConfigTable", {}).values():
            topic = TopicConfig.from_json(raw)
            self.table[topic.name] = topic
        self._attributes_changed()
        if not data:
            return
        self.version = int(data.get("dataVersion", {}).get("counter", 0))
