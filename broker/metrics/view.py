"""What the metrics read of a broker: a typed view the composition root builds once
(``BrokerController._metrics_view``), instead of the controller itself read through ``Any``
and ``getattr``. Every member is a value or a cheap callable read at scrape time on the
store's loop (``snapshot.take_snapshot``); unit tests build one from fakes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized
from dataclasses import dataclass, field
from typing import Any, Protocol

from wharf.store.config import StoreConfig
from wharf.store.ha.status import ReplicationStatus
from wharf.store.model import GetResult, StoreStats
from wharf.store.retention.stats import RetentionStats

# (topic, consumer group) -> {queue id: committed offset}, as ConsumerOffsetManager keeps it.
CommittedOffsets = Mapping[tuple[str, str], Mapping[int, int]]


class MetricsStore(Protocol):
    """The store reads a scrape makes: in-memory figures and, within a budget, one record per
    lagging queue (its store time)."""

    @property
    def config(self) -> StoreConfig: ...

    def stats(self) -> StoreStats: ...

    def get_min_offset(self, topic: str, queue_id: int) -> int: ...

    def get_max_offset(self, topic: str, queue_id: int) -> int: ...

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int) -> GetResult: ...


def _none() -> None:
    return None


def _no_stats() -> dict[str, int]:
    return {}


def _zero() -> int:
    return 0


@dataclass(frozen=True, slots=True)
class BrokerView:
    store: MetricsStore
    topic_count: Callable[[], int]  # user topics (system ones excluded)
    group_count: Callable[[], int]
    committed_offsets: Callable[[], CommittedOffsets]
    parked_pulls: Callable[[], int]
    started_at: Callable[[], float]  # time.time() when the broker began serving; 0.0 before
    # cluster, broker, broker_id ({} for a stand-in)
    identity: Mapping[str, str] = field(default_factory=dict)
    # Per NameServer of namesrvAddr: whether this broker's registration session is up.
    namesrv_sessions: Callable[[], Mapping[str, bool]] = dict
    # Client connections open per protocol front end ({"wire": 3, "remoting": 1, ...}).
    frontend_connections: Callable[[], Mapping[str, int]] = dict
    replication: Callable[[], ReplicationStatus | None] = _none
    transactions: Callable[[], Mapping[str, int]] = _no_stats
    timer: Callable[[], Mapping[str, int]] = _no_stats
    # Topic retention and compaction (the store's RetentionService); None for a stand-in.
    retention: Callable[[], RetentionStats | None] = _none


def broker_view(
    store: Any,
    broker: Any,
    topics: Sized,
    groups: Sized,
    offsets: Any,
    parked_pulls: Callable[[], int],
    started_at: Callable[[], float],
    namesrv_sessions: Callable[[], Mapping[str, bool]],
    frontend_connections: Callable[[], Mapping[str, int]],
) -> BrokerView:
    """The broker's view from its parts (the composition root's tables and callables)."""

    def service_stats(name: str) -> Callable[[], dict[str, int]]:
        def read() -> dict[str, int]:
            try:  # a replica runs no transaction or timer service
                return dict(getattr(store, name).stats())
            except (AttributeError, AssertionError):
                return {}

        return read

    replication = getattr(store, "replication_status", None)  # a test store may lack it
    retention = getattr(store, "retention", None)
    return BrokerView(
        store=store,
        topic_count=lambda: len(topics),
        group_count=lambda: len(groups),
        committed_offsets=lambda: offsets.table,
        parked_pulls=parked_pulls,
        started_at=started_at,
        identity={
            "cluster": broker.broker_cluster_name,
            "broker": broker.broker_name,
            "broker_id": str(broker.broker_id),
        },
        namesrv_sessions=namesrv_sessions,
        frontend_connections=frontend_connections,
        replication=replication if callable(replication) else (lambda: None),
        transactions=service_stats("transactions"),
        timer=service_stats("timer"),
        retention=retention.stats if retention is not None else _none,
    )
