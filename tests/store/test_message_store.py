"""The MessageStore facade end to end (append -> reput -> ConsumeQueue -> get_messages)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from wharf.store.arrivals import Arrivals
from wharf.store.codec.ids import create_offset_msg_id, decode_offset_msg_id
from wharf.store.config import ASYNC_FLUSH, SYNC_FLUSH
from wharf.store.errors import (
    FlushFailedError,
    InvalidMessageError,
    StoreBusyError,
    StoreShutDownError,
)
from wharf.store.log import mapped_file
from wharf.store.message_store import MessageStore
from wharf.store.model import GetStatus, PutStatus
from wharf.store.read.filter import parse_tag_expression

from tests.store.helpers import msg, small_config
from tests.store.hooked import hooked_store


@pytest.fixture(params=[ASYNC_FLUSH, SYNC_FLUSH, "ASYNC_FLUSH+transient_pool"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MessageStore]:
    mode, _, pool = request.param.partition("+")
    s = hooked_store(
        small_config(
            tmp_path,
            flush_disk_type=mode,
            transient_store_pool_enable=bool(pool),
            commit_interval_commit_log=20,
            # Commit whatever is buffered every 20 ms (the default 4 pages would hold tiny test
            # batches back: CommitRealTimeService has no thorough interval yet).
            commit_commit_log_least_pages=0,
        )
    )
    await s.start()
    yield s
    await s.shutdown()


async def test_put_then_get_round_trips_bodies_tags_and_properties(store: MessageStore) -> None:
    result = await store.put(
        "Orders", 1, [msg(f"body-{i}", tags="a", keys=f"k{i} x") for i in range(5)]
    )
    assert result.status is PutStatus.PUT_OK
    assert result.append.first_queue_offset == 0
    assert await store.wait_dispatched()
    got = store.get_messages("Orders", 1, 0, 32)
    assert got.status is GetStatus.FOUND
    assert [m.body for m in got.messages] == [f"body-{i}".encode() for i in range(5)]
    assert [m.queue_offset for m in got.messages] == list(range(5))
    assert [m.commit_log_offset for m in got.messages] == result.append.offsets
    assert got.messages[2].keys == ["k2", "x"]
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (5, 0, 5)


async def test_batches_get_consecutive_queue_offsets_per_queue(store: MessageStore) -> None:
    first = await store.put("T", 0, [msg("a"), msg("b"), msg("c")])
    other = await store.put("T", 1, [msg("z")])
    second = await store.put("T", 0, [msg("d"), msg("e")])
    assert first.append.first_queue_offset == 0
    assert other.append.first_queue_offset == 0
    assert second.append.first_queue_offset == 3
    assert await store.wait_dispatched()
    assert store.get_max_offset("T", 0) == 5
    assert store.get_max_offset("T", 1) == 1
    assert [m.body for m in store.get_messages("T", 0, 2, 10).messages] == [b"c", b"d", b"e"]


async def test_get_statuses_follow_rocketmq_get_message(store: MessageStore) -> None:
    missing = store.get_messages("Nope", 0, 7, 10)
    assert (missing.status, missing.next_begin_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)
    await store.put("T", 0, [msg(str(i)) for i in range(4)])
    assert await store.wait_dispatched()
    one = store.get_messages("T", 0, 4, 10)
    assert (one.status, one.next_begin_offset, one.max_offset) == (
        GetStatus.OFFSET_OVERFLOW_ONE,
        4,
        4,
    )
    badly = store.get_messages("T", 0, 9, 10)
    # min offset 0: RocketMQ corrects to the min offset.
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)
    limited = store.get_messages("T", 0, 1, 2)
    assert (limited.status, limited.next_begin_offset) == (GetStatus.FOUND, 3)
    assert [m.queue_offset for m in limited.messages] == [1, 2]


async def test_max_bytes_caps_a_batch_but_returns_at_least_one(store: MessageStore) -> None:
    await store.put("T", 0, [msg(b"x" * 500) for _ in range(4)])
    assert await store.wait_dispatched()
    size = store.get_messages("T", 0, 0, 1).messages[0].store_size
    got = store.get_messages("T", 0, 0, 10, max_bytes=2 * size + 10)
    assert len(got.messages) == 2 and got.next_begin_offset == 2
    tiny = store.get_messages("T", 0, 0, 10, max_bytes=1)
    assert len(tiny.messages) == 1 and tiny.next_begin_offset == 1


async def test_tag_filter_checks_hash_then_exact_tag(store: MessageStore) -> None:
    tags = ["a", "b", "c", "a", "b"]
    await store.put("T", 0, [msg(f"m{i}", tags=t) for i, t in enumerate(tags)])
    assert await store.wait_dispatched()
    got = store.get_messages("T", 0, 0, 10, parse_tag_expression("a || c"))
    assert [m.body for m in got.messages] == [b"m0", b"m2", b"m3"]
    assert got.next_begin_offset == 5
    none = store.get_messages("T", 0, 0, 10, parse_tag_expression("zzz"))
    assert (none.status, none.next_begin_offset, none.messages) == (
        GetStatus.NO_MATCHED_MESSAGE,
        5,
        [],
    )
    # "Aa" and "BB" share Java hashCode 2112: the exact check must drop the impostor.
    await store.put("T", 2, [msg("aa", tags="Aa"), msg("bb", tags="BB")])
    assert await store.wait_dispatched()
    exact = store.get_messages("T", 2, 0, 10, parse_tag_expression("BB"))
    assert [m.body for m in exact.messages] == [b"bb"]


async def test_lookups_by_offset_id_key_and_unique_id(store: MessageStore) -> None:
    result = await store.put(
        "T", 0, [msg("one", keys="order-1 shared", uniq="U1"), msg("two", keys="shared", uniq="U2")]
    )
    assert await store.wait_dispatched()
    offset = result.append.offsets[1]
    assert store.look_message_by_offset(offset).body == b"two"  # type: ignore[union-attr]
    msg_id = create_offset_msg_id(store.config.store_host, offset)
    found = store.look_message_by_offset(decode_offset_msg_id(msg_id)[1])
    assert found is not None and found.body == b"two"
    assert store.look_message_by_offset(10**9) is None
    assert store.look_message_by_offset(offset + 3) is None  # not a record start
    by_key = store.query_messages("T", "shared", 10, 0, 2**62)
    assert sorted(m.body for m in by_key) == [b"one", b"two"]
    assert [m.body for m in store.query_messages("T", "U1", 10, 0, 2**62)] == [b"one"]
    assert store.query_messages("Other", "shared", 10, 0, 2**62) == []
    stamp = by_key[0].store_timestamp
    assert store.query_messages("T", "shared", 10, stamp + 60_000, stamp + 120_000) == []
    assert len(store.query_messages("T", "shared", 1, 0, 2**62)) == 1


async def test_offset_by_timestamp_and_queue_stats(store: MessageStore) -> None:
    await store.put("T", 0, [msg("a")])
    assert await store.wait_dispatched()
    first_stamp = store.get_messages("T", 0, 0, 1).messages[0].store_timestamp
    assert store.get_offset_by_timestamp("T", 0, 0) == 0
    assert store.get_offset_by_timestamp("T", 0, first_stamp + 10**6) == 1
    [stat] = store.get_queue_stats("T")
    assert (stat.queue_id, stat.min_offset, stat.max_offset) == (0, 0, 1)
    assert stat.last_update_timestamp == first_stamp


async def test_invalid_input_writes_nothing(store: MessageStore) -> None:
    with pytest.raises(InvalidMessageError):
        store.append("T", -1, [msg("a")])
    with pytest.raises(InvalidMessageError):
        store.append("bad topic!", 0, [msg("a")])
    with pytest.raises(InvalidMessageError):
        store.append("T", 0, [])
    with pytest.raises(InvalidMessageError):
        store.append("T", 0, [msg("a", DELAY="1"), msg("b", DELAY="2")])
    with pytest.raises(InvalidMessageError):
        store.append("T", 0, [msg("a", DELAY="soon")])
    assert store.stats().messages_put_total == 0
    assert (await store.put("T", 0, [msg("ok")])).append.first_queue_offset == 0


async def test_arrival_listeners_hear_each_queue_once_per_dispatch(store: MessageStore) -> None:
    heard: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, m: heard.append((t, q, m)))
    await store.put("T", 3, [msg("a"), msg("b")])
    assert await store.wait_dispatched()
    assert heard[-1] == ("T", 3, 2)


def test_a_topic_s_arrival_listener_hears_that_topic_only_and_the_others_hear_all() -> None:
    """``Arrivals.add(listener, topic)`` (the schedule and timer services): called for that
    topic's queues, after the listeners of every queue, and never for another topic's."""
    arrivals = Arrivals()
    heard: list[tuple[str, str, int, int]] = []

    def listener(name: str) -> Callable[[str, int, int], None]:
        return lambda t, q, m: heard.append((name, t, q, m))

    every, scheduled = listener("every"), listener("schedule")
    arrivals.add(every)
    arrivals.add(scheduled, "SCHEDULE_TOPIC_XXXX")
    arrivals.notify({("T", 1): 5, ("SCHEDULE_TOPIC_XXXX", 2): 7})
    assert heard == [
        ("every", "T", 1, 5),
        ("every", "SCHEDULE_TOPIC_XXXX", 2, 7),
        ("schedule", "SCHEDULE_TOPIC_XXXX", 2, 7),
    ]
    heard.clear()
    arrivals.remove(scheduled)
    arrivals.notify({("SCHEDULE_TOPIC_XXXX", 2): 8})
    assert heard == [("every", "SCHEDULE_TOPIC_XXXX", 2, 8)]


def test_a_quiet_listener_is_left_out_of_a_report_and_heard_again_once_someone_waits() -> None:
    """``Arrivals.add(listener, quiet=...)`` (the long polls, pop): asked once a report; while
    it answers True the listener hears nothing, the others still hear every queue, and a
    topic's listener still hears its topic."""
    arrivals = Arrivals()
    heard: list[tuple[str, str, int, int]] = []
    asked: list[bool] = []
    parked = False

    def quiet() -> bool:
        asked.append(parked)
        return not parked

    arrivals.add(lambda t, q, m: heard.append(("polls", t, q, m)), quiet=quiet)
    arrivals.add(lambda t, q, m: heard.append(("every", t, q, m)))
    arrivals.add(lambda t, q, m: heard.append(("timer", t, q, m)), "rmq_sys_wheel_timer")
    report = {("T", 0): 3, ("T", 1): 4, ("rmq_sys_wheel_timer", 0): 9}
    arrivals.notify(report)
    assert heard == [
        ("every", "T", 0, 3),
        ("every", "T", 1, 4),
        ("every", "rmq_sys_wheel_timer", 0, 9),
        ("timer", "rmq_sys_wheel_timer", 0, 9),
    ]
    assert asked == [False]  # once for the report, not once a queue
    heard.clear()
    parked = True
    arrivals.notify({("T", 1): 5})
    assert heard == [("polls", "T", 1, 5), ("every", "T", 1, 5)]


