"""A log start offset moved on the master (Kafka's DeleteRecords) reaches the replica with the
replicated metadata, durably: the slave's min offset and its reads start at the new offset,
still after a restart of the slave. Before, the move stayed on the master, and a replica
promoted after a failover served the deleted records again.

Both brokers are processes (static mode: brokerRole, haListenPort, haMasterAddress); the
master speaks Kafka, the client is confluent-kafka's AdminClient."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from wharf.client import Admin, PullConsumer

from tests.cluster.test_replication import SMALL, _eventually
from tests.harness import BrokerProcess, Daemons

TOPIC = "purged"
KAFKA = ["--kafka-listen", "127.0.0.1:0"]


def _pair(daemons: Daemons, root: Path, role: str) -> tuple[BrokerProcess, BrokerProcess]:
    master = daemons.broker(
        root / "master",
        {**SMALL, "brokerRole": role, "haListenPort": 0},
        extra_args=KAFKA,
    )
    slave = daemons.broker(
        root / "slave",
        {**SMALL, "brokerRole": "SLAVE", "brokerId": 1, "haMasterAddress": master.ha_endpoint},
    )
    return master, slave


def _produce_and_delete_blocking(bootstrap: str, count: int, before: int) -> int:
    """``count`` records to partition 0 of a new topic, then DeleteRecords below ``before``:
    the low watermark answered."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(TOPIC, b"r%d" % i, partition=0)
    assert producer.flush(15) == 0
    partition = TopicPartition(TOPIC, 0, before)
    deleted = admin.delete_records([partition])[partition].result(15)
    return int(deleted.low_watermark)


async def _min_offset(endpoint: str) -> int:
    async with Admin(endpoint) as admin:
        reply = await admin.queue_offsets(TOPIC)
    (row,) = [r for r in reply.queues if r.queue_id == 0]
    return int(row.min_offset)


async def _first_read(endpoint: str) -> tuple[int, bytes]:
    """The first record a pull from offset 0 gets (moved on to the log start)."""
    async with PullConsumer(endpoint, "reader") as consumer:
        queue = next(q for q in await consumer.queues(TOPIC) if q.queue_id == 0)
        offset = 0
        for _ in range(3):
            result = await consumer.pull(queue, offset, max_messages=10)
            if result.messages:
                first = result.messages[0]
                return first.queue_offset, first.body
            offset = result.next_begin_offset
    raise AssertionError("no record read")


async def _check_slave(slave: BrokerProcess, start: int) -> None:
    async def moved() -> bool:
        return await _min_offset(slave.endpoint) == start

    await _eventually(moved)
    assert await _first_read(slave.endpoint) == (start, b"r%d" % start)


async def test_delete_records_on_the_master_moves_the_slave_s_log_start_durably(
    daemons: Daemons, tmp_path: Path
) -> None:
    master, slave = _pair(daemons, tmp_path, "SYNC_MASTER")
    low = await asyncio.to_thread(_produce_and_delete_blocking, master.kafka_endpoint, 10, 6)
    assert low == 6
    assert await _min_offset(master.endpoint) == 6
    # SYNC_MASTER: answered once the slave took it; it is written there right after
    await _check_slave(slave, 6)
    (starts,) = (tmp_path / "slave").rglob("logStartOffsets.json")  # written, then applied
    assert json.loads(starts.read_text()) == {TOPIC: {"0": 6}}
    slave.stop()
    slave.start()  # from its own file (and the master's snapshot again)
    assert await _min_offset(slave.endpoint) == 6
    master.stop()  # the master gone: the slave alone still starts at 6
    slave.stop()
    slave.start()
    assert await _min_offset(slave.endpoint) == 6
    assert await _first_read(slave.endpoint) == (6, b"r6")
