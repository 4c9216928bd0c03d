"""SubscriptionGroupManager: consumer group settings, persisted as RocketMQ's
``config/subscriptionGroup.json``. Groups are auto-created on first use when
autoCreateSubscriptionGroup is on (RocketMQ's default)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.meta.persist import PendingWrite, TableJournal, nothing_to_write
from wharf.store.codec.properties import name_rule, valid_name

MAX_GROUP_LENGTH = 255
CONSUME_FROM_WHERE = ("LAST", "FIRST", "TIMESTAMP")


def validate_group_name(name: str) -> None:
    if not name:
        raise InvalidArgumentError("consumer group is required")
    if not valid_name(name, MAX_GROUP_LENGTH):
        raise InvalidArgumentError(
            f"consumer group {name[:80]!r} is invalid: use {name_rule(MAX_GROUP_LENGTH)}"
        )


@dataclass(slots=True)
class SubscriptionGroup:
    group_name: str
    consume_enable: bool = True
    consume_broadcast_enable: bool = False
    retry_max_times: int = 16
    retry_queue_nums: int = 1
    consume_from_where: int = 0  # wharf.v1.ConsumeFromWhere value
    consume_timestamp: int = 0
    # RocketMQ's consumeMessageOrderly: a FIFO group for apache.rocketmq.v2 pop consumers.
    consume_message_orderly: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "groupName": self.group_name,
            "consumeEnable": self.consume_enable,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "consumeFromWhere": self.consume_from_where,
            "consumeTimestamp": self.consume_timestamp,
            "consumeMessageOrderly": self.consume_message_orderly,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionGroup:
        return cls(
            group_name=str(data["groupName"]),
            consume_enable=bool(data.get("consumeEnable", True)),
            consume_broadcast_enable=bool(data.get("consumeBroadcastEnable", False)),
            retry_max_times=int(data.get("retryMaxTimes", 16)),
            retry_queue_nums=int(data.get("retryQueueNums", 1)),
            consume_from_where=int(data.get("consumeFromWhere", 0)),
            consume_timestamp=int(data.get("consumeTimestamp", 0)),
            consume_message_orderly=bool(data.get("consumeMessageOrderly", False)),
        )


class SubscriptionGroupManager:
    FILE_NAME = "subscriptionGroup.json"

    def __init__(self, auto_create: bool, default_retry_max_times: int) -> None:
        self.auto_create = auto_create
        self.default_retry_max_times = default_retry_max_times
        self.table: dict[str, SubscriptionGroup] = {}
        self.dirty = False
        self.version = 0
        self.on_change: Callable[[], None] = lambda: None  # see TopicConfigManager.on_change
        self.durable: Callable[[], Awaitable[None]] = nothing_to_write  # and .durable
        self.journal = TableJournal("subscriptionGroupTable", SubscriptionGroup.to_json)

    def __len__(self) -> int:
        return len(self.table)

    def get(self, name: str) -> SubscriptionGroup | None:
        return self.table.get(name)

    def for_use(self, name: str) -> SubscriptionGroup:
        """The group a consumer uses, auto-created when allowed."""
        group = self.table.get(name)
        if group is not None:
            return group
        validate_group_name(name)
        if not self.auto_create:
            raise NotFoundError(
                f"consumer group {name!r} does not exist and autoCreateSubscriptionGroup is "
                "off; create it with CreateSubscriptionGroup"
            )
        return self.put(SubscriptionGroup(name, retry_max_times=self.default_retry_max_times))

    def put(self, group: SubscriptionGroup) -> SubscriptionGroup:
        validate_group_name(group.group_name)
        if group.retry_max_times < 0 or group.retry_queue_nums < 1:
            raise InvalidArgumentError("retry_max_times must be >= 0 and retry_queue_nums >= 1")
        self.table[group.group_name] = group
        self._changed(group.group_name)
        return group

    def _changed(self, name: str) -> None:
        self.journal.changed(name)
        self.dirty = True
        self.version += 1
        self.on_change()

    def delete(self, name: str) -> None:
        if self.table.pop(name, None) is None:
            raise NotFoundError(f"consumer group {name!r} does not exist")
        self._changed(name)

    def listing(self) -> list[SubscriptionGroup]:
        return [g for _, g in sorted(self.table.items())]

    def to_json(self) -> dict[str, Any]:
        return {
            "subscriptionGroupTable": {n: g.to_json() for n, g in self.table.items()},
            "dataVersion": {"counter": self.version},
        }

    def capture(self) -> PendingWrite:
        """See TopicConfigManager.capture."""
        return self.journal.capture(self.table, {"dataVersion": {"counter": self.version}})

    def load(self, data: dict[str, Any] | None) -> None:
        self.journal.reset()  # the next persist compares the whole table with the files
        if not data:
            return
        for raw in data.get("subscriptionGroupTable", {}).values():
            group = SubscriptionGroup.from_json(raw)
            self.table[group.group_name] = group
        self.version = int(data.get("dataVersion", {}).get("counter", 0))
