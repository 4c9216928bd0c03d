"""Scrape-time figures read from the broker's ``BrokerView``: one plain-data ``BrokerSnapshot``.

``take_snapshot`` runs ON THE EVENT LOOP that owns the store (``BrokerMetrics`` hands it over
from the HTTP thread), because the store and the managers are single-loop objects. Everything
it reads is an in-memory counter or table: ``store.stats()``, the topic/group tables,
committed offsets, queue max offsets. The only record reads are for consumer lag latency
(the store time of the first unconsumed message of each lagging queue), capped at
``LAG_LATENCY_READ_BUDGET`` per scrape so a broker with thousands of lagging queues cannot
stall the loop. The scrape's thread runs ``take_snapshot_async``, which computes the lags
``LAG_CHUNK`` committed offsets a turn of the loop (the loop serves others in between);
``take_snapshot`` does it at once (a caller on the loop, tests).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import NamedTuple

from wharf.broker.metrics.view import BrokerView, MetricsStore
from wharf.store.ha.status import ReplicationStatus
from wharf.store.model import StoreStats
from wharf.store.retention.stats import RetentionStats

# Max records read per scrape to date the oldest unconsumed message of lagging queues.
LAG_LATENCY_READ_BUDGET = 256

# Committed offsets whose lag one turn of the loop computes. 100,000 offsets (25,000 topics x
# 4 queues, issue 33) took ~0.33 s of the loop in one go (~3.3 us each, two queue lookups
# and the bookkeeping): every client of the broker waited that long once a scrape. In turns
# of 4,096 the loop is held ~10 ms at a time.
LAG_CHUNK = 4096


class GroupLag(NamedTuple):
    """Lag of one consumer group on one topic, summed over the topic's queues (a tuple: 25,000
    of them as frozen dataclasses took 16 ms to make, a third of that as tuples)."""

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
    # Client connections open per front end (the wire port, remoting, Kafka; gRPC's are
    # not counted by grpc.aio).
    frontend_connections: dict[str, int] = field(default_factory=dict)
    # Compaction and topic retention (a copy), None without them.
    retention: RetentionStats | None = None


def take_snapshot(view: BrokerView, now: float | None = None) -> BrokerSnapshot:
    """Read the broker's cheap figures, all in one go. Call on the store's event loop."""
    started = time.perf_counter()
    now = time.time() if now is None else now
    return _snapshot(view, now, consumer_lags(view, now), started)


async def take_snapshot_async(view: BrokerView, now: float | None = None) -> BrokerSnapshot:
    """``take_snapshot`` with the consumer lags computed ``LAG_CHUNK`` committed offsets a
    turn of the loop (run on the store's loop: ``asyncio.run_coroutine_threadsafe``).
    ``loop_seconds`` counts the turns' time only."""
    now = time.time() if now is None else now
    steps = _lag_steps(view, now)
    held = 0.0
    while True:
        started = time.perf_counter()
        try:
            next(steps)
        except StopIteration as done:
            lags: list[GroupLag] = done.value
            break
        finally:
            held += time.perf_counter() - started
        await asyncio.sleep(0)
    return _snapshot(view, now, lags, time.perf_counter(), held)


def _snapshot(
    view: BrokerView, now: float, lags: list[GroupLag], started: float, held: float = 0.0
) -> BrokerSnapshot:
    """The snapshot of ``lags`` and the cheap figures, read now; ``loop_seconds``: ``held`` plus
    the time since ``started``."""
    store = view.store
    config = store.config
    started_at = view.started_at()
    return BrokerSnapshot(
        stats=store.stats(),
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
        loop_seconds=held + time.perf_counter() - started,
        loop_tasks=_loop_tasks(),
        transactions=dict(view.transactions()),
        timer=dict(view.timer()),
        identity=dict(view.identity),
        namesrv_sessions=dict(view.namesrv_sessions()),
        replication=view.replication(),
        frontend_connections=dict(view.frontend_connections()),
        retention=copy.copy(view.retention()),
    )


def _loop_tasks() -> int:
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # no running loop: a snapshot taken outside the broker (unit tests)
        return 0


def consumer_lags(view: BrokerView, now: float) -> list[GroupLag]:
    """Per (topic, group): messages = sum over queues of max_offset - max(committed, min_offset);
    latency = age of the oldest first-unconsumed message among the queues read."""
    steps = _lag_steps(view, now)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def _lag_steps(view: BrokerView, now: float) -> Generator[None, None, list[GroupLag]]:
    """``consumer_lags``, pausing (a ``yield``) after every ``LAG_CHUNK`` committed offsets or
    so (a (topic, group) entry is taken whole). The table of entries is copied first, each
    entry's offsets when it is reached: the loop may change them in between."""
    store = view.store
    totals: dict[tuple[str, str], int] = {}
    lagging: dict[tuple[str, str], list[tuple[int, int]]] = {}  # key -> [(queue, offset)]
    taken = 0
    for key, by_queue in list(view.committed_offsets().items()):
        topic = key[0]
        total = 0
        for queue_id, committed in list(by_queue.items()):
            queue = int(queue_id)
            next_unconsumed = max(int(committed), store.get_min_offset(topic, queue))
            lag = store.get_max_offset(topic, queue) - next_unconsumed
            if lag > 0:
                total += lag
                lagging.setdefault(key, []).append((queue, next_unconsumed))
        totals[key] = total  # a (topic, group) is one entry of the table
        taken += len(by_queue)
        if taken >= LAG_CHUNK:
            taken = 0
            yield
    yield
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
        if len(lags) % LAG_CHUNK == 0:
            yield
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
