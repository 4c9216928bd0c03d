"""A stand-in BrokerController (its ``view()``) for metrics unit tests (no sockets, no store files); its store
is tests/fakes.py's FakeStore."""

from __future__ import annotations

from dataclasses import dataclass

from wharf.broker.metrics.view import BrokerView
from wharf.store.ha.status import ReplicaStatus, ReplicationStatus
from wharf.store.model import StoreStats

from tests.fakes import FakeStore


def make_stats(**changes: object) -> StoreStats:
    values: dict[str, object] = dict(
        commit_log_min_offset=0,
        commit_log_max_offset=10_000,
        commit_log_flushed_offset=9_000,
        commit_log_committed_offset=10_000,
        dispatch_behind_bytes=120,
        commit_log_segments=3,
        consume_queue_files=5,
        index_files=1,
        disk_used_ratio=0.42,
        writable=True,
        not_writable_reason="",
        messages_put_total=70,
        bytes_put_total=10_000,
        recovery_seconds=0.25,
        flush_count=4,
        last_flush_seconds=0.001,
        storage_size_bytes=123_456,
    )
    values.update(changes)
    return StoreStats(**values)  # type: ignore[arg-type]


class FakeNames:
    """Like the topic/group managers: len() counts user entries."""

    def __init__(self, names: list[str]) -> None:
        self._names = names

    def __len__(self) -> int:
        return len(self._names)


class FakeOffsets:
    """Like ConsumerOffsetManager: ``table`` is (topic, group) -> {queue_id: offset}."""

    def __init__(self, table: dict[tuple[str, str], dict[int, int]]) -> None:
        self.table = table


@dataclass
class FakeLongPoll:
    parked_count: int = 0


@dataclass
class FakeController:
    store: FakeStore
    topics: FakeNames
    groups: FakeNames
    offsets: FakeOffsets
    long_poll: FakeLongPoll
    started_at: float = 0.0

    def view(self) -> BrokerView:
        """What BrokerController._metrics_view gives the metrics, over these fakes."""
        return BrokerView(
            store=self.store,  # type: ignore[arg-type]
            topic_count=lambda: len(self.topics),
            group_count=lambda: len(self.groups),
            committed_offsets=lambda: self.offsets.table,
            parked_pulls=lambda: self.long_poll.parked_count,
            started_at=lambda: self.started_at,
            replication=lambda: getattr(self.store, "replication_status", lambda: None)(),
        )


NOW_MS = 1_700_000_000_000


def fake_controller(**stats: object) -> FakeController:
    store = FakeStore()
    store.seed("orders", 0, [NOW_MS - 30_000] * 10)
    store.seed("orders", 1, [NOW_MS - 5_000] * 4)
    store.stats_value = make_stats(**stats)
    # A controller-mode master of term 3 with one replica 512 KiB and 2.5 s behind.
    status = ReplicationStatus(
        "SYNC_MASTER", 4 << 20, 3_670_016,
        [ReplicaStatus(2, "127.0.0.1:40000", 3_670_016, 524_288, 2.5, True)],
        epoch=3, sync_state_set=[1, 2],
    )  # fmt: skip
    store.replication_status = lambda: status  # type: ignore[attr-defined]
    return FakeController(
        store=store,
        topics=FakeNames(["orders", "payments"]),
        groups=FakeNames(["billing", "audit"]),
        offsets=FakeOffsets(
            {("orders", "billing"): {0: 7, 1: 4}, ("orders", "audit"): {0: 10, 1: 4}}
        ),
        long_poll=FakeLongPoll(parked_count=3),
        started_at=NOW_MS / 1000 - 60,
    )
