"""Topic retention and compaction through a running store: policies handed over with
``retention.follow``, passes run by ``retention.run_once``, reads across the gaps, log start
offsets moved by retention and DeleteRecords, kept across a restart, and the commit log kept
for a compacted queue's dirty records."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from wharf.store.errors import InvalidMessageError
from wharf.store.message_store import MessageStore
from wharf.store.model import GetStatus, MessageInput
from wharf.store.retention.policy import TopicPolicy

from tests.store.helpers import msg, records, small_config, until

COMPACT = TopicPolicy(compact=True, delete=False, segment_ms=1, min_cleanable_dirty_ratio=0.01)


def tombstone(key: str) -> MessageInput:
    return MessageInput(b"\x00", {"KEYS": key, "__KAFKA_VALUE": "null"})


async def started(root: Path, **overrides: object) -> MessageStore:
    store = MessageStore(small_config(root, **overrides))
    await store.start()
    return store


async def put_all(store: MessageStore, topic: str, messages: list[MessageInput]) -> None:
    for m in messages:
        await store.put(topic, 0, [m])
    assert await store.wait_dispatched()


def bodies(store: MessageStore, topic: str, offset: int = 0) -> list[tuple[int, str]]:
    out = []
    while True:
        got = store.get_messages(topic, 0, offset, 32)
        out += [(m.queue_offset, m.body.decode()) for m in got.messages]
        if got.next_begin_offset <= offset or got.status is GetStatus.OFFSET_OVERFLOW_ONE:
            return out
        offset = got.next_begin_offset


async def test_compaction_keeps_the_latest_per_key_and_reads_skip_the_gaps(tmp_path: Path) -> None:
    store = await started(tmp_path / "s")
    try:
        values = [msg(f"v{i}", keys=f"k{i % 3}") for i in range(9)] + [tombstone("k0")]
        await put_all(store, "c", values)
        store.retention.follow(lambda: {"c": COMPACT})
        await store.retention.run_once()
        assert store.retention.stats().passes == 1
        assert bodies(store, "c") == [(7, "v7"), (8, "v8"), (9, "\x00")]
        # a pull at a removed offset answers the next kept record and the offset after it
        got = store.get_messages("c", 0, 2, 1)
        assert [m.queue_offset for m in got.messages] == [7] and got.next_begin_offset == 8
        raw = store.get_raw_records("c", 0, 0, 32)
        assert raw.count == 3 and raw.next_begin_offset == 10
        assert store.get_min_offset("c", 0) == 0 and store.get_max_offset("c", 0) == 10
        assert store.get_queue_stats("c")[0].min_offset == 0
        # offsets never change: new records continue at 10 and read after the kept ones
        await put_all(store, "c", [msg("v10", keys="k1")])
        assert bodies(store, "c")[-1] == (10, "v10")
    finally:
        await store.shutdown()
    store = await started(tmp_path / "s")  # the kept log is found again
    try:
        assert bodies(store, "c") == [(7, "v7"), (8, "v8"), (9, "\x00"), (10, "v10")]
    finally:
        await store.shutdown()


async def test_keyless_records_are_dropped_by_compaction(tmp_path: Path) -> None:
    store = await started(tmp_path / "s")
    try:
        await put_all(store, "c", [msg("x"), msg("a1", keys="a"), msg("y")])
        store.retention.follow(lambda: {"c": COMPACT})
        await store.retention.run_once()
        assert bodies(store, "c") == [(1, "a1")]
    finally:
        await store.shutdown()


async def test_the_log_keeps_what_compaction_has_not_cleaned(tmp_path: Path) -> None:
    store = await started(tmp_path / "s")
    try:
        await put_all(store, "c", [msg(f"v{i}", keys="k") for i in range(3)])
        policy = TopicPolicy(compact=True, delete=False, min_cleanable_dirty_ratio=1.0)
        store.retention.follow(lambda: {"c": policy})
        first = store.get_raw_records("c", 0, 0, 1)
        assert first.count == 1
        pinned = store.retention.keep_from()
        assert 0 <= pinned < store.commit_log_end()
    finally:
        await store.shutdown()


@pytest.mark.parametrize("policy", [TopicPolicy(retention_bytes=0), TopicPolicy(retention_ms=0)])
async def test_retention_moves_the_log_start(tmp_path: Path, policy: TopicPolicy) -> None:
    store = await started(tmp_path / "s")
    try:
        await put_all(store, "d", [msg(f"v{i}") for i in range(5)])
        await asyncio.sleep(0.01)  # retention.ms 0: every record older than now, not equal
        store.retention.follow(lambda: {"d": policy})
        await store.retention.run_once()
        assert store.get_min_offset("d", 0) == 5
        got = store.get_messages("d", 0, 0, 8)
        assert got.status is GetStatus.OFFSET_TOO_SMALL or got.next_begin_offset == 5
    finally:
        await store.shutdown()


async def test_delete_records_moves_the_start_durably(tmp_path: Path) -> None:
    store = await started(tmp_path / "s")
    try:
        await put_all(store, "d", [msg(f"v{i}") for i in range(5)])
        assert await store.retention.delete_records("d", 0, 3) == 3
        assert store.get_queue_stats("d")[0].min_offset == 3
        got = store.get_messages("d", 0, 1, 8)
        assert got.status is GetStatus.OFFSET_TOO_SMALL and got.next_begin_offset == 3
    finally:
        await store.shutdown()
    store = await started(tmp_path / "s")
    try:
        assert store.get_min_offset("d", 0) == 3
        assert [b for _, b in bodies(store, "d", 3)] == ["v3", "v4"]
    finally:
        await store.shutdown()


async def test_a_replica_follows_its_master_s_log_starts_durably(tmp_path: Path) -> None:
    """The master's starts as shipped in the replicated metadata (``replicated_starts``) are
    taken by the replica's store (``follow_starts``): only those that grow a start, malformed
    entries skipped, written before applied (min offsets, reads), and kept across a restart."""
    master, replica = await started(tmp_path / "m"), await started(tmp_path / "r")
    try:
        for store in (master, replica):
            await put_all(store, "d", [msg(f"v{i}") for i in range(5)])
        await master.retention.delete_records("d", 0, 3)
        shipped = master.retention.replicated_starts()
        assert shipped == {"d": {"0": 3}}
        replica.retention.follow_starts({**shipped, "bad": {"x": 1}, "e": []})  # type: ignore[dict-item]
        assert replica.get_min_offset("d", 0) == 0  # not yet written: not applied
        await replica.retention.run_once()
        assert replica.get_min_offset("d", 0) == 3
        got = replica.get_messages("d", 0, 1, 8)
        assert got.status is GetStatus.OFFSET_TOO_SMALL and got.next_begin_offset == 3
        replica.retention.follow_starts({"d": {"0": 2}})  # never down
        await replica.retention.run_once()
        assert replica.get_min_offset("d", 0) == 3
    finally:
        await master.shutdown()
        await replica.shutdown()
    replica = await started(tmp_path / "r")
    try:
        assert replica.get_min_offset("d", 0) == 3
        assert [b for _, b in bodies(replica, "d", 3)] == ["v3", "v4"]
    finally:
        await replica.shutdown()


async def test_retention_bytes_counts_the_newest_records(tmp_path: Path) -> None:
    store = await started(tmp_path / "s")
    try:
        await put_all(store, "d", [msg(f"v{i}") for i in range(6)])
        size = store.get_raw_records("d", 0, 5, 1).records
        store.retention.follow(lambda: {"d": TopicPolicy(retention_bytes=2 * len(size))})
        await store.retention.run_once()
        assert store.get_min_offset("d", 0) == 4
    finally:
        await store.shutdown()


async def test_a_compacted_topic_refuses_keyless_messages_on_every_write_path(
    tmp_path: Path,
) -> None:
    store = await started(tmp_path / "s")
    try:
        store.retention.follow(lambda: {"c": COMPACT})
        with pytest.raises(InvalidMessageError, match="without key"):
            await store.put("c", 0, [msg("k", keys="a"), msg("no key")])
        with pytest.raises(InvalidMessageError, match="without key"):
            store.write("c", 0, records("c", "no key"))
        many = store.write_many([("c", 0, records("c", "x")), ("d", 0, records("d", "y"))], "")
        assert isinstance(many.errors.get(0), InvalidMessageError) and 1 not in many.errors
        await put_all(store, "c", [msg("k", keys="a")])
        await put_all(store, "d", [msg("no key needed")])
    finally:
        await store.shutdown()


async def test_retention_keeps_the_dirty_records_then_reads_come_from_the_kept_log(
    tmp_path: Path,
) -> None:
    store = await started(tmp_path / "s", file_reserved_time=0)
    try:
        await put_all(store, "c", [msg("v" * 200 + str(i), keys=f"k{i % 4}") for i in range(120)])
        await put_all(store, "d", [msg("w" * 200) for _ in range(60)])  # later segments
        held = TopicPolicy(compact=True, delete=False, min_cleanable_dirty_ratio=1.0)
        store.retention.follow(lambda: {"c": held})
        cleanup = store.insides.cleanup_service
        # Cleanup never deletes an unflushed segment: flush first, so only the pin can hold
        # them (else the test depends on when the periodic flush ran, and failed when quick).
        await store.insides.commit_log.flush()
        cleanup.request_manual_delete()
        await cleanup.run_once()
        assert store.insides.commit_log.min_offset <= store.retention.keep_from()
        assert len(bodies(store, "c")) == 120  # nothing of the dirty range went
        store.retention.follow(lambda: {"c": COMPACT})
        await store.retention.run_once()
        await store.insides.commit_log.flush()
        cleanup.request_manual_delete()
        await cleanup.run_once()
        assert store.insides.commit_log.min_offset > 0  # the segments went this time
        assert [o for o, _ in bodies(store, "c")] == [116, 117, 118, 119]
    finally:
        await store.shutdown()


async def test_compact_delete_retention_drops_kept_records_below_the_start(tmp_path: Path) -> None:
    store = await started(tmp_path / "s")
    try:
        await put_all(store, "c", [msg(f"v{i}", keys=f"k{i % 3}") for i in range(9)])
        store.retention.follow(lambda: {"c": COMPACT})
        await store.retention.run_once()
        kept = store.retention.covering("c", 0, 0)
        assert kept is not None and kept.state.records == 3
        both = TopicPolicy(
            compact=True, delete=True, retention_ms=0, segment_ms=1, min_cleanable_dirty_ratio=0.5
        )
        await asyncio.sleep(0.01)
        store.retention.follow(lambda: {"c": both})
        await store.retention.run_once()  # the start moves to the end; a pass drops the rest
        assert store.get_min_offset("c", 0) == 9
        assert store.retention.stats().kept_records == 0
        assert store.get_messages("c", 0, 0, 8).status is GetStatus.OFFSET_TOO_SMALL
    finally:
        await store.shutdown()


class Clock:
    """The retention loop's clock (``time.time`` of services/retention.py), set by the test;
    the store's own clock (the records' store timestamps) stays the real one."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def time(self) -> float:
        return self.now_ms / 1000


