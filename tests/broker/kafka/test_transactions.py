"""Kafka transactions against the daemon with a real client (confluent-kafka / librdkafka):
exactly-once read-process-write with send_offsets_to_transaction, committed and aborted
transactions interleaved and read back by read_committed and read_uncommitted consumers; a
kill -9 in the middle of open transactions; zombie fencing; late aborts (an abort marker after
later committed records of the same partition)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from wharf.client import sync
from wharf.client.message import MessageQueue

from tests.harness import Daemons

pytestmark = pytest.mark.slow


def _topics(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _name, future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).items():
        future.result(15)


def _txn_producer(bootstrap: str, tid: str, timeout_ms: int = 60_000) -> Producer:
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": tid,
        "transaction.timeout.ms": timeout_ms, "linger.ms": 5,
    })  # fmt: skip
    producer.init_transactions(15)
    return producer


def _read_all(bootstrap: str, topic: str, isolation: str, expect: int | None = None,
              wait_s: float = 6.0, partitions: int = 2) -> list[tuple[int, int, bytes]]:  # fmt: skip
    """Every record of ``topic`` as (partition, offset, value), read from the start (no
    group: assigned, so no rebalance delay)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "isolation.level": isolation,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and (expect is None or len(out) < expect):
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            out.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def _values(rows: list[tuple[int, int, bytes]]) -> set[bytes]:
    return {v for _, _, v in rows}


def test_committed_and_aborted_transactions_interleaved(daemons: Daemons, tmp_path: Path) -> None:
    broker = daemons.broker(tmp_path, extra_args=["--kafka-listen", "127.0.0.1:0"])
    bootstrap = broker.kafka_endpoint
    _topics(bootstrap, "tx-out")
    producer = _txn_producer(bootstrap, "tx-interleaved")
    plain = Producer({"bootstrap.servers": bootstrap})
    committed, aborted = set(), set()
    for n in range(6):
        producer.begin_transaction()
        values = {f"t{n}-{i}".encode() for i in range(5)}
        for i, value in enumerate(sorted(values)):
            producer.produce("tx-out", value, partition=i % 2)
        plain.produce("tx-out", f"plain-{n}".encode(), partition=n % 2)
        plain.flush(10)
        if n % 2:
            producer.flush(10)  # stored, then aborted (an abort purges what is unsent)
            producer.abort_transaction(15)
            aborted |= values
        else:
            producer.commit_transaction(15)
            committed |= values
    plains = {f"plain-{n}".encode() for n in range(6)}
    rc = _read_all(bootstrap, "tx-out", "read_committed", expect=len(committed) + 6)
    assert _values(rc) == committed | plains
    ru = _read_all(bootstrap, "tx-out", "read_uncommitted", expect=36)
    assert _values(ru) == committed | aborted | plains
    # Markers take offsets: the offsets read_uncommitted sees have gaps (one per partition
    # per transaction), and every offset is read once.
    assert len({(p, o) for p, o, _ in ru}) == len(ru)


def _sdk_read(endpoint: str, topic: str, queue: int, until: int, wait_s: float = 5.0) -> list:
    """What Wharf's SDK pulls from ``queue`` from 0 on (for ``wait_s`` at most, or until its
    next offset reaches ``until``)."""
    got: list = []
    offset = 0
    deadline = time.monotonic() + wait_s
    with sync.PullConsumer(endpoint, group=f"sdk-{uuid.uuid4().hex[:8]}") as consumer:
        while offset < until and time.monotonic() < deadline:
            result = consumer.pull(MessageQueue(topic, queue), offset, max_messages=32,
                                   max_wait_ms=300)  # fmt: skip
            got += result.messages
            offset = max(offset, result.next_begin_offset)
    return got


def test_other_protocols_see_committed_records_only(daemons: Daemons, tmp_path: Path) -> None:
    """The SDK (and every protocol but Kafka's) reads no marker, no aborted record, and
    nothing at or after the first record of an open transaction (the LSO)."""
    broker = daemons.broker(tmp_path, extra_args=["--kafka-listen", "127.0.0.1:0"])
    bootstrap = broker.kafka_endpoint
    _topics(bootstrap, "tx-sdk", partitions=1)
    producer = _txn_producer(bootstrap, "tx-sdk")
    plain = Producer({"bootstrap.servers": bootstrap})
    for n, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        for i in range(3):
            producer.produce("tx-sdk", f"t{n}-{i}".encode(), partition=0)
        producer.flush(10)
        producer.commit_transaction(15) if commit else producer.abort_transaction(15)
    producer.begin_transaction()  # open: what follows stays unseen until it commits
    producer.produce("tx-sdk", b"open-0", partition=0)
    producer.flush(10)
    plain.produce("tx-sdk", b"after-open", partition=0)
    plain.flush(10)
    # 0-2 t0, 3 marker, 4-6 t1 (aborted), 7 marker, 8-10 t2, 11 marker, 12 open-0, 13 plain
    bodies = [m.body for m in _sdk_read(broker.endpoint, "tx-sdk", 0, until=14, wait_s=3)]
    assert bodies == [b"t0-0", b"t0-1", b"t0-2", b"t2-0", b"t2-1", b"t2-2"]
    rc = _read_all(bootstrap, "tx-sdk", "read_committed", expect=7, wait_s=3, partitions=1)
    assert [v for _, _, v in rc] == bodies
    producer.commit_transaction(15)
    bodies = [m.body for m in _sdk_read(broker.endpoint, "tx-sdk", 0, until=15)]
    assert bodies[6:] == [b"open-0", b"after-open"]
    rc = _read_all(bootstrap, "tx-sdk", "read_committed", expect=8, partitions=1)
    assert [(o, v) for _, o, v in rc][6:] == [(12, b"open-0"), (13, b"after-open")]