def test_with_only_quiet_listeners_a_report_calls_nothing() -> None:
    arrivals = Arrivals()
    heard: list[int] = []
    arrivals.add(lambda t, q, m: heard.append(m), quiet=lambda: True)
    arrivals.notify({("T", q): q for q in range(64)})
    assert heard == []
    arrivals.add(lambda t, q, m: heard.append(m), quiet=lambda: False)
    arrivals.notify({("T", 3): 7})
    assert heard == [7]


async def test_writes_after_shutdown_are_refused(tmp_path: Path) -> None:
    s = hooked_store(small_config(tmp_path))
    await s.start()
    await s.shutdown()
    assert not s.writable
    with pytest.raises(StoreShutDownError):
        s.append("T", 0, [msg("late")])


async def test_sync_flush_timeout_is_surfaced_and_unflushed_data_stays_invisible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The seam is replaced before the store starts: the Python sync thread runs the syncs.
    slow = True

    def slow_fdatasync(fd: int) -> None:
        if slow:
            time.sleep(0.4)
        os.fdatasync(fd)

    monkeypatch.setattr(mapped_file, "fdatasync", slow_fdatasync)
    s = hooked_store(small_config(tmp_path, flush_disk_type=SYNC_FLUSH, sync_flush_timeout=50))
    await s.start()
    try:
        result = await s.put("T", 0, [msg("slow")])
        assert result.status is PutStatus.FLUSH_DISK_TIMEOUT
        # Not on disk yet, so not dispatched: a crash could still take it away (RocketMQ #8239).
        assert s.get_max_offset("T", 0) == 0
        slow = False
        assert await s.wait_dispatched(5)
        assert [m.body for m in s.get_messages("T", 0, 0, 10).messages] == [b"slow"]
    finally:
        await s.shutdown()


