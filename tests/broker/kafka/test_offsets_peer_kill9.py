"""A Kafka commit of a partition ANOTHER broker group holds survives a kill -9 of that group's
master right after the answer (confluent-kafka; a NameServer and two broker groups as
processes, ASYNC_FLUSH). The coordinator (broker-a) forwards the commit to broker-b's master
as wharf.v1 UpdateConsumerOffset with ``durable`` (``broker/cluster/peer_offsets.py``), which
that master answers once the offset is in its offsets file. Before, it answered once in memory
and the file was written by the next periodic round (flushConsumerOffsetInterval, 5 s): the
kill took the acknowledged commit back and OffsetFetch answered -1001 (no offset).

The durable form is refused by a replica (a SLAVE's table is its master's copy, overwritten by
the next snapshot: an answer there is void), while the plain form the RocketMQ clients send
keeps RocketMQ's behaviour (in memory, taken by a replica too)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.broker.kafka.kafka_helpers import kafka_groups
from tests.broker.kafka.test_cluster import TOPIC, _client, _create_topic, _master
from tests.harness import BrokerProcess, Daemons, free_port

pytestmark = pytest.mark.slow

SILENCE_MS = 2000
ACKED_WITHIN_S = 20.0


def _cluster(daemons: Daemons, tmp_path: Path) -> tuple[str, dict[str, BrokerProcess]]:
    ns = daemons.namesrv(tmp_path / "ns", settings={"brokerNotActiveTimeoutMillis": SILENCE_MS})
    brokers = kafka_groups(daemons, tmp_path, ns.endpoint, flushDiskType="ASYNC_FLUSH")
    ns.wait_registered(list(brokers.values()))
    return ns.endpoint, brokers


async def _group_coordinated_by(broker: BrokerProcess, node: int) -> str:
    """A group name whose coordinator is ``node`` (groups spread over masters by name)."""
    client = await _client(broker)
    try:
        for i in range(64):
            found = await client.call(10, 1, {"key": f"peer-kill9-{i}", "key_type": 0})
            if found["error_code"] == 0 and found["node_id"] == node:
                return f"peer-kill9-{i}"
    finally:
        await client.close()
    raise AssertionError(f"no group of 64 is coordinated by node {node}")


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False})  # fmt: skip


def _commit_acknowledged(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    """Commit (a simple consumer: generation -1) until every partition is acknowledged: a
    refusal (broker-b restarting, or not yet in the coordinator's routes) is retriable."""
    deadline = time.monotonic() + ACKED_WITHIN_S
    consumer = _consumer(bootstrap, group)
    try:
        while True:
            try:
                answered = consumer.commit(
                    offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                    asynchronous=False,
                )
                if answered is not None and all(tp.error is None for tp in answered):
                    return
            except KafkaException:
                pass
            assert time.monotonic() < deadline, f"commit of {offsets} never acknowledged"
            time.sleep(0.2)
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, partitions: list[int]) -> dict[int, int]:
    """OffsetFetch through the coordinator, retried while broker-b is not reachable yet."""
    deadline = time.monotonic() + ACKED_WITHIN_S
    consumer = _consumer(bootstrap, group)
    try:
        while True:
            try:
                got = consumer.committed([TopicPartition(TOPIC, p) for p in partitions], 10)
                if all(tp.error is None for tp in got):
                    return {tp.partition: tp.offset for tp in got}
            except KafkaException:
                pass
            assert time.monotonic() < deadline, "OffsetFetch never answered"
            time.sleep(0.2)
    finally:
        consumer.close()


async def test_a_commit_of_another_groups_partition_survives_a_kill_9_of_its_master(
    daemons: Daemons, tmp_path: Path
) -> None:
    ns, brokers = _cluster(daemons, tmp_path)
    await _create_topic(ns, brokers)  # partitions 0-1 broker-a's queues, 2-3 broker-b's
    a, b = brokers["broker-a"], brokers["broker-b"]
    group = await _group_coordinated_by(a, _master(brokers, "broker-a"))
    for round_ in range(3):  # the first writes the file's snapshot, the next its journal
        wanted = {0: 5 + round_, 2: 11 + 10 * round_, 3: 12 + 10 * round_}
        await asyncio.to_thread(_commit_acknowledged, a.kafka_endpoint, group, wanted)
        b.kill()  # SIGKILL right after the answer: well inside the 5 s periodic interval
        b.start()
        got = await asyncio.to_thread(_committed, a.kafka_endpoint, group, [0, 2, 3])
        assert got == wanted, f"round {round_}"
    # and they are in broker-b's own table (its progress shows them), not the coordinator's
    query = messaging_pb2.QueryConsumerOffsetRequest(consumer_group=group, topic=TOPIC)
    with grpc.insecure_channel(b.endpoint) as channel:  # broker-b's queue 0: partition 2
        assert (
            messaging_pb2_grpc.MessagingServiceStub(channel)
            .QueryConsumerOffset(query, timeout=5)
            .offset
            == wanted[2]
        )


def test_the_durable_form_is_refused_by_a_replica(daemons: Daemons, tmp_path: Path) -> None:
    master = daemons.broker(
        tmp_path / "master", {"brokerRole": "ASYNC_MASTER", "haListenPort": free_port()}
    )
    slave = daemons.broker(
        tmp_path / "slave",
        {"brokerRole": "SLAVE", "brokerId": 1, "haMasterAddress": master.ha_endpoint},
    )

    def update(broker: BrokerProcess, offset: int, durable: bool) -> None:
        with grpc.insecure_channel(broker.endpoint) as channel:
            messaging_pb2_grpc.MessagingServiceStub(channel).UpdateConsumerOffset(
                messaging_pb2.UpdateConsumerOffsetRequest(
                    consumer_group="g", topic="t", queue_id=0, offset=offset, durable=durable
                ),
                timeout=10,
            )

    def committed(broker: BrokerProcess) -> int:
        with grpc.insecure_channel(broker.endpoint) as channel:
            return int(messaging_pb2_grpc.MessagingServiceStub(channel).QueryConsumerOffset(
                messaging_pb2.QueryConsumerOffsetRequest(consumer_group="g", topic="t"),
                timeout=10,
            ).offset)  # fmt: skip

    with pytest.raises(grpc.RpcError) as refused:
        update(slave, 7, durable=True)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "SLAVE" in (refused.value.details() or "")
    assert committed(slave) == -1  # nothing taken
    update(slave, 3, durable=False)  # RocketMQ's plain form: a replica takes it
    assert committed(slave) == 3
    update(master, 9, durable=True)  # the master takes the durable form, in its file now
    master.kill()
    master.start()
    assert committed(master) == 9
