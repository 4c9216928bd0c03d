"""Kafka transactions across a controller-mode failover, with a real client (confluent-kafka /
librdkafka): etcd, a NameServer and broker-a as two replicas (SYNC_MASTER + SYNC_FLUSH, so
every acknowledged record and transaction-log record is on both), a topic of three
partitions. Committed transactions (one with a consumer group's offsets) and two left open
with records written; the master is killed (SIGKILL) or stopped (SIGTERM); against the
replica once it leads:

- read_committed from the beginning sees exactly the committed records, never an open
  transaction's, and stops below them (the LSO, rebuilt by the new master's replay);
  read_uncommitted sees them too, as Kafka's;
- one open transaction is aborted by its id's next producer (a fencing init), the other by
  its ``transaction.timeout.ms`` counted on the new master; their markers release the LSO,
  so records written after them become visible to read_committed;
- the producer that committed before the failover commits again (same id and epoch), the
  re-initialised one too, and the group's offsets from the committed transaction are there.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from wharf.client import Admin
from wharf.client.errors import NotFoundError
from wharf.client.namesrv import NameServerClient

from tests.cluster.failover_helpers import TTL_MS, Group, running_group
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow

TOPIC = "txf"
PARTITIONS = 3
TIMEOUT_MS = 8000  # the transaction left to time out: its abort comes from the new master


@pytest.fixture
def group(daemons: Daemons, tmp_path: Path) -> Iterator[Group]:
    settings = {"kafkaListen": "127.0.0.1:0", "kafkaGroupInitialRebalanceDelayMs": 0}
    with running_group(tmp_path, daemons=daemons, other=False, settings=settings) as made:
        yield made


async def _create_topic(group: Group, master: BrokerProcess) -> None:
    async with Admin(master.endpoint) as admin:
        await admin.create_topic(TOPIC, queue_nums=PARTITIONS)
    async with NameServerClient(group.ns.endpoint) as namesrv:
        deadline = time.monotonic() + 10
        while True:
            try:
                if "broker-a" in (await namesrv.query_route(TOPIC)).queues:
                    return
            except NotFoundError:  # until the master registers it
                pass
            assert time.monotonic() < deadline, f"{TOPIC} not routed"
            await asyncio.sleep(0.1)


def _bootstrap(group: Group) -> str:
    return ",".join(r.kafka_endpoint for r in group.replicas.values())


def _txn_producer(bootstrap: str, tid: str, timeout_ms: int = 60_000) -> Producer:
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": tid,
        "transaction.timeout.ms": timeout_ms, "linger.ms": 5,
        "topic.metadata.refresh.interval.ms": 1000,
    })  # fmt: skip
    producer.init_transactions(30)
    return producer


def _read(bootstrap: str, isolation: str, until: set[bytes] | None = None,
          wait_s: float = 3.0) -> set[bytes]:  # fmt: skip
    """Every value of the topic from the start (assigned: no group join), for ``wait_s``
    or until ``until`` is all seen."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "isolation.level": isolation,
    })  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: set[bytes] = set()
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and (until is None or not until <= out):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.add(msg.value())
    finally:
        consumer.close()
    return out


def _commit(producer: Producer, name: str, count: int = 3) -> set[bytes]:
    producer.begin_transaction()
    values = {f"{name}-{p}".encode() for p in range(count)}
    for p, value in enumerate(sorted(values)):
        producer.produce(TOPIC, value, partition=p % PARTITIONS)
    producer.commit_transaction(30)
    return values


def _open(producer: Producer, name: str, partitions: list[int]) -> set[bytes]:
    """A transaction begun, its records stored (flushed), left open."""
    producer.begin_transaction()
    values = {f"{name}-{p}".encode() for p in partitions}
    for p in partitions:
        producer.produce(TOPIC, f"{name}-{p}".encode(), partition=p)
    producer.flush(30)
    return values


def _offsets_in_a_transaction(bootstrap: str, producer: Producer) -> set[bytes]:
    """A committed transaction carrying group "eos"'s offsets (send_offsets_to_transaction)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        producer.begin_transaction()
        values = {b"with-offsets-0"}
        producer.produce(TOPIC, b"with-offsets-0", partition=0)
        offsets = [TopicPartition(TOPIC, p, 10 + p) for p in range(PARTITIONS)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    finally:
        consumer.close()
    return values


def _committed_offsets(bootstrap: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos"})
    try:
        parts = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        return [tp.offset for tp in consumer.committed(parts, 30)]
    finally:
        consumer.close()


@pytest.mark.parametrize("stop", ["SIGKILL", "SIGTERM"])
async def test_transactions_survive_a_failover(group: Group, stop: str) -> None:
    old = await group.master()
    await _create_topic(group, old)
    await group.in_sync(old)
    bootstrap = _bootstrap(group)
    app = _txn_producer(bootstrap, "txf-app")
    committed = _commit(app, "a0") | _commit(app, "a1")
    committed |= _offsets_in_a_transaction(bootstrap, app)
    fenced = _txn_producer(bootstrap, "txf-fenced")
    late = _txn_producer(bootstrap, "txf-late", timeout_ms=TIMEOUT_MS)
    open_records = _open(fenced, "fenced", [0, 1]) | _open(late, "late", [2])
    late_began = time.monotonic()

    stopped_at = time.monotonic()
    if stop == "SIGKILL":
        old.kill()
    else:
        os.kill(old.pid, signal.SIGTERM)
    new = await group.master(within_s=TTL_MS / 1000 + 10, other_than=old)
    print(f"{stop}: new master after {time.monotonic() - stopped_at:.1f} s")
    bootstrap = new.kafka_endpoint

    # Records written after the open transactions': above their LSO until they abort.
    plain = Producer({"bootstrap.servers": bootstrap})
    after = {f"after-{p}".encode(): p for p in range(PARTITIONS)}
    for value, p in after.items():
        plain.produce(TOPIC, value, partition=p)
    assert plain.flush(30) == 0

    seen = _read(bootstrap, "read_committed", until=committed, wait_s=15)
    assert committed <= seen, f"committed records missing: {committed - seen}"
    assert not seen & open_records, f"open transactions' records seen: {seen & open_records}"
    # "fenced" (60 s timeout) holds partitions 0 and 1 below its first record.
    assert not seen & {b"after-0", b"after-1"}, "read_committed passed an open transaction"
    everything = committed | open_records | set(after)
    assert _read(bootstrap, "read_uncommitted", until=everything, wait_s=15) == everything

    # The id's next producer fences the old one: its transaction aborts, the LSO moves.
    fenced = _txn_producer(bootstrap, "txf-fenced")
    committed |= _commit(fenced, "c0")
    # The producer from before the failover goes on with the same id and epoch.
    committed |= _commit(app, "a2")
    left = max(0.0, TIMEOUT_MS / 1000 + 3 - (time.monotonic() - late_began))
    want = committed | set(after)
    seen = _read(bootstrap, "read_committed", until=want, wait_s=left + 10)
    assert seen == want, f"missing {want - seen}, unexpected {seen - want}"
    assert _committed_offsets(bootstrap) == [10, 11, 12]
    for producer in (app, fenced, late):
        producer.flush(5)
