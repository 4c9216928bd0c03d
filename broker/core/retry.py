"""A consumed message sent back (wharf.v1's SendMessageBack, remoting's CONSUMER_SEND_MSG_BACK):
again to ``%RETRY%<group>`` after a delay level, or to ``%DLQ%<group>`` once its reconsume
times reach the group's maximum (or when asked), as RocketMQ's SendMessageProcessor does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.meta.groups import SubscriptionGroupManager, validate_group_name
from wharf.broker.meta.topics import TopicConfigManager
from wharf.store.codec import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
)
from wharf.store.model import MessageInput

if TYPE_CHECKING:
    from wharf.store import MessageStore

__all__ = ["RetryCore", "SentBack", "dlq_topic", "retry_topic"]

FIRST_RETRY_DELAY_LEVEL = 3  # RocketMQ: delay level 3 + reconsume times (10 s, 30 s, 1 m ...)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


@dataclass(frozen=True, slots=True)
class SentBack:
    sent_to_dlq: bool
    topic: str
    reconsume_times: int


class RetryCore:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        delay_levels_ms: list[int],
        on_dead_letter: Callable[[str, str], None],
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.delay_levels_ms = delay_levels_ms
        self.on_dead_letter = on_dead_letter  # (origin topic, group): the DLQ metric

    async def send_back(
        self,
        group_name: str,
        commit_log_offset: int,
        *,
        delay_level: int = 0,
        origin_topic: str = "",
        origin_msg_id: str = "",
        max_reconsume_times: int = 0,
    ) -> SentBack:
        """``delay_level`` -1 sends to the DLQ, 0 picks 3 + reconsume times; 0 maximum takes
        the group's ``retry_max_times``."""
        validate_group_name(group_name)
        if commit_log_offset < 0 or max_reconsume_times < 0:
            raise InvalidArgumentError("commit_log_offset and max_reconsume_times must be >= 0")
        if delay_level < -1:
            raise InvalidArgumentError("delay_level must be -1 (DLQ), 0 (automatic) or a level")
        group = self.groups.for_use(group_name)
        original = self.store.look_message_by_offset(commit_log_offset)
        if original is None or original.commit_log_offset != commit_log_offset:
            raise NotFoundError(
                f"no message at commit log offset {commit_log_offset}; pass the "
                "consumed message's commit_log_offset"
            )
        max_times = max_reconsume_times or group.retry_max_times
        reconsume_times = original.reconsume_times + 1
        to_dlq = delay_level < 0 or original.reconsume_times >= max_times
        properties = dict(original.properties)
        properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        # The first hop records where the message came from; later hops keep it.
        properties.setdefault(PROPERTY_RETRY_TOPIC, origin_topic or original.topic)
        properties.setdefault(
            PROPERTY_ORIGIN_MESSAGE_ID,
            origin_msg_id or original.properties.get(PROPERTY_UNIQ_KEY, ""),
        )
        if to_dlq:
            topic = dlq_topic(group_name)
        else:
            topic = retry_topic(group_name)
            level = delay_level or FIRST_RETRY_DELAY_LEVEL + original.reconsume_times
            properties[PROPERTY_DELAY_TIME_LEVEL] = str(min(level, len(self.delay_levels_ms)))
        self.topics.ensure_system(topic, 1)
        message = MessageInput(
            body=original.body,
            properties=properties,
            flag=original.flag,
            sys_flag=original.sys_flag,
            born_timestamp=original.born_timestamp,
            born_host=original.born_host,
            reconsume_times=reconsume_times,
        )
        await self.store.put(topic, 0, [message])
        if to_dlq:
            self.on_dead_letter(properties[PROPERTY_RETRY_TOPIC], group_name)
        return SentBack(to_dlq, topic, reconsume_times)
