"""acks=all on SYNC_FLUSH survives kill -9 (issue 65), with a real client: confluent-kafka
(librdkafka) produces keyed records with acks=all to the daemon, the broker is SIGKILLed
between two rounds of sends, restarted on the same store, and every record librdkafka saw
acknowledged is read back at the partition and offset it was acknowledged at, key and value
intact. Acknowledgement under SYNC_FLUSH waits for the group commit's fdatasync, and Fetch's
high watermark is the committed offset: what a consumer reads is what survives."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import Daemons

pytestmark = pytest.mark.slow

TOPIC = "kill9"
PARTITIONS = 2


def _produce(bootstrap: str, start: int, count: int) -> dict[tuple[int, int], bytes]:
    """(partition, offset) -> value of every record acknowledged."""
    acked: dict[tuple[int, int], bytes] = {}

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for i in range(start, start + count):
        producer.produce(TOPIC, key=f"k{i}".encode(), value=f"v{i}".encode(),
                         partition=i % PARTITIONS, on_delivery=delivered)  # fmt: skip
        producer.poll(0)
    assert producer.flush(30) == 0, "records left unacknowledged"
    return acked


def _read_all(bootstrap: str, expected: int) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kill9-reader",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    deadline = time.monotonic() + 30
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
    finally:
        consumer.close()
    return got


def test_acks_all_on_sync_flush_loses_nothing_across_kill_9(
    daemons: Daemons, tmp_path: Path
) -> None:
    broker = daemons.broker(
        tmp_path, settings={"flushDiskType": "SYNC_FLUSH"},
        extra_args=["--kafka-listen", "127.0.0.1:0"],
    )  # fmt: skip
    admin = AdminClient({"bootstrap.servers": broker.kafka_endpoint})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(15)
    acked = _produce(broker.kafka_endpoint, 0, 200)
    broker.kill()  # SIGKILL: no flush, no clean shutdown
    broker.start()
    acked.update(_produce(broker.kafka_endpoint, 200, 100))
    broker.kill()
    broker.start()
    assert len(acked) == 300
    got = _read_all(broker.kafka_endpoint, len(acked))
    assert len(got) >= 300, f"read {len(got)} records after the restarts"
    missing = {k: v for k, v in acked.items() if got.get(k, (b"", b""))[1] != v}
    assert not missing, f"{len(missing)} acknowledged records lost or moved: {list(missing)[:5]}"
    for (_, _), (key, value) in got.items():
        assert key == b"k" + value[1:]  # keys kept with their values
