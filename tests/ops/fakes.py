"""A stand-in BrokerController for metrics unit tests (no sockets, no store files)."""

from __future__ import annotations

from dataclasses import dataclass, field

from wharf.store.config import StoreConfig
from wharf.store.model import GetResult, GetStatus, StoredMessage, StoreStats


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


def stored(topic: str, queue_id: int, offset: int, store_ms: int) -> StoredMessage:
    return StoredMessage(
        topic=topic, queue_id=queue_id, queue_offset=offset, commit_log_offset=0,
        store_size=100, body=b"x", properties={}, flag=0, sys_flag=0, body_crc=0,
        born_timestamp=store_ms, born_host="127.0.0.1:1", store_timestamp=store_ms,
        store_host="127.0.0.1:8081", reconsume_times=0, prepared_transaction_offset=0,
    )  # fmt: skip


@dataclass
class FakeStore:
    """Queues as lists of store timestamps (ms); queue offset = list index."""

    queues: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    min_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    stats_value: StoreStats = field(default_factory=make_stats)
    config: StoreConfig = field(default_factory=StoreConfig)
    reads: int = 0

    def stats(self) -> StoreStats:
        return self.stats_value

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        return self.min_offsets.get((topic, queue_id), 0)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        return len(self.queues.get((topic, queue_id), []))

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int) -> GetResult:
        self.reads += 1
        times = self.queues.get((topic, queue_id), [])
        found = [stored(topic, queue_id, i, times[i]) for i in range(offset, min(len(times), offset + max_count))]  # fmt: skip
        status = GetStatus.FOUND if found else GetStatus.NO_MESSAGE_IN_QUEUE
        return GetResult(status, offset + len(found), 0, len(times), found)


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


NOW_MS = 1_700_000_000_000


def fake_controller(**stats: object) -> FakeController:
    store = FakeStore(
        queues={("orders", 0): [NOW_MS - 30_000] * 10, ("orders", 1): [NOW_MS - 5_000] * 4},
        stats_value=make_stats(**stats),
    )
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
