"""Kafka transactions over two broker groups whose listeners are all TLS-only (``tlsEnable``
without ``tlsListen``): the coordinator's WriteTxnMarkers and the partition leader's
verification reach the other group's Kafka listener over TLS (txn/link.py), trusting
``namesrvTlsCaFile``. confluent-kafka (SSL, the certificate verified) commits and aborts a
transaction over partitions of both groups; read_committed on the other group sees the
committed records only, and the coordinator ends in CompleteCommit. Dialled in plaintext,
the markers never land: the commit stays PrepareCommit and ``commit_transaction`` times out.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from wharf.broker.frontends.kafka.cluster import coordinator_of
from wharf.broker.kit.tls.certs import build_development_pair
from wharf.client.admin import Admin
from wharf.client.channel import TlsConfig
from wharf.client.namesrv import NameServerClient

from tests.broker.kafka.kafka_helpers import kafka_groups
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow

TOPIC = "orders"
PARTITIONS = 4  # 2 queues on each group: partitions 0-1 on broker-a, 2-3 on broker-b
NAMES = ["broker-a", "broker-b"]


def _ssl(cert: Path) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(cert)}


def _tid() -> str:
    """A transactional id broker-a coordinates, so broker-b's markers cross the link."""
    while True:
        tid = f"tls-{uuid.uuid4().hex[:8]}"
        if coordinator_of(tid, NAMES) == "broker-a":
            return tid


@pytest.fixture
def tls_groups(daemons: Daemons, tmp_path: Path) -> tuple[dict[str, BrokerProcess], Path]:
    cert, key = tmp_path / "broker.crt", tmp_path / "broker.key"
    pem, key_pem = build_development_pair(["127.0.0.1", "localhost"])
    cert.write_bytes(pem)
    key.write_bytes(key_pem)
    ns = daemons.namesrv(
        tmp_path / "ns", {"tlsEnable": True, "tlsCertPath": str(cert), "tlsKeyPath": str(key)}
    )
    brokers = kafka_groups(
        daemons,
        tmp_path,
        ns.endpoint,
        kafkaGroupInitialRebalanceDelayMs=0,
        tlsEnable=True,
        tlsCertPath=str(cert),
        tlsKeyPath=str(key),
        namesrvTlsEnable=True,
        namesrvTlsCaFile=str(cert),
    )

    async def create() -> None:
        tls = TlsConfig(ca_pem=pem)
        async with NameServerClient(ns.endpoint, tls=tls) as names:
            deadline = time.monotonic() + 15
            while sorted(b.broker_name for b in await names.cluster_info()) != NAMES:
                assert time.monotonic() < deadline, "the two groups never registered"
                await asyncio.sleep(0.1)
        async with Admin(namesrv=ns.endpoint, tls=tls, namesrv_tls=True) as admin:
            await admin.create_topic(TOPIC, queue_nums=2)

    asyncio.run(create())
    return brokers, cert


def _partitions_seen(bootstrap: str, cert: Path) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "meta", **_ssl(cert)})
    try:
        topic = consumer.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        return 0 if topic is None or topic.error is not None else len(topic.partitions)
    finally:
        consumer.close()


def _read_committed(bootstrap: str, cert: Path, expect: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "isolation.level": "read_committed", **_ssl(cert),
    })  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline and len(out) < expect:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.partition(), msg.value()))
        end = time.monotonic() + 1.5  # anything more that would come (an aborted record)
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.partition(), msg.value()))
    finally:
        consumer.close()
    return out


def test_markers_cross_tls_only_listeners(tls_groups) -> None:  # type: ignore[no-untyped-def]
    brokers, cert = tls_groups
    a, b = brokers["broker-a"], brokers["broker-b"]
    deadline = time.monotonic() + 15
    while _partitions_seen(b.kafka_endpoint, cert) != PARTITIONS:
        assert time.monotonic() < deadline, "the topic's 4 partitions never showed"
        time.sleep(0.2)
    producer = Producer({
        "bootstrap.servers": a.kafka_endpoint, "transactional.id": _tid(),
        "transaction.timeout.ms": 60_000, "linger.ms": 5, **_ssl(cert),
    })  # fmt: skip
    producer.init_transactions(20)
    committed: set[tuple[int, bytes]] = set()
    for tag, commit in (("c1", True), ("a2", False), ("c3", True)):
        producer.begin_transaction()
        values = {(p, f"{tag}-p{p}".encode()) for p in range(PARTITIONS)}
        for p, value in values:
            producer.produce(TOPIC, value=value, partition=p)
        producer.flush(20)
        if commit:
            producer.commit_transaction(20)  # plaintext markers: KafkaException (timed out)
            committed |= values
        else:
            producer.abort_transaction(20)
    got = _read_committed(b.kafka_endpoint, cert, len(committed))
    assert sorted(got) == sorted(committed)
