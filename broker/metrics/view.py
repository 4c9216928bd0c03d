"""What the metrics read of a broker: a typed view the composition root builds once
(``BrokerController._metrics_view``), instead of the controller itself read through ``Any``
and ``getattr``. Every member is a value or a cheap callable read at scrape time on the
store's loop (``snapshot.take_snapshot``); unit tests build one from fakes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from wharf.store.config import StoreConfig
from wharf.store.ha.status import ReplicationStatus
from wharf.store.model import GetResult, StoreStats

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
    wire_connections: Callable[[], int] = _zero
    replication: Callable[[], ReplicationStatus | None] = _none
    transactions: Callable[[], Mapping[str, int]] = _no_stats
    timer: Callable[[], Mapping[str, int]] = _no_stats
