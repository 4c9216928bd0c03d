"""A compacted topic through the daemon, with real clients on two protocols: created over
RocketMQ remoting with RocketMQ 5's ``+cleanup.policy=COMPACTION`` (and Kafka's segment.ms /
min.cleanable.dirty.ratio), written by confluent-kafka (keyed records with overwrites and
tombstones; a keyless record refused with INVALID_RECORD), compacted by the broker on its own
(``compactionCheckInterval`` 1 s here, 15 s by default), then read from the beginning: by a
Kafka consumer (the latest value of every key, not every version; offsets unchanged, with
gaps) and by a raw RocketMQ pull at a removed offset (the next kept record, the right next
offset). DeleteRecords (Kafka API 21) then moves the log start offset for both protocols."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode

from tests.broker.remoting.test_server import Client, _pull_fields, _records, _send_fields
from tests.harness import Daemons

pytestmark = pytest.mark.slow

TOPIC = "compacted-t"
KEYS = 10
VERSIONS = 5
ATTRIBUTES = "+cleanup.policy=COMPACTION,+segment.ms=1000,+min.cleanable.dirty.ratio=0.01"


async def _create(endpoint: str, topic: str = TOPIC, attributes: str = ATTRIBUTES) -> None:
    host, _, port = endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        fields = {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": 1, "writeQueueNums": 1,
            "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false",
            "attributes": attributes,
        }  # fmt: skip
        reply = await Client(reader, writer).call(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        assert reply.code == ResponseCode.SUCCESS, reply.remark
    finally:
        writer.close()


async def _send_keyless(endpoint: str) -> Any:
    host, _, port = endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        return await Client(reader, writer).call(
            RequestCode.SEND_MESSAGE, _send_fields(TOPIC, 0), b"no key"
        )
    finally:
        writer.close()


async def _pull(endpoint: str, offset: int) -> Any:
    host, _, port = endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        return await Client(reader, writer).call(
            RequestCode.PULL_MESSAGE, _pull_fields(TOPIC, 0, offset, 4)
        )
    finally:
        writer.close()


def _produce(bootstrap: str) -> list[KafkaError | None]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[KafkaError | None] = []
    for version in range(VERSIONS):
        for key in range(KEYS):
            producer.produce(TOPIC, f"v{version}".encode(), f"k{key}".encode(), partition=0)
    for key in (0, 1):  # tombstones: a null value deletes the key (after delete.retention.ms)
        producer.produce(TOPIC, None, f"k{key}".encode(), partition=0)
    producer.flush(30)
    producer.produce(TOPIC, b"no key", partition=0, on_delivery=lambda err, _: errors.append(err))
    producer.flush(30)
    return errors


def _consume_all(
    bootstrap: str, topic: str = TOPIC
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from the beginning up to the end (PARTITION_EOF: the position reached
    the high watermark); AssertionError if the end is not reached in 30 s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return got
                raise AssertionError(error)
            offset = message.offset()
            assert offset is not None
            got.append((offset, message.key(), message.value()))
    finally:
        consumer.close()
    raise AssertionError(f"{topic}: the end not reached in 30 s, {len(got)} records read")


def _earliest(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-marks"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        return int(low)
    finally:
        consumer.close()


def test_a_compacted_topic_keeps_the_latest_value_per_key(daemons: Daemons) -> None:
    broker = daemons.broker(
        settings={"compactionCheckInterval": 1000},
        extra_args=["--kafka-listen", "127.0.0.1:0", "--remoting-listen", "127.0.0.1:0"],
    )
    asyncio.run(_create(broker.remoting_endpoint))
    errors = _produce(broker.kafka_endpoint)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD, errors[0]
    # (librdkafka reports the code's own text, not the broker's error_message)
    refused = asyncio.run(_send_keyless(broker.remoting_endpoint))
    assert refused.code != ResponseCode.SUCCESS
    assert "Compacted topic cannot accept message without key" in refused.remark, refused.remark

    written = KEYS * VERSIONS + 2
    latest: dict[bytes, bytes | None] = {
        f"k{k}".encode(): f"v{VERSIONS - 1}".encode() for k in range(KEYS)
    }
    latest[b"k0"] = latest[b"k1"] = None
    deadline = time.monotonic() + 60  # segment.ms 1 s + a look every 1 s, on a busy machine
    got = _consume_all(broker.kafka_endpoint)
    while len(got) > KEYS and time.monotonic() < deadline:
        time.sleep(1)
        got = _consume_all(broker.kafka_endpoint)
    assert len(got) == KEYS, f"not compacted within 60 s: {len(got)} records read"
    assert {key: value for _, key, value in got} == latest
    offsets = [offset for offset, _, _ in got]
    assert offsets == sorted(offsets) and offsets[-1] == written - 1  # unchanged, with gaps
    assert offsets[0] > 0

    # Progress in the metrics.
    url = f"http://{broker.metrics_endpoint}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    passes = re.search(r"^wharf_compaction_passes_total (\S+)$", text, re.M)
    assert passes is not None and float(passes.group(1)) >= 1, text[-3000:]
    assert re.search(r"^wharf_compaction_queues 1\.0$", text, re.M)

    # RocketMQ: a pull at a removed offset answers the next kept record and the next offset.
    pulled = asyncio.run(_pull(broker.remoting_endpoint, 0))
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    records = _records(pulled.body)
    assert [r.queue_offset for r in records] == offsets
    assert int(pulled.ext_fields["nextBeginOffset"]) == written

    # DeleteRecords moves the log start offset for Kafka and RocketMQ alike.
    admin = AdminClient({"bootstrap.servers": broker.kafka_endpoint})
    futures = admin.delete_records([TopicPartition(TOPIC, 0, offsets[2])])
    result = futures[TopicPartition(TOPIC, 0, offsets[2])].result(15)
    assert result.low_watermark == offsets[2]
    assert _earliest(broker.kafka_endpoint) == offsets[2]
    below = asyncio.run(_pull(broker.remoting_endpoint, 0))
    assert below.code == ResponseCode.PULL_OFFSET_MOVED
    assert int(below.ext_fields["nextBeginOffset"]) == offsets[2]

    # Every record of a queue removed up to its end (a tombstone past delete.retention.ms 0):
    # an empty batch moves a Kafka consumer to the end, as Kafka's cleaner leaves one.
    gone = "compacted-gone"
    asyncio.run(_create(broker.remoting_endpoint, gone, ATTRIBUTES + ",+delete.retention.ms=0"))
    producer = Producer({"bootstrap.servers": broker.kafka_endpoint})
    producer.produce(gone, b"v", b"k", partition=0)
    producer.produce(gone, None, b"k", partition=0)
    producer.flush(30)
    deadline = time.monotonic() + 60
    while _consume_all(broker.kafka_endpoint, gone) and time.monotonic() < deadline:
        time.sleep(1)
    assert _consume_all(broker.kafka_endpoint, gone) == []  # and the end (offset 2) reached
