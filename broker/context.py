"""BrokerContext: what the processors share, handed to them as one value (the processors do
not hold the controller: they see only the parts they use)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.config import BrokerConfig
from broker.consumers import ConsumerManager
from broker.groups import SubscriptionGroupManager
from broker.long_poll import LongPollHolder
from broker.message_ids import OffsetMsgIdFormatter, UniqueIdGenerator
from broker.metrics import BrokerMetrics
from broker.offsets import ConsumerOffsetManager
from broker.topics import TopicConfigManager

if TYPE_CHECKING:
    from store.message_store import MessageStore


@dataclass(slots=True)
class BrokerContext:
    config: BrokerConfig
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    long_poll: LongPollHolder
    metrics: BrokerMetrics
    endpoint: str  # advertised address clients dial
    delay_levels_ms: list[int]
    unique_ids: UniqueIdGenerator
    offset_ids: OffsetMsgIdFormatter
    started_at: float = 0.0  # time.time() when serving began
    messages_in: int = 0
    messages_out: int = 0
    shutting_down: bool = field(default=False)
