"""``FrontEndKit``: what a protocol front end receives, and nothing else: the port (the core's
typed door, ``broker/core/port.py``) and the shared kit around it (the broker's settings, its
metrics hooks, its advertised endpoint, the message id makers, the pull reply budget, the
check-back targets, the long poll, the message counters, the broker's lifecycle as reads).

The composition root (``broker/controller.py``) builds it over its ``BrokerContext``; a front
end never sees that context (an import-linter contract): the store, the metadata tables and
the core's implementation stay behind the port, so a rule a front end needs is a port method
written once, not a reach into the tables (each front end grew its own copy before).

What changes after the front ends are attached is read through a callable, so the kit itself
is frozen: ``started_at`` (set once serving began), ``cluster_routes`` (the NameServer routes,
made after the front ends attach, with namesrvAddr) and ``shutting_down``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wharf.broker.cluster.routes import ClusterRoutes
    from wharf.broker.config import BrokerConfig
    from wharf.broker.core.long_poll import LongPollHolder
    from wharf.broker.core.port import Port
    from wharf.broker.core.transactions import CheckTargets
    from wharf.broker.failover import MasterTransfer
    from wharf.broker.frontends.reply_budget import ReplyBudget
    from wharf.broker.metrics import BrokerMetrics
    from wharf.store.codec.ids import OffsetMsgIdFormatter, UniqueIdGenerator

__all__ = ["FrontEndKit", "MessageCounters"]


class MessageCounters:
    """Messages in and out since start, every protocol (wharf.v1 GetBrokerStatus, remoting's
    runtime info answer them); one object the root and every front end share."""

    __slots__ = ("messages_in", "messages_out")

    def __init__(self) -> None:
        self.messages_in = 0
        self.messages_out = 0


@dataclass(frozen=True, slots=True)
class FrontEndKit:
    port: Port  # the core: messaging, admin, topics, groups, offsets (broker/core/port.py)
    config: BrokerConfig  # the broker's settings (names, limits, switches)
    metrics: BrokerMetrics  # the hooks: observe_rpc, on_messages_in/out, on_send_to_dlq ...
    endpoint: str  # the advertised address clients dial
    unique_ids: UniqueIdGenerator  # message ids for messages that arrive without one
    offset_ids: OffsetMsgIdFormatter  # offset message ids (host + commit log offset)
    replies: ReplyBudget  # the budget of unread pull replies per client
    delay_levels_ms: tuple[int, ...]  # messageDelayLevel, parsed
    check_targets: CheckTargets  # where transaction check-backs go (each front end adds)
    long_poll: LongPollHolder  # parked reads (Kafka's fetch parks on several queues at once)
    counters: MessageCounters
    ha_address: str  # host:port of the replication listener, "" if none
    failover: MasterTransfer | None  # controller mode (TransferMaster), else None
    started_at: Callable[[], float]  # time.time() when serving began, 0.0 before
    shutting_down: Callable[[], bool]
    cluster_routes: Callable[[], ClusterRoutes | None]  # with namesrvAddr, once dialled