async def test_tombstone_age_counts_from_its_store_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delete.retention.ms 10 s. A tombstone stored at T, first cleaned at T+1 s (kept), is
    dropped by the pass at T+10.5 s, a pass run for it with nothing dirty (Kafka 3.1+ would
    keep it to T+11 s: its first cleaning + delete.retention.ms). A tombstone first cleaned
    20 s after it was stored goes at that first pass."""
    store = await started(tmp_path / "s")
    clock = Clock(0)
    monkeypatch.setattr("wharf.store.services.retention.time", clock)
    policy = TopicPolicy(
        compact=True, delete=False, segment_ms=1, min_cleanable_dirty_ratio=0.01,
        delete_retention_ms=10_000,
    )  # fmt: skip
    try:
        await put_all(store, "c", [msg("a1", keys="a"), msg("b1", keys="b"), tombstone("a")])
        stored = store.get_messages("c", 0, 2, 1).messages[0].store_timestamp
        store.retention.follow(lambda: {"c": policy})
        clock.now_ms = stored + 1_000
        await store.retention.run_once()
        assert [b for _, b in bodies(store, "c")] == ["b1", "\x00"]  # kept: 1 s old
        clock.now_ms = stored + 9_000
        await store.retention.run_once()  # nothing dirty, the tombstone not due: no pass
        assert store.retention.stats().passes == 1
        clock.now_ms = stored + 10_500
        await store.retention.run_once()  # a pass for the tombstone alone
        assert store.retention.stats().passes == 2
        assert [b for _, b in bodies(store, "c")] == ["b1"]
        assert store.retention.stats().tombstones_removed == 1
        clock.now_ms = stored + 30_000
        await store.retention.run_once()  # no tombstone left: no more passes
        assert store.retention.stats().passes == 2

        await put_all(store, "c", [tombstone("b")])
        stored_b = store.get_messages("c", 0, 3, 1).messages[0].store_timestamp
        clock.now_ms = stored_b + 20_000
        await store.retention.run_once()  # its first pass: already 20 s old, dropped
        assert store.retention.stats().passes == 3
        assert bodies(store, "c") == []
        assert store.retention.stats().tombstones_removed == 2
    finally:
        await store.shutdown()


async def test_a_gap_up_to_the_end_sends_readers_to_the_end(tmp_path: Path) -> None:
    store = await started(tmp_path / "s")
    try:
        await put_all(store, "c", [msg("v", keys="k"), tombstone("k")])
        await asyncio.sleep(0.01)
        gone = TopicPolicy(
            compact=True,
            delete=False,
            segment_ms=1,
            min_cleanable_dirty_ratio=0.01,
            delete_retention_ms=0,
        )
        store.retention.follow(lambda: {"c": gone})
        await store.retention.run_once()
        for result in (store.get_messages("c", 0, 0, 8), store.get_raw_records("c", 0, 1, 8)):
            assert result.status is GetStatus.NO_MATCHED_MESSAGE
            assert result.next_begin_offset == 2
        assert store.get_messages("c", 0, 2, 8).status is GetStatus.OFFSET_OVERFLOW_ONE
    finally:
        await store.shutdown()


class Txns:
    """A transaction view: records 3 and 4 aborted, a transaction open from offset 7."""

    def lso(self, topic: str, queue_id: int, max_offset: int) -> int:
        return min(max_offset, 7)

    def skip_aborted(self, topic: str, queue_id: int, offset: int) -> int:
        return 5 if offset in (3, 4) else offset


async def test_compaction_stops_at_the_lso_and_drops_aborted_records(tmp_path: Path) -> None:
    store = await started(tmp_path / "s")
    try:
        values = [("a", 0), ("b", 1), ("c", 2), ("a", 3), ("b", 4), ("c", 5), ("d", 6)]
        await put_all(store, "c", [msg(f"v{i}", keys=k) for k, i in values])
        await put_all(store, "c", [msg("v7", keys="a"), msg("v8", keys="b")])  # open txn
        marker = MessageInput(b"\x00", {"__KAFKA_CONTROL": "x"})  # markers have no key
        store.retention.follow(lambda: {"c": COMPACT}, Txns())
        await store.put("c", 0, [marker])
        await store.retention.run_once()
        kept = store.retention.covering("c", 0, 0)
        assert kept is not None and kept.state.cleaned_to == 7  # not past the open txn
        # the aborted a=3, b=4 superseded nothing: a=0, b=1 stay; c=2 went (c=5 committed)
        assert [o for o, _ in bodies(store, "c")][:4] == [0, 1, 5, 6]
    finally:
        await store.shutdown()


async def test_a_replica_compacts_on_its_own_to_the_same_view(tmp_path: Path) -> None:
    master = MessageStore(small_config(tmp_path / "m", ha_listen_port=0))
    await master.start()
    assert master.ha_master is not None
    replica = MessageStore(
        small_config(
            tmp_path / "r",
            broker_role="SLAVE",
            ha_master_address=f"127.0.0.1:{master.ha_master.port}",
        )
    )
    await replica.start()
    try:
        await put_all(master, "c", [msg(f"v{i}", keys=f"k{i % 5}") for i in range(40)])
        end = master.insides.commit_log.max_offset
        await until(lambda: replica.insides.commit_log.max_offset == end)
        assert await replica.wait_dispatched(5.0)
        await until(lambda: replica.get_max_offset("c", 0) == 40)
        for store in (master, replica):
            store.retention.follow(lambda: {"c": COMPACT})
            await store.retention.run_once()
        assert (
            bodies(replica, "c")
            == bodies(master, "c")
            == [(35 + k, f"v{35 + k}") for k in range(5)]
        )
        assert replica.get_min_offset("c", 0) == master.get_min_offset("c", 0)
    finally:
        await replica.shutdown()
        await master.shutdown()