async def test_failed_sync_is_sticky_and_refuses_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = False

    def failing_fdatasync(fd: int) -> None:
        if failing:
            raise OSError(errno.EIO, "simulated I/O error")
        os.fdatasync(fd)

    monkeypatch.setattr(mapped_file, "fdatasync", failing_fdatasync)  # before the start
    s = hooked_store(small_config(tmp_path, flush_disk_type=SYNC_FLUSH))
    await s.start()
    try:
        failing = True
        with pytest.raises(FlushFailedError):
            await s.put("T", 0, [msg("lost?")])
        failing = False
        assert not s.writable
        assert "sync failed" in s.stats().not_writable_reason
        with pytest.raises(FlushFailedError):
            s.append("T", 0, [msg("after")])
    finally:
        await s.shutdown()


async def test_delete_topics_forgets_queues_and_removes_their_files(tmp_path: Path) -> None:
    s = hooked_store(small_config(tmp_path))
    await s.start()
    try:
        await s.put("Gone", 0, [msg(str(i)) for i in range(20)])
        await s.put("Kept", 0, [msg("k")])
        assert await s.wait_dispatched()
        assert (tmp_path / "consumequeue" / "Gone" / "0").is_dir()
        await s.delete_topics(["Gone"])
        assert s.get_max_offset("Gone", 0) == 0
        assert s.get_queue_stats("Gone") == []
        assert s.get_messages("Gone", 0, 0, 10).status is GetStatus.NO_MESSAGE_IN_QUEUE
        # Re-created at once: offsets start again at 0 in a fresh directory.
        again = await s.put("Gone", 0, [msg("new")])
        assert again.append.first_queue_offset == 0
        assert await s.wait_dispatched()
        assert [m.body for m in s.get_messages("Gone", 0, 0, 10).messages] == [b"new"]
        assert s.get_max_offset("Kept", 0) == 1
    finally:
        await s.shutdown()
    leftovers = [p.name for p in (tmp_path / "consumequeue").iterdir()]
    assert sorted(leftovers) == ["Gone", "Kept"]  # the old directory was removed in a thread
    assert len(list((tmp_path / "consumequeue" / "Gone" / "0").iterdir())) == 1


