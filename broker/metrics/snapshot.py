"""Scrape-time figures read from the broker's ``BrokerView``: one plain-data ``BrokerSnapshot``.

``take_snapshot`` runs ON THE EVENT LOOP that owns the store (``BrokerMetrics`` hands it over
from the HTTP thread), because the store and the managers are single-loop objects. Everything
it reads is an in-memory counter or table: ``store.stats()``, the topic/group tables,
committed offsets, queue max offsets. The only record reads are for consumer lag latency
(the store time of the first unconsumed message of each lagging queue), capped at
``LAG_LATENCY_READ_BUDGET`` per scrape so a broker with thousands of lagging queues cannot
stall the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from wharf.broker.metrics.view import BrokerView, MetricsStore
from wharf.store.ha.status import ReplicationStatus
from wharf.store.model import StoreStats

# Max records read per scrape to date the oldest unconsumed message of lagging queues.
LAG_LATENCY_READ_BUDGET = 256


@dataclass(frozen=True, slots=True)
class GroupLag:
    """Lag of one consumer group on one topic, summed over the topic's queues."""

    topic: str
    consumer_group: str
    messages: int
    # Age of the oldest unconsumed message (now - its store time); None if not measured.
    latency_seconds: float | None


@dataclass(frozen=True, slots=True)
class BrokerSnapshot:
    stats: StoreStats
    topic_count: int
    group_count: int
    parked_pulls: int
    uptime_seconds: float
    # diskMaxUsedSpaceRatio / diskSpaceCleanForciblyRatio / diskSpaceWarningLevelRatio as 0..1.
    disk_thresholds: dict[str, float]
    lags: list[GroupLag] = field(default_factory=list)
    # How long taking this snapshot held the event loop (its cost per scrape).
    loop_seconds: float = 0.0
    # Live asyncio tasks of the broker's loop: a leak of per-request or per-stream tasks shows
    # as growth here (the soak benchmark watches it).
    loop_tasks: int = 0
    # Transaction and timer figures (``transactions.stats()``, ``timer.stats()``).
    transactions: dict[str, int] = field(default_factory=dict)
    timer: dict[str, int] = field(default_factory=dict)
    # Who this broker is in its cluster (cluster, broker, broker_id) and, per NameServer of
    # namesrvAddr, whether its registration session is up.
    identity: dict[str, str] = field(default_factory=dict)
    namesrv_sessions: dict[str, bool] = field(default_factory=dict)
    # Role and replication (``store.replication_status()``); None for a store without it.
    replication: ReplicationStatus | None = None
    # Client connections open on the wire port (0 when it is off).
    wire_connections: int = 0


def take_snapshot(view: BrokerView, now: float | None = None) -> BrokerSnapshot:
    """Read the broker's cheap figures. Call on the store's event loop."""
    started = time.perf_counter()
    now = time.time() if now is None else now
    store = view.store
    config = store.config
    stats = store.stats()
    lags = consumer_lags(view, now)
    started_at = view.started_at()
    return BrokerSnapshot(
        stats=stats,
        topic_count=view.topic_count(),
        group_count=view.group_count(),
        parked_pulls=view.parked_pulls(),
        uptime_seconds=max(0.0, now - (started_at or now)),
        disk_thresholds={
            "clean": config.disk_max_used_space_ratio / 100,
            "clean_forcibly": config.disk_space_clean_forcibly_ratio / 100,
            "refuse_writes": config.disk_space_warning_level_ratio / 100,
        },
        lags=lags,
        loop_seconds=time.perf_counter() - started,
        loop_tasks=_loop_tasks(),
        transactions=dict(view.transactions()),
        timer=dict(view.timer()),
        identity=dict(view.identity),
        namesrv_sessions=dict(view.namesrv_sessions()),
        replication=view.replication(),
        wire_connections=view.wire_connections(),
    )


def _loop_tasks() -> int:
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # no running loop: a snapshot taken outside the broker (unit tests)
        return 0


def consumer_lags(view: BrokerView, now: float) -> list[GroupLag]:
    """Per (topic, group): messages = sum over queues of max_offset - max(committed, min_offset);
    latency = age of the oldest first-unconsumed message among the queues read."""
    store = view.store
    totals: dict[tuple[str, str], int] = {}
    lagging: dict[tuple[str, str], list[tuple[int, int]]] = {}  # key -> [(queue, offset)]
    for group, topic, queue_id, committed in _committed_offsets(view):
        key = (topic, group)
        next_unconsumed = max(committed, store.get_min_offset(topic, queue_id))
        lag = max(0, store.get_max_offset(topic, queue_id) - next_unconsumed)
        totals[key] = totals.get(key, 0) + lag
        if lag > 0:
            lagging.setdefault(key, []).append((queue_id, next_unconsumed))
    oldest_ms = _oldest_store_times(store, lagging, LAG_LATENCY_READ_BUDGET)
    lags = []
    for (topic, group), lag in sorted(totals.items()):
        oldest = oldest_ms.get((topic, group))
        if lag == 0:
            latency: float | None = 0.0
        elif oldest is None:
            latency = None  # over the read budget (or the record vanished): not exported
        else:
            latency = max(0.0, now - oldest / 1000)
        lags.append(GroupLag(topic, group, lag, latency))
    return lags


def _oldest_store_times(
    store: MetricsStore, lagging: dict[tuple[str, str], list[tuple[int, int]]], budget: int
) -> dict[tuple[str, str], int]:
    """Store time (ms) of the oldest first-unconsumed message per key. Reads go round robin
    over the keys, so with more lagging queues than ``budget`` every (topic, group) still gets
    a figure (a lower bound of its true age) before any gets a second read."""
    oldest: dict[tuple[str, str], int] = {}
    cache: dict[tuple[str, int, int], int | None] = {}  # groups often share a position
    round_index = 0
    while budget > 0:
        progressed = False
        for key, queues in lagging.items():
            if round_index >= len(queues) or budget <= 0:
                continue
            progressed = True
            queue_id, offset = queues[round_index]
            position = (key[0], queue_id, offset)
            if position not in cache:
                budget -= 1
                cache[position] = _store_time_ms(store, key[0], queue_id, offset)
            stored_ms = cache[position]
            if stored_ms is not None:
                oldest[key] = min(oldest.get(key, stored_ms), stored_ms)
        if not progressed:
            break
        round_index += 1
    return oldest


def _store_time_ms(store: MetricsStore, topic: str, queue_id: int, offset: int) -> int | None:
    result = store.get_messages(topic, queue_id, offset, 1)
    if not result.messages:
        return None
    return int(result.messages[0].store_timestamp)


def _committed_offsets(view: BrokerView) -> Iterator[tuple[str, str, int, int]]:
    """(consumer_group, topic, queue_id, committed offset) for every committed offset."""
    # Copied first: cheap, and the loop below must not see the table change under it.
    for (topic, group), by_queue in list(view.committed_offsets().items()):
        for queue_id, offset in list(by_queue.items()):
            yield group, topic, int(queue_id), int(offset)
