"""Metadata managers: RocketMQ's JSON layouts, atomic writes with a .bak, membership versions."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from wharf.broker.core.clients import ClientRegistry, ConsumeFrom, MessageModel
from wharf.broker.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from wharf.broker.meta.groups import SubscriptionGroup, SubscriptionGroupManager
from wharf.broker.meta.offsets import ConsumerOffsetManager
from wharf.broker.meta.persist import (
    MetadataError,
    dumps,
    load_json_blocking,
    write_text_atomic_blocking,
)
from wharf.broker.meta.topics import TopicConfigManager


def test_offsets_persist_in_rocketmq_layout_and_load_back(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager()
    offsets.commit("g1", "orders", 0, 42)
    offsets.commit("g1", "orders", 3, 7)
    path = tmp_path / "config" / "consumerOffset.json"
    write_text_atomic_blocking(path, dumps(offsets.to_json()))
    assert json.loads(path.read_text()) == {"offsetTable": {"orders@g1": {"0": 42, "3": 7}}}
    again = ConsumerOffsetManager()
    again.load(load_json_blocking(path))
    assert again.query("g1", "orders", 3) == 7
    assert again.query("g1", "orders", 1) == -1
    assert again.query("g2", "orders", 0) == -1


def test_second_write_keeps_previous_file_as_bak(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    write_text_atomic_blocking(path, '{"v": 1}')
    write_text_atomic_blocking(path, '{"v": 2}')
    assert json.loads(path.read_text()) == {"v": 2}
    assert json.loads((tmp_path / "topics.json.bak").read_text()) == {"v": 1}
    assert not (tmp_path / "topics.json.tmp").exists()


def test_concurrent_writes_of_one_file_all_succeed_and_leave_a_whole_one(tmp_path: Path) -> None:
    """A stop's final checkpoint can overlap the write a cancelled task left in its thread:
    both go through the same ``.tmp`` and must not trip over each other."""
    path = tmp_path / "checkpoint.json"

    def writer(n: int) -> None:
        for i in range(40):
            write_text_atomic_blocking(path, json.dumps({"writer": n, "i": i}))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))  # re-raises any writer's error
    assert json.loads(path.read_text())["i"] == 39
    assert not (tmp_path / "checkpoint.json.tmp").exists()


def test_corrupt_file_falls_back_to_bak_and_both_corrupt_refuses(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    write_text_atomic_blocking(path, '{"v": 1}')
    write_text_atomic_blocking(path, '{"v": 2}')
    path.write_text("{torn")
    assert load_json_blocking(path) == {"v": 1}
    (tmp_path / "topics.json.bak").write_text("[]")
    with pytest.raises(MetadataError, match=r"topics\.json"):
        load_json_blocking(path)
    assert load_json_blocking(tmp_path / "absent.json") is None


def test_topics_table_round_trip_and_rules(tmp_path: Path) -> None:
    topics = TopicConfigManager(default_queue_nums=8, auto_create=True)
    assert topics.for_send("orders").write_queue_nums == 8
    topics.create("audit", 2, 2, 6, {"message.type": "NORMAL"})
    with pytest.raises(AlreadyExistsError):
        topics.create("audit", 2, 2, 6, {})
    with pytest.raises(InvalidArgumentError, match="is invalid: use 1-249 characters"):
        topics.create("bad topic", 1, 1, 6, {})
    with pytest.raises(InvalidArgumentError, match="reserved"):
        topics.for_send("SCHEDULE_TOPIC_XXXX")
    with pytest.raises(InvalidArgumentError, match="limit is 249"):
        topics.create("t" * 250, 1, 1, 6, {})
    topics.ensure_system("%RETRY%g1", 1)
    assert [t.name for t in topics.listing(include_system=False)] == ["audit", "orders"]
    assert len(topics) == 2
    data = topics.to_json()
    assert data["topicConfigTable"]["audit"]["readQueueNums"] == 2
    assert data["topicConfigTable"]["audit"]["topicName"] == "audit"
    again = TopicConfigManager(8, auto_create=False)
    again.load(json.loads(dumps(data)))
    assert again.get("audit") is not None and again.get("audit").attributes == {  # type: ignore[union-attr]
        "message.type": "NORMAL"
    }
    with pytest.raises(NotFoundError, match="autoCreateTopicEnable is off"):
        again.for_send("unknown")


def test_groups_auto_create_and_persist() -> None:
    groups = SubscriptionGroupManager(auto_create=True, default_retry_max_times=16)
    assert groups.for_use("g1").retry_max_times == 16
    groups.put(SubscriptionGroup("g2", retry_max_times=3))
    again = SubscriptionGroupManager(auto_create=False, default_retry_max_times=16)
    again.load(json.loads(dumps(groups.to_json())))
    assert again.get("g2").retry_max_times == 3  # type: ignore[union-attr]
    with pytest.raises(NotFoundError):
        again.for_use("g3")


def test_membership_version_changes_on_join_leave_and_expiry() -> None:
    consumers = ClientRegistry(expire_after_s=120)
    v1 = consumers.heartbeat(
        "c1", "g", {"t": "*"}, MessageModel.CLUSTERING, ConsumeFrom.LAST_OFFSET, now=0.0
    )
    assert (
        consumers.heartbeat(
            "c1", "g", {"t": "*"}, MessageModel.CLUSTERING, ConsumeFrom.LAST_OFFSET, now=10.0
        )
        == v1
    )  # no change
    v2 = consumers.heartbeat(
        "c2", "g", {"t": "*"}, MessageModel.CLUSTERING, ConsumeFrom.LAST_OFFSET, now=10.0
    )
    assert v2 > v1
    assert consumers.members("g") == (["c1", "c2"], v2)
    consumers.heartbeat(
        "c2", "g", {"t": "*"}, MessageModel.CLUSTERING, ConsumeFrom.LAST_OFFSET, now=100.0
    )
    assert consumers.expire(now=135.0) == [("g", "c1")]  # c1 silent since 10 s
    ids, v3 = consumers.members("g")
    assert ids == ["c2"] and v3 > v2
    consumers.unregister("c2", ["g"], [])
    assert consumers.members("g")[0] == []