async def test_topic_churn_right_after_sends_leaves_no_queue_and_no_open_file(
    tmp_path: Path,
) -> None:
    # Create, send, delete at once, 40 times: the sends are not dispatched yet when the
    # deletion comes. Before, dispatch re-created the deleted topic's queue afterwards and a
    # file created for a queue dropped meanwhile stayed open (~10 descriptors a minute leaked
    # in a soak deleting a topic every 5 s).
    s = hooked_store(small_config(tmp_path))
    await s.start()
    try:
        await s.put("Warm", 0, [msg("w")])
        assert await s.wait_dispatched()
        for n in range(40):
            await s.put(f"Churn{n}", n % 4, [msg(str(i)) for i in range(10)])
            await s.delete_topics([f"Churn{n}"])
        assert await s.wait_dispatched()
        for _ in range(100):  # the deleted queues' files go in a background thread
            if not any(
                p.name.startswith(("Churn", ".deleted"))
                for p in (tmp_path / "consumequeue").iterdir()
            ):
                break
            await asyncio.sleep(0.02)
        assert sorted(p.name for p in (tmp_path / "consumequeue").iterdir()) == ["Warm"]
        assert all(s.get_max_offset(f"Churn{n}", n % 4) == 0 for n in range(40))
        # No descriptor left on a deleted queue's file (segments of the log roll meanwhile).
        targets = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor
                targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        assert not [t for t in targets if "consumequeue" in t and ("Churn" in t or "deleted" in t)]
    finally:
        await s.shutdown()


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("flush_disk_type", "SOMETIMES", "flush_disk_type"),
        ("mapped_file_size_consume_queue", 30, "multiple of 20"),
        ("delete_when", "4;25", "25"),
        ("message_delay_level", "1s 2x", "2x"),
        ("disk_space_warning_level_ratio", 150, "percentages"),
        ("disk_max_used_space_ratio", 95, "increasing"),  # above the force-clean level, 85
        ("max_index_num", 1, "max_index_num"),
        ("sync_flush_timeout", 0, "sync_flush_timeout: expected a positive integer"),
    ],
)
def test_bad_settings_are_refused_at_construction(
    tmp_path: Path, setting: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        hooked_store(small_config(tmp_path, **{setting: value}))


async def test_put_waits_while_dispatch_lags_beyond_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = hooked_store(small_config(tmp_path, max_dispatch_lag_bytes=2000))
    await s.start()
    try:
        source = s.insides.reput_service.source
        monkeypatch.setattr(source, "dispatch_limit", lambda: 0)  # dispatch stalls
        for _ in range(5):
            s.append("T", 0, [msg(b"x" * 500)])  # append() never waits: ~3 KB now undispatched
        put = asyncio.create_task(s.put("T", 0, [msg("held")]))
        await asyncio.sleep(0.2)
        assert not put.done()  # held back: dispatch is more than 2000 bytes behind
        monkeypatch.undo()  # dispatch resumes
        result = await asyncio.wait_for(put, 5)
        assert result.append.first_queue_offset == 5
        assert s.insides.writer.throttled_puts == 1
        assert await s.wait_dispatched()
        assert s.get_max_offset("T", 0) == 6
    finally:
        monkeypatch.undo()
        await s.shutdown()


@contextlib.asynccontextmanager
async def _stalled(
    root: Path, monkeypatch: pytest.MonkeyPatch, wait_ms: int
) -> AsyncIterator[MessageStore]:
    """A store whose dispatch stopped with ~3 KB undispatched, past its 2,000-byte bound."""
    config = small_config(root, max_dispatch_lag_bytes=2000, wait_time_mills_in_send_queue=wait_ms)
    s = hooked_store(config)
    await s.start()
    try:
        monkeypatch.setattr(s.insides.reput_service.source, "dispatch_limit", lambda: 0)
        for _ in range(5):
            s.append("T", 0, [msg(b"x" * 500)])
        yield s
    finally:
        monkeypatch.undo()
        await s.shutdown()


async def test_put_held_past_wait_time_is_refused_busy_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A put held ``wait_time_mills_in_send_queue`` for a dispatch that does not catch up is
    refused (StoreBusyError: "broker busy", what to do), writes nothing, and the episode is one
    log line; once the dispatch has room puts are accepted again, and the end is logged.
    Before, the hold lasted syncFlushTimeout (5 s) and then wrote anyway: past the SDK's 3 s
    deadline, a send its client had given up on."""
    async with _stalled(tmp_path, monkeypatch, 300) as s:
        written = s.stats().commit_log_max_offset
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            started = loop.time()
            with pytest.raises(StoreBusyError, match="broker busy") as busy:
                await s.put("T", 0, [msg(f"refused-{attempt}")])
            assert 0.25 <= loop.time() - started < 2.0  # held its wait, not syncFlushTimeout
        assert "waitTimeMillsInSendQueue" in str(busy.value) and "retry" in str(busy.value)
        assert s.stats().commit_log_max_offset == written  # nothing of them written
        assert (s.stats().sends_held, s.stats().sends_refused_busy) == (2, 2)  # /metrics
        assert sum("broker busy" in r.getMessage() for r in caplog.records) == 1  # an episode
        monkeypatch.undo()  # the dispatch resumes
        assert await s.wait_dispatched()
        result = await asyncio.wait_for(s.put("T", 0, [msg("accepted")]), 5)
        assert result.append.first_queue_offset == 5
        assert any("dispatch caught up" in r.getMessage() for r in caplog.records)


async def test_put_with_no_wait_time_is_refused_busy_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _stalled(tmp_path, monkeypatch, 0) as s:
        with pytest.raises(StoreBusyError):
            await asyncio.wait_for(s.put("T", 0, [msg("refused")]), 0.5)


async def test_sync_flush_append_without_put_still_becomes_visible(tmp_path: Path) -> None:
    s = hooked_store(small_config(tmp_path, flush_disk_type=SYNC_FLUSH))
    await s.start()
    try:
        s.append("T", 0, [msg("no put")])
        assert await s.wait_dispatched(5)
        assert [m.body for m in s.get_messages("T", 0, 0, 10).messages] == [b"no put"]
        assert s.stats().commit_log_flushed_offset == s.stats().commit_log_max_offset
    finally:
        await s.shutdown()


async def test_many_throttled_puts_resume_together_when_dispatch_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = hooked_store(small_config(tmp_path, max_dispatch_lag_bytes=2000))
    await s.start()
    try:
        monkeypatch.setattr(s.insides.reput_service.source, "dispatch_limit", lambda: 0)
        for _ in range(5):
            s.append("T", 0, [msg(b"x" * 500)])
        puts = [asyncio.create_task(s.put("T", 1, [msg(f"held-{i}")])) for i in range(10)]
        await asyncio.sleep(0.2)
        assert not any(p.done() for p in puts)
        monkeypatch.undo()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(asyncio.gather(*puts), 5)
        # All resume on the dispatch progress, not on their own timeouts (5 s).
        assert loop.time() - started < 2.0
        assert s.insides.writer.throttled_puts == 10
    finally:
        monkeypatch.undo()
        await s.shutdown()
