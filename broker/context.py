"""BrokerContext: what the composition root builds the core from and keeps (the store, the
metadata tables, the core's services, the broker's lifecycle). The front ends never see it:
``front_end_kit()`` is what they get (``frontends/frontend_kit.py``: the port and the shared kit)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wharf.broker.cluster.routes import ClusterRoutes
from wharf.broker.config import BrokerConfig
from wharf.broker.core.admin import AdminCore
from wharf.broker.core.clients import ClientRegistry
from wharf.broker.core.long_poll import LongPollHolder
from wharf.broker.core.policies import TopicPolicies
from wharf.broker.core.pop import PopCore
from wharf.broker.core.port import Port
from wharf.broker.core.processor import CoreProcessor
from wharf.broker.core.read import ReadCore
from wharf.broker.core.retry import RetryCore
from wharf.broker.core.send import SendCore
from wharf.broker.core.transactions import CheckTargets, TransactionCore
from wharf.broker.frontends.frontend_kit import FrontEndKit, MessageCounters
from wharf.broker.frontends.reply_budget import ReplyBudget
from wharf.broker.meta.groups import SubscriptionGroupManager
from wharf.broker.meta.offsets import ConsumerOffsetManager
from wharf.broker.meta.topics import TopicConfigManager
from wharf.broker.metrics import BrokerMetrics
from wharf.store.codec.ids import OffsetMsgIdFormatter, UniqueIdGenerator

if TYPE_CHECKING:
    from wharf.broker.failover import MasterTransfer
    from wharf.store.message_store import MessageStore


@dataclass(slots=True)
class BrokerContext:
    config: BrokerConfig
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    clients: ClientRegistry
    long_poll: LongPollHolder
    metrics: BrokerMetrics
    endpoint: str  # advertised address clients dial
    delay_levels_ms: list[int]
    unique_ids: UniqueIdGenerator
    offset_ids: OffsetMsgIdFormatter
    replies: ReplyBudget
    # Where transaction check-backs go: each front end adds its producers' channels.
    check_targets: CheckTargets = field(default_factory=CheckTargets)
    # With namesrvAddr: the topic's queues on every group (RocketMQ 5 routes); else None.
    cluster_routes: ClusterRoutes | None = None
    started_at: float = 0.0  # time.time() when serving began
    ha_address: str = ""  # host:port of the replication listener (haListenPort), "" if none
    failover: MasterTransfer | None = None  # controller mode: broker/failover (TransferMaster)
    counters: MessageCounters = field(default_factory=MessageCounters)  # in/out, every protocol
    shutting_down: bool = field(default=False)
    # THE send core (broker/core): one per broker, shared by every protocol front end (one
    # round-robin counter per topic, one dedupe window); made from the fields above.
    send_core: SendCore = field(init=False)
    # THE offset read (broker/core/read.py) every front end's pull shares.
    read_core: ReadCore = field(init=False)
    transactions: TransactionCore = field(init=False)  # ending transactions, every front end
    pop_core: PopCore = field(init=False)  # pop consumption (receive, ack, dead letter)
    retry: RetryCore = field(init=False)  # consumed messages sent back (retry, dead letters)
    admin: AdminCore = field(init=False)  # topics and groups as every protocol's tools change them
    # THE port (broker/core/port.py): what a front end asks of the core, typed; the store and
    # the core's services stay behind it.
    port: Port = field(init=False)

    def __post_init__(self) -> None:
        self.send_core = SendCore(self.store, self.topics, shutting_down=lambda: self.shutting_down)
        self.read_core = ReadCore(self.config, self.store, self.long_poll)
        store = self.store
        self.transactions = TransactionCore(lambda: store.transactions)
        self.pop_core = PopCore(lambda: store.pop, self.groups, self.topics, self.read_core.txns)
        self.retry = RetryCore(
            store, self.topics, self.groups, self.delay_levels_ms, self.metrics.on_send_to_dlq
        )
        self.admin = AdminCore(
            store, self.topics, self.groups, self.offsets, self.clients,
            self.config.max_reconsume_times, self._topic_gone,
        )  # fmt: skip
        # Topic retention and compaction follow the topic table (broker/core/policies.py);
        # a test's stand-in store has no retention.
        retention = getattr(store, "retention", None)
        if retention is not None:
            retention.follow(TopicPolicies(self.topics), self.read_core.txns)
            self.topics.attributes_listeners.append(retention.refresh)
        self.port = CoreProcessor(
            store,
            self.topics,
            self.groups,
            self.offsets,
            send=self.send_core,
            read=self.read_core,
            pop=self.pop_core,
            retry=self.retry,
            transactions=self.transactions,
            clients=self.clients,
            admin=self.admin,
        )

    def _topic_gone(self, topic: str) -> None:
        """A deleted topic's per-topic state: its metrics, its Kafka transactions' index (a
        topic made again under the name restarts its offsets at 0)."""
        self.metrics.forget_topic(topic)
        self.read_core.txns.forget_topic(topic)

    def front_end_kit(self) -> FrontEndKit:
        """What a front end gets: the port and the shared kit; what changes once the front
        ends are attached (serving began, the NameServer routes, shutting down) is read through
        a callable."""
        return FrontEndKit(
            port=self.port,
            config=self.config,
            metrics=self.metrics,
            endpoint=self.endpoint,
            unique_ids=self.unique_ids,
            offset_ids=self.offset_ids,
            replies=self.replies,
            delay_levels_ms=tuple(self.delay_levels_ms),
            check_targets=self.check_targets,
            long_poll=self.long_poll,
            counters=self.counters,
            ha_address=self.ha_address,
            failover=self.failover,
            started_at=lambda: self.started_at,
            shutting_down=lambda: self.shutting_down,
            cluster_routes=lambda: self.cluster_routes,
        )
