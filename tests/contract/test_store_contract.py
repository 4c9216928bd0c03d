"""The store contract the broker relies on, run against the real MessageStore (on a temporary
directory) and against tests/fakes.py's FakeStore: every body below runs on both, so the fake
the broker and metrics unit tests use cannot drift from the engine.

What only one of them can do stays out of here: record sizes and commit log offsets (the fake's
are synthetic; only their arithmetic is shared), retention and recovery (real store tests),
the fake's knobs (its users' tests).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from wharf.store import message_store
from wharf.store.codec import PROPERTY_DELAY_TIME_LEVEL, SCHEDULE_TOPIC
from wharf.store.config import StoreConfig
from wharf.store.errors import InvalidMessageError
from wharf.store.model import GetStatus, MessageInput, PutStatus
from wharf.store.read.filter import parse_tag_expression

from tests.fakes import FakeStore
from tests.store.hooked import hooked_store

# Small files: the real store creates its segments in a test's temporary directory.
SMALL = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 64,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
    "message_delay_level": "1s 2s 3s",
}
FAR_FUTURE_MS = 2**42


def msg(body: str, tags: str = "", keys: str = "", uniq: str = "", **props: str) -> MessageInput:
    properties = dict(props)
    for name, value in (("TAGS", tags), ("KEYS", keys), ("UNIQ_KEY", uniq)):
        if value:
            properties[name] = value
    return MessageInput(body.encode(), properties, born_host="127.0.0.1:50000")


def bodies(messages: Sequence[Any]) -> list[bytes]:
    return [m.body for m in messages]


@pytest.fixture(params=["real", "fake"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    config = StoreConfig(store_path_root_dir=str(tmp_path), **SMALL)  # type: ignore[arg-type]
    if request.param == "real":
        # Retention reads the real disk: a nearly full one would delete data mid-test.
        monkeypatch.setattr(message_store, "statvfs_used_ratio", lambda path: 0.5)
        s: Any = hooked_store(config)  # as the broker makes it: delays parked by its hook
    else:
        s = FakeStore(config)
    await s.start()
    yield s
    await s.shutdown()


async def put(store: Any, topic: str, queue_id: int, *messages: MessageInput) -> Any:
    result = await store.put(topic, queue_id, list(messages))
    assert result.status is PutStatus.PUT_OK
    assert await store.wait_dispatched()
    return result.append


# --- writes -----------------------------------------------------------------------------------
async def test_batches_take_consecutive_queue_offsets_per_queue(store: Any) -> None:
    first = await put(store, "T", 0, msg("a"), msg("b"), msg("c"))
    other = await put(store, "T", 1, msg("z"))
    again = await put(store, "T", 0, msg("d"), msg("e"))
    assert (first.topic, first.queue_id, first.first_queue_offset) == ("T", 0, 0)
    assert (other.queue_id, other.first_queue_offset) == (1, 0)
    assert again.first_queue_offset == 3
    assert (store.get_min_offset("T", 0), store.get_max_offset("T", 0)) == (0, 5)
    assert store.get_max_offset("T", 1) == 1
    assert (store.get_min_offset("nope", 0), store.get_max_offset("nope", 0)) == (0, 0)


async def test_an_append_result_describes_contiguous_records(store: Any) -> None:
    result = store.append("T", 0, [msg("one"), msg("two"), msg("three")])
    assert len(result.offsets) == len(result.sizes) == 3
    for here, size, there in zip(result.offsets, result.sizes, result.offsets[1:], strict=False):
        assert here + size == there
    assert result.end_offset == result.offsets[-1] + result.sizes[-1]
    assert await store.wait_dispatched()
    later = store.append("T", 1, [msg("four")])
    assert later.offsets[0] == result.end_offset  # one log for every queue
    assert await store.wait_dispatched()
    assert store.dispatch_pending is False


async def test_a_message_is_found_by_its_commit_log_offset(store: Any) -> None:
    result = await put(store, "T", 2, msg("one", tags="a"), msg("two"))
    for i, offset in enumerate(result.offsets):
        found = store.look_message_by_offset(offset)
        assert found is not None
        assert (found.topic, found.queue_id, found.queue_offset) == ("T", 2, i)
        assert (found.commit_log_offset, found.store_size) == (offset, result.sizes[i])
    assert store.look_message_by_offset(result.offsets[0]).body == b"one"


async def test_an_empty_batch_is_refused(store: Any) -> None:
    with pytest.raises(InvalidMessageError):
        store.append("T", 0, [])


async def test_a_delayed_message_goes_to_the_schedule_topic_queue_of_its_level(store: Any) -> None:
    result = await put(store, "Orders", 0, msg("later", **{PROPERTY_DELAY_TIME_LEVEL: "2"}))
    assert (result.topic, result.queue_id) == (SCHEDULE_TOPIC, 1)
    assert store.get_max_offset(SCHEDULE_TOPIC, 1) == 1


# --- reads ------------------------------------------------------------------------------------
async def test_get_messages_returns_what_was_put(store: Any) -> None:
    sent = [msg(f"body-{i}", tags="a", keys=f"k{i} x", uniq=f"U{i:030d}") for i in range(5)]
    result = await put(store, "Orders", 1, *sent)
    got = store.get_messages("Orders", 1, 0, 32)
    assert got.status is GetStatus.FOUND
    assert bodies(got.messages) == [f"body-{i}".encode() for i in range(5)]
    assert [m.queue_offset for m in got.messages] == list(range(5))
    assert [m.commit_log_offset for m in got.messages] == result.offsets
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (5, 0, 5)
    second = got.messages[2]
    assert (second.topic, second.queue_id, second.tags) == ("Orders", 1, "a")
    assert second.keys == ["k2", "x"]
    assert second.unique_id == f"U{2:030d}"
    assert second.properties["TAGS"] == "a"
    assert second.born_host == "127.0.0.1:50000"
    assert second.store_host == store.config.store_host
    assert second.store_timestamp == result.store_timestamp
    assert second.reconsume_times == 0


async def test_get_messages_reads_at_most_max_count_and_says_where_to_go_on(store: Any) -> None:
    await put(store, "T", 0, *(msg(f"m{i}") for i in range(6)))
    got = store.get_messages("T", 0, 1, 2)
    assert got.status is GetStatus.FOUND
    assert bodies(got.messages) == [b"m1", b"m2"]
    assert got.next_begin_offset == 3
    rest = store.get_messages("T", 0, got.next_begin_offset, 100)
    assert bodies(rest.messages) == [b"m3", b"m4", b"m5"]
    assert rest.next_begin_offset == 6


async def test_get_messages_statuses_at_the_edges_of_a_queue(store: Any) -> None:
    missing = store.get_messages("T", 0, 0, 8)
    assert missing.status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert (missing.next_begin_offset, missing.min_offset, missing.max_offset) == (0, 0, 0)
    assert missing.messages == []
    await put(store, "T", 0, msg("a"), msg("b"))
    at_end = store.get_messages("T", 0, 2, 8)
    assert at_end.status is GetStatus.OFFSET_OVERFLOW_ONE
    assert (at_end.next_begin_offset, at_end.max_offset, at_end.messages) == (2, 2, [])
    beyond = store.get_messages("T", 0, 9, 8)
    assert beyond.status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert beyond.next_begin_offset == 0  # min offset 0: start over (RocketMQ's correction)
    assert beyond.messages == []


async def test_a_tag_filter_selects_messages_and_skips_the_rest(store: Any) -> None:
    await put(store, "T", 0, msg("a1", tags="a"), msg("b1", tags="b"), msg("a2", tags="a"))
    await put(store, "T", 0, msg("c1", tags="c"), msg("none"))
    only_a = store.get_messages("T", 0, 0, 32, parse_tag_expression("a"))
    assert only_a.status is GetStatus.FOUND
    assert bodies(only_a.messages) == [b"a1", b"a2"]
    assert only_a.next_begin_offset == 5  # every unit scanned
    either = store.get_messages("T", 0, 0, 32, parse_tag_expression("a || c"))
    assert bodies(either.messages) == [b"a1", b"a2", b"c1"]
    everything = store.get_messages("T", 0, 0, 32, parse_tag_expression("*"))
    assert len(everything.messages) == 5
    first_a = store.get_messages("T", 0, 0, 1, parse_tag_expression("a"))
    assert (bodies(first_a.messages), first_a.next_begin_offset) == ([b"a1"], 1)
    second_a = store.get_messages("T", 0, 1, 1, parse_tag_expression("a"))
    assert (bodies(second_a.messages), second_a.next_begin_offset) == ([b"a2"], 3)
    nothing = store.get_messages("T", 0, 0, 32, parse_tag_expression("zzz"))
    assert nothing.status is GetStatus.NO_MATCHED_MESSAGE
    assert (nothing.messages, nothing.next_begin_offset) == ([], 5)


async def test_messages_are_queried_by_key_or_unique_id_newest_first(store: Any) -> None:
    await put(store, "Orders", 0, msg("o1", keys="order-1 shared"), msg("o2", keys="order-2"))
    await put(store, "Orders", 1, msg("o3", keys="shared", uniq="UNIQ-3"))
    await put(store, "Other", 0, msg("x", keys="shared"))

    def query(key: str, max_num: int = 16, begin: int = 0, end: int = FAR_FUTURE_MS) -> list:
        return bodies(store.query_messages("Orders", key, max_num, begin, end))

    assert query("order-2") == [b"o2"]
    assert query("shared") == [b"o3", b"o1"]
    assert query("shared", max_num=1) == [b"o3"]
    assert query("UNIQ-3") == [b"o3"]
    assert query("absent") == []
    assert query("shared", end=1) == []  # stored after the window


async def test_the_offset_of_a_time_is_the_first_message_stored_at_or_after_it(
    store: Any,
) -> None:
    first = await put(store, "T", 0, msg("a"), msg("b"))
    await asyncio.sleep(0.01)  # a later millisecond for the second batch
    second = await put(store, "T", 0, msg("c"))
    assert second.store_timestamp > first.store_timestamp
    assert store.get_offset_by_timestamp("T", 0, 0) == 0
    assert store.get_offset_by_timestamp("T", 0, first.store_timestamp) == 0
    assert store.get_offset_by_timestamp("T", 0, second.store_timestamp) == 2
    assert store.get_offset_by_timestamp("T", 0, FAR_FUTURE_MS) == 3
    assert store.get_offset_by_timestamp("nope", 0, 0) == 0


async def test_queue_stats_list_every_queue_of_a_topic(store: Any) -> None:
    before = int(time.time() * 1000)
    await put(store, "T", 0, msg("a"), msg("b"))
    last = await put(store, "T", 3, msg("c"))
    await put(store, "Other", 0, msg("d"))
    stats = sorted(store.get_queue_stats("T"), key=lambda s: s.queue_id)
    assert [(s.queue_id, s.min_offset, s.max_offset) for s in stats] == [(0, 0, 2), (3, 0, 1)]
    assert stats[1].last_update_timestamp == last.store_timestamp >= before
    assert store.get_queue_stats("nope") == []


# --- topics, listeners, stats -----------------------------------------------------------------
async def test_a_deleted_topic_is_gone_and_starts_over_at_offset_zero(store: Any) -> None:
    await put(store, "Gone", 0, msg("a"), msg("b"))
    await put(store, "Kept", 0, msg("k"))
    await store.delete_topics(["Gone"])
    assert store.get_messages("Gone", 0, 0, 8).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.get_queue_stats("Gone") == []
    assert store.get_max_offset("Gone", 0) == 0
    assert bodies(store.get_messages("Kept", 0, 0, 8).messages) == [b"k"]
    again = await put(store, "Gone", 0, msg("new"))
    assert again.first_queue_offset == 0
    assert bodies(store.get_messages("Gone", 0, 0, 8).messages) == [b"new"]


async def test_arrival_listeners_hear_the_new_max_offset_of_each_queue(store: Any) -> None:
    heard: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda topic, queue_id, max_offset: heard.append(
        (topic, queue_id, max_offset)
    ))  # fmt: skip
    await put(store, "T", 0, msg("a"), msg("b"))
    await put(store, "T", 5, msg("c"))
    for _ in range(100):  # the real store tells them right after dispatch
        if ("T", 5, 1) in heard:
            break
        await asyncio.sleep(0.01)
    assert ("T", 0, 2) in heard
    assert ("T", 5, 1) in heard
    assert all(topic == "T" for topic, _, _ in heard)


async def test_stats_count_what_was_put(store: Any) -> None:
    await put(store, "T", 0, msg("a"), msg("b"))
    last = await put(store, "T", 1, msg("c"))
    stats = store.stats()
    assert stats.messages_put_total == 3
    assert stats.commit_log_max_offset == last.end_offset
    assert stats.writable is True
    assert stats.not_writable_reason == ""
