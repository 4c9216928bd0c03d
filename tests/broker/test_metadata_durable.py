"""A topic change is acknowledged once it is on disk, and records never outlive their topic's
config: ``MetadataPersister.durable`` (admin answers wait for it) and
``TopicConfigManager.adopt`` (a restart gives a config back to a topic with records but none).

Found with a real client (issue 65): confluent-kafka's CreateTopics was answered before
topics.json was written (the persister runs ~50 ms after a change), a kill -9 inside that window
lost the topic while the records produced to it survived in consumequeue/, and the producer,
finding no topic, auto-created it again with 8 partitions."""

from __future__ import annotations

import asyncio
import errno
import json
from pathlib import Path

import grpc
import pytest
from wharf.broker.meta import persister as persister_module
from wharf.broker.meta.persist import journal_of
from wharf.broker.meta.persister import MetadataNotDurable, MetadataPersister
from wharf.broker.meta.topics import TopicConfigManager
from wharf.v1 import admin_pb2, admin_pb2_grpc

from tests.broker.daemon_helpers import Client
from tests.harness import Daemons


def _reloaded(directory: Path) -> TopicConfigManager:
    fresh = TopicConfigManager(8, True)
    MetadataPersister(directory, [fresh], 5.0).load_blocking()
    return fresh


async def test_durable_returns_once_the_change_is_in_the_files(tmp_path: Path) -> None:
    topics = TopicConfigManager(8, True)
    persister = MetadataPersister(tmp_path, [topics], interval_s=60.0)  # no periodic round
    persister.start()
    try:
        await asyncio.sleep(0.1)  # the first round (nothing dirty) is over
        topics.create("orders", 3, 3, 6, {})
        assert _reloaded(tmp_path).get("orders") is None  # not yet written
        await asyncio.wait_for(persister.durable(), 2.0)
        assert _reloaded(tmp_path).require("orders").write_queue_nums == 3
    finally:
        await persister.stop()


async def test_a_change_made_during_a_round_waits_for_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round already writing captured its tables before the change: its end does not
    cover the change; durable() waits for the round after it."""
    topics = TopicConfigManager(8, True)
    persister = MetadataPersister(tmp_path, [topics], interval_s=60.0)
    writing, release = asyncio.Event(), asyncio.Event()
    real_write = persister_module.write_text_atomic_blocking
    loop = asyncio.get_running_loop()

    def slow_write(path: Path, text: object) -> None:
        loop.call_soon_threadsafe(writing.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(5)
        real_write(path, text)  # type: ignore[arg-type]

    monkeypatch.setattr(persister_module, "write_text_atomic_blocking", slow_write)
    topics.create("first", 1, 1, 6, {})
    persister.start()
    try:
        await asyncio.wait_for(writing.wait(), 2.0)  # the round writing "first" holds
        topics.create("second", 2, 2, 6, {})
        waiter = asyncio.ensure_future(persister.durable())
        writing.clear()
        release.set()  # the first round ends ...
        await asyncio.wait_for(writing.wait(), 2.0)  # ... and a second one starts for "second"
        assert not waiter.done()
        await asyncio.wait_for(waiter, 2.0)
        assert _reloaded(tmp_path).require("second").read_queue_nums == 2
    finally:
        release.set()
        await persister.stop()


async def test_a_failed_write_answers_durable_with_an_error_the_user_can_act_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = TopicConfigManager(8, True)
    persister = MetadataPersister(tmp_path, [topics], interval_s=60.0)

    def full(path: Path, text: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(persister_module, "write_text_atomic_blocking", full)
    persister.start()
    try:
        topics.create("orders", 1, 1, 6, {})
        with pytest.raises(MetadataNotDurable, match=r"not yet on disk.*No space left"):
            await asyncio.wait_for(persister.durable(), 2.0)
        assert topics.dirty  # retried next round
    finally:
        monkeypatch.undo()
        await persister.stop()


def test_adopt_gives_a_config_back_to_topics_with_records_and_none() -> None:
    topics = TopicConfigManager(8, True)
    topics.create("known", 2, 2, 6, {})
    made = topics.adopt(
        {"known": 2, "lost": 3, "wide": 12, "%RETRY%g": 1, "rmq_sys_wheel_timer": 1, "TBW102": 8}
    )
    assert [t.name for t in made] == ["%RETRY%g", "lost", "wide"]
    assert topics.require("lost").write_queue_nums == 8  # the auto-create default at least
    assert topics.require("wide").read_queue_nums == 12  # every queue with records
    assert topics.require("%RETRY%g").write_queue_nums == 1
    assert topics.get("rmq_sys_wheel_timer") is None  # the broker's own live in no table
    assert topics.require("known").write_queue_nums == 2  # untouched


def _admin(endpoint: str) -> tuple[grpc.Channel, admin_pb2_grpc.AdminServiceStub]:
    channel = grpc.insecure_channel(endpoint)
    return channel, admin_pb2_grpc.AdminServiceStub(channel)


@pytest.mark.slow
def test_a_created_topic_survives_a_kill_9_right_after_its_answer(
    daemons: Daemons, tmp_path: Path
) -> None:
    broker = daemons.broker()
    channel, admin = _admin(broker.endpoint)
    try:
        for i in range(5):  # each answer, then SIGKILL at once: inside the old 50 ms window
            admin.CreateTopic(
                admin_pb2.CreateTopicRequest(name=f"t{i}", read_queue_nums=3, write_queue_nums=3),
                timeout=10,
            )
            broker.kill()
            broker.start()
            channel.close()
            channel, admin = _admin(broker.endpoint)
            listed = {
                t.name: t.write_queue_nums
                for t in admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10).topics
            }
            assert listed.get(f"t{i}") == 3, f"topic t{i} lost by a kill -9: {listed}"
    finally:
        channel.close()
    assert broker.stop() == 0


@pytest.mark.slow
def test_records_whose_topic_config_was_lost_are_reachable_after_a_restart(
    daemons: Daemons, tmp_path: Path
) -> None:
    """What a kill -9 between an auto-create's first records and the table's write leaves:
    made here by a clean stop and the topic taken out of topics.json and its journal."""
    broker = daemons.broker()
    client = Client(broker.endpoint)
    for i in range(4):
        client.send("auto", f"m{i}".encode(), queue_id=i % 2)
    client.close()
    assert broker.stop() == 0
    config = broker.store_dir / "config" / "topics.json"
    data = json.loads(config.read_text())
    data["topicConfigTable"].pop("auto", None)  # in the snapshot or only in the journal
    config.write_text(json.dumps(data))
    journal_of(config).unlink(missing_ok=True)

    broker.start()
    client = Client(broker.endpoint)
    try:
        bodies = []
        for queue_id in (0, 1):
            reply = client.pull("auto", 0, queue_id=queue_id, max_messages=16)
            bodies += [m.body for m in reply.messages]
        assert sorted(bodies) == [b"m0", b"m1", b"m2", b"m3"]
        # in the table again: routes, Kafka Metadata and listings name it (before: absent)
        listed = client.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10).topics
        assert {t.name: t.write_queue_nums for t in listed}.get("auto") == 8
    finally:
        client.close()
    assert "recreated with 8 queues" in broker.log()
    assert broker.stop() == 0
