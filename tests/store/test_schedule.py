"""Delay levels: the rewrite to SCHEDULE_TOPIC_XXXX, the re-put when due, persisted progress."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from wharf.store.codec import SCHEDULE_TOPIC
from wharf.store.config import parse_delay_levels
from wharf.store.message_store import MessageStore
from wharf.store.model import GetStatus

from tests.store.helpers import msg, small_config
from tests.store.hooked import hooked_store


async def _wait_for_messages(store: MessageStore, topic: str, queue_id: int, timeout_s: float):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        got = store.get_messages(topic, queue_id, 0, 10)
        if got.messages:
            return got
        await asyncio.sleep(0.05)
    return store.get_messages(topic, queue_id, 0, 10)


def test_delay_levels_parse_units_and_reject_garbage() -> None:
    assert parse_delay_levels("1s 5s 1m 2h 1d") == [1000, 5000, 60_000, 7_200_000, 86_400_000]
    for bad in ["", "1x", "0s", "s", "1s,2s"]:
        with pytest.raises(ValueError):
            parse_delay_levels(bad)


async def test_delayed_message_is_rewritten_then_delivered_to_its_real_queue(
    tmp_path: Path,
) -> None:
    store = hooked_store(small_config(tmp_path))
    await store.start()
    try:
        put = await store.put("Orders", 3, [msg("later", tags="t", keys="k1", DELAY="1")])
        assert (put.append.topic, put.append.queue_id) == (SCHEDULE_TOPIC, 0)
        assert await store.wait_dispatched()
        # Stored under the schedule topic with the real destination and the deliver time.
        [scheduled] = store.get_messages(SCHEDULE_TOPIC, 0, 0, 10).messages
        assert scheduled.properties["REAL_TOPIC"] == "Orders"
        assert scheduled.properties["REAL_QID"] == "3"
        [(_, _, deliver_ms)] = store.read_consume_queue(SCHEDULE_TOPIC, 0, 0, 10)
        assert deliver_ms == scheduled.store_timestamp + 1000
        assert store.get_messages("Orders", 3, 0, 10).status is GetStatus.NO_MESSAGE_IN_QUEUE

        got = await _wait_for_messages(store, "Orders", 3, timeout_s=5)
        [delivered] = got.messages
        assert delivered.body == b"later"
        assert delivered.tags == "t"
        assert "DELAY" not in delivered.properties
        assert delivered.store_timestamp >= scheduled.store_timestamp + 1000
        assert [m.body for m in store.query_messages("Orders", "k1", 10, 0, 2**62)] == [b"later"]
    finally:
        await store.shutdown()
    table = json.loads((tmp_path / "config" / "delayOffset.json").read_text())
    assert table == {"offsetTable": {"1": 1}}

    # Progress survives a restart: the message is not delivered twice.
    again = hooked_store(small_config(tmp_path))
    await again.start()
    try:
        await asyncio.sleep(0.3)
        assert again.get_max_offset("Orders", 3) == 1
    finally:
        await again.shutdown()


async def test_levels_beyond_the_configured_count_are_clamped(tmp_path: Path) -> None:
    store = hooked_store(small_config(tmp_path))  # "1s 2s": two levels
    await store.start()
    try:
        put = await store.put("T", 0, [msg("x", DELAY="9")])
        assert (put.append.topic, put.append.queue_id) == (SCHEDULE_TOPIC, 1)
        assert await store.wait_dispatched()
        [scheduled] = store.get_messages(SCHEDULE_TOPIC, 1, 0, 1).messages
        assert scheduled.properties["DELAY"] == "2"
        zero = await store.put("T", 0, [msg("now", DELAY="0")])
        assert (zero.append.topic, zero.append.queue_id) == ("T", 0)
    finally:
        await store.shutdown()


async def test_due_messages_wait_while_the_store_refuses_writes_then_all_arrive(
    tmp_path: Path,
) -> None:
    disk = {"ratio": 0.5}
    store = hooked_store(
        small_config(tmp_path, flush_disk_type="SYNC_FLUSH"),
        disk_usage=lambda path: disk["ratio"],
    )
    await store.start()
    try:
        # Level 2 (2 s): a margin for slow syncs on a busy machine before the refusal starts.
        await store.put("Orders", 0, [msg(f"d{i}", DELAY="2") for i in range(5)])
        disk["ratio"] = 0.95
        await store.insides.cleanup_service.clean_commit_log()
        assert not store.writable
        await asyncio.sleep(2.6)  # due now, but every re-put is refused
        assert store.get_max_offset("Orders", 0) == 0
        assert store.insides.schedule_service.offset_table.get(2, 0) == 0
        disk["ratio"] = 0.5
        await store.insides.cleanup_service.clean_commit_log()
        assert store.writable
        got = store.get_messages("Orders", 0, 0, 10)
        for _ in range(200):  # up to 10 s on a busy machine
            if len(got.messages) == 5:
                break
            await asyncio.sleep(0.05)
            got = store.get_messages("Orders", 0, 0, 10)
        assert sorted(m.body for m in got.messages) == [f"d{i}".encode() for i in range(5)]
        assert store.insides.schedule_service.offset_table[2] == 5
    finally:
        await store.shutdown()


def test_delay_offsets_fall_back_to_the_backup_when_the_file_is_damaged(tmp_path: Path) -> None:
    from wharf.store.paths import read_json_with_backup_blocking, write_json_atomic_blocking

    path = tmp_path / "delayOffset.json"
    write_json_atomic_blocking(path, {"offsetTable": {"1": 3}})
    write_json_atomic_blocking(path, {"offsetTable": {"1": 7}})
    assert read_json_with_backup_blocking(path) == {"offsetTable": {"1": 7}}
    assert json.loads(path.with_name("delayOffset.json.bak").read_text()) == {
        "offsetTable": {"1": 3}
    }
    path.write_text('{"offsetTable": {"1": ')  # torn by a crash of another writer
    assert read_json_with_backup_blocking(path) == {"offsetTable": {"1": 3}}
    path.unlink()
    path.with_name("delayOffset.json.bak").unlink()
    assert read_json_with_backup_blocking(path) is None
