"""Kafka transactions over two broker groups (a ``wharf-namesrv``, broker-a and broker-b of
cluster C, masters only, each a Kafka leader for its own queues): the topic ``orders`` has 2
queues on each group, partitions 0-1 on broker-a, 2-3 on broker-b; the transactional id is
one broker-a coordinates, so broker-b's partitions get their markers by WriteTxnMarkers.

- confluent-kafka's transactional producer writes to all 4 partitions, commits and aborts
  interleaved; read_committed from both groups sees the committed records only,
  read_uncommitted all of them.
- broker-b is killed (kill -9) with the transaction's records stored, then the commit
  decided (PREPARE_COMMIT, broker-b's markers pending), then broker-a killed -9 in that
  state; both started again: the replayed coordinator sends the markers, the transaction is
  CompleteCommit, read_committed shows it whole on both groups and an aborted one nowhere.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from wharf.broker.frontends.kafka.cluster import coordinator_of, master_node_id
from wharf.client.admin import Admin

from tests.broker.kafka.kafka_helpers import KafkaClient
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow


def _master(brokers: dict[str, BrokerProcess], name: str) -> int:
    """The node id of group ``name``'s master (its Kafka address's: cluster.py)."""
    return master_node_id(name, brokers[name].kafka_endpoint)


TOPIC = "orders"
PARTITIONS = 4
SILENCE_MS = 2000


def _tid() -> str:
    """A transactional id broker-a coordinates while both groups live."""
    while True:
        tid = f"tx-{uuid.uuid4().hex[:8]}"
        if coordinator_of(tid, ["broker-a", "broker-b"]) == "broker-a":
            return tid


@pytest.fixture
def groups(daemons: Daemons, tmp_path: Path) -> dict[str, BrokerProcess]:
    ns = daemons.namesrv(tmp_path / "ns", settings={"brokerNotActiveTimeoutMillis": SILENCE_MS})
    brokers = {
        name: daemons.broker(
            tmp_path / name,
            settings={
                "namesrvAddr": ns.endpoint,
                "brokerClusterName": "C",
                "brokerName": name,
                "autoCreateTopicEnable": False,
                "brokerHeartbeatInterval": 200,
                "kafkaListen": "127.0.0.1:0",
                "flushDiskType": "SYNC_FLUSH",
            },
        )
        for name in ("broker-a", "broker-b")
    }
    ns.wait_registered(list(brokers.values()))
    asyncio.run(_create_topic(ns.endpoint, brokers))
    return brokers


async def _leaders(broker: BrokerProcess) -> dict[int, int]:
    host, _, port = broker.kafka_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    client = KafkaClient(reader, writer)
    try:
        meta = await client.call(3, 1, {"topics": [{"name": TOPIC}]})
    finally:
        await client.close()
    return {p["partition_index"]: p["leader_id"] for p in meta["topics"][0]["partitions"]}


async def _create_topic(ns: str, brokers: dict[str, BrokerProcess]) -> None:
    async with Admin(namesrv=ns) as admin:
        await admin.create_topic(TOPIC, queue_nums=2)
    a, b = (
        _master(brokers, "broker-a"),
        _master(brokers, "broker-b"),
    )
    want = {0: a, 1: a, 2: b, 3: b}
    deadline = time.monotonic() + 15
    while [await _leaders(broker) for broker in brokers.values()] != [want, want]:
        assert time.monotonic() < deadline, "the two groups' partitions never showed"
        await asyncio.sleep(0.2)


async def _describe(broker: BrokerProcess, tid: str) -> dict:
    host, _, port = broker.kafka_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    client = KafkaClient(reader, writer)
    try:
        reply = await client.call(65, 0, {"transactional_ids": [tid]})
    finally:
        await client.close()
    return dict(reply["transaction_states"][0])


def _producer(bootstrap: str, tid: str) -> Producer:
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": tid,
        "transaction.timeout.ms": 60_000, "linger.ms": 5,
    })  # fmt: skip
    producer.init_transactions(20)
    return producer


def _round(producer: Producer, tag: str, commit: bool | None) -> set[bytes]:
    """One transaction writing ``tag-p<n>`` to every partition; committed, aborted, or
    (None) left open after a flush. Its values."""
    producer.begin_transaction()
    values = set()
    for p in range(PARTITIONS):
        value = f"{tag}-p{p}".encode()
        producer.produce(TOPIC, value=value, partition=p)
        values.add(value)
    producer.flush(20)
    if commit is True:
        producer.commit_transaction(20)
    elif commit is False:
        producer.abort_transaction(20)
    return values


def _read(bootstrap: str, isolation: str, expect: int, wait_s: float = 10.0) -> list[tuple]:
    """Every record of the 4 partitions as (partition, value), from the start."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "isolation.level": isolation,
    })  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: list[tuple] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and len(out) < expect:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.partition(), msg.value()))
        end = time.monotonic() + 1.0  # anything more that would come
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.partition(), msg.value()))
    finally:
        consumer.close()
    return out


def _by_partition(values: set[bytes]) -> set[tuple[int, bytes]]:
    return {(int(v.rsplit(b"-p", 1)[1]), v) for v in values}


def test_commit_and_abort_interleaved_across_two_groups(groups) -> None:  # type: ignore[no-untyped-def]
    a, b = groups["broker-a"], groups["broker-b"]
    producer = _producer(a.kafka_endpoint, _tid())
    committed = _round(producer, "c1", True)
    aborted = _round(producer, "a2", False)
    committed |= _round(producer, "c3", True)
    aborted |= _round(producer, "a4", False)
    open_values = _round(producer, "o5", None)  # open: below the LSO on both groups
    for bootstrap in (a.kafka_endpoint, b.kafka_endpoint):
        got = _read(bootstrap, "read_committed", len(committed))
        assert sorted(got) == sorted(_by_partition(committed)), got
        got = _read(bootstrap, "read_uncommitted", len(committed | aborted | open_values))
        assert set(got) == _by_partition(committed | aborted | open_values)
        assert len(got) == 5 * PARTITIONS
    producer.commit_transaction(20)
    committed |= open_values
    got = _read(b.kafka_endpoint, "read_committed", len(committed))
    assert sorted(got) == sorted(_by_partition(committed))


def test_coordinator_killed_between_prepare_and_complete(groups) -> None:  # type: ignore[no-untyped-def]
    a, b = groups["broker-a"], groups["broker-b"]
    tid = _tid()
    producer = _producer(a.kafka_endpoint, tid)
    committed = _round(producer, "c1", True)
    aborted = _round(producer, "a2", False)
    pending = _round(producer, "c3", None)  # stored on both groups, not ended
    b.kill()  # broker-b's markers cannot be written now
    with pytest.raises(KafkaException):
        producer.commit_transaction(8)  # decided: PREPARE_COMMIT, broker-b's markers pending
    state = asyncio.run(_describe(a, tid))
    assert state["transaction_state"] == "PrepareCommit", state
    a.kill()  # kill -9 between PREPARE and COMPLETE
    b.start()
    a.start()
    committed |= pending
    deadline = time.monotonic() + 30
    while (state := asyncio.run(_describe(a, tid)))["transaction_state"] != "CompleteCommit":
        assert time.monotonic() < deadline, state
        time.sleep(0.5)
    for bootstrap in (a.kafka_endpoint, b.kafka_endpoint):
        got = _read(bootstrap, "read_committed", len(committed))
        assert sorted(got) == sorted(_by_partition(committed)), got
    got = _read(b.kafka_endpoint, "read_uncommitted", len(committed | aborted))
    assert set(got) == _by_partition(committed | aborted)
