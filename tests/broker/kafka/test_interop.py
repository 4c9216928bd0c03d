"""Real Kafka clients (aiokafka 0.14 in the test's loop, kafka-python 3.0.12 in a thread)
against the Kafka front end of an in-process broker: keyed records with headers (binary
values), tombstones, group consumption with commits, offsets shared with Wharf's offset table,
and a record produced over Kafka read back by a Wharf read with its key as KEYS."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.structs import TopicPartition

from tests.broker.kafka.kafka_helpers import start_kafka
from tests.inproc import InProcFactory

with warnings.catch_warnings():  # kafka-python 3 reads its schemas with a deprecated call
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer


async def _consume(consumer: AIOKafkaConsumer, count: int) -> list:
    got: list = []
    async with asyncio.timeout(20):
        while len(got) < count:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.extend(records)
    return got


async def test_aiokafka_produce_consume_commit(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    await admin.create_topics([NewTopic("orders", num_partitions=2, replication_factor=1)])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address)
    await producer.start()
    sent = []
    for i in range(10):
        meta = await producer.send_and_wait(
            "orders",
            f"v{i}".encode(),
            key=f"k{i}".encode(),
            partition=i % 2,
            headers=[("text", b"plain"), ("bin", bytes([0xFF, 0, i]))],
        )
        sent.append((meta.partition, meta.offset))
    tomb = await producer.send_and_wait("orders", None, key=b"gone", partition=0)
    empty = await producer.send_and_wait("orders", b"", key=b"blank", partition=1)
    await producer.stop()
    # offsets are dense per partition, from 0
    assert sorted(o for p, o in sent if p == 0) == [0, 1, 2, 3, 4]
    assert (tomb.partition, tomb.offset, empty.offset) == (0, 5, 5)

    consumer = AIOKafkaConsumer(
        "orders",
        bootstrap_servers=kafka.address,
        group_id="billing",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    got = await _consume(consumer, 12)
    await consumer.commit()
    await consumer.stop()
    by_key = {m.key: m for m in got}
    assert by_key[b"k3"].value == b"v3"
    assert list(by_key[b"k3"].headers) == [("text", b"plain"), ("bin", bytes([0xFF, 0, 3]))]
    assert by_key[b"gone"].value is None
    assert by_key[b"blank"].value == b""
    # the group's commits are the broker's offsets (wharf group progress, lag metric)
    offsets = kafka.controller.ctx.offsets
    assert offsets.query("billing", "orders", 0) == 6
    assert offsets.query("billing", "orders", 1) == 6
    # a Wharf read sees the key as KEYS and the text header as a property
    message = kafka.controller.ctx.store.get_messages("orders", 1, 0, 1).messages[0]
    assert message.keys == ["k1"]
    assert message.properties["UNIQ_KEY"]
    assert message.body == b"v1"
    # query by key (the store's key index) finds a Kafka record by its key
    found = kafka.controller.ctx.store.query_messages("orders", "k7", 5, 0, 2**62)
    assert [m.body for m in found] == [b"v7"]
    await kafka.close()


async def test_aiokafka_group_resumes_from_committed(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address)
    await producer.start()
    for i in range(6):
        await producer.send_and_wait("resume", f"a{i}".encode(), partition=0)
    consumer = AIOKafkaConsumer(
        "resume", bootstrap_servers=kafka.address, group_id="r", auto_offset_reset="earliest"
    )
    await consumer.start()
    assert len(await _consume(consumer, 6)) == 6
    await consumer.commit()
    await consumer.stop()
    for i in range(3):
        await producer.send_and_wait("resume", f"b{i}".encode(), partition=0)
    await producer.stop()
    again = AIOKafkaConsumer(
        "resume", bootstrap_servers=kafka.address, group_id="r", auto_offset_reset="earliest"
    )
    await again.start()
    got = await _consume(again, 3)
    assert [m.value for m in got] == [b"b0", b"b1", b"b2"]
    assert await again.committed(TopicPartition("resume", 0)) == 6
    await again.stop()
    await kafka.close()


async def test_kafka_python_idempotent_producer_and_group(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    address = kafka.address

    def work() -> tuple[list[int], list]:
        # kafka-python 3 is idempotent by default: InitProducerId (flexible v2) + sequences
        producer = KafkaProducer(bootstrap_servers=address, enable_idempotence=True)
        futures = [
            producer.send("kp", key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
            for i in range(20)
        ]
        offsets = [f.get(timeout=10).offset for f in futures]
        producer.close()
        consumer = KafkaConsumer(
            "kp",
            bootstrap_servers=address,
            group_id="gkp",
            auto_offset_reset="earliest",
            consumer_timeout_ms=15000,
        )
        got = []
        for message in consumer:
            got.append(message)
            if len(got) == 20:
                break
        consumer.commit()
        consumer.close()
        return offsets, got

    offsets, got = await asyncio.to_thread(work)
    assert offsets == list(range(20))
    assert [m.value for m in got] == [f"v{i}".encode() for i in range(20)]
    assert kafka.controller.ctx.offsets.query("gkp", "kp", 0) == 20
    await kafka.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_aiokafka_compressed_batches(inproc_broker: InProcFactory, codec: str) -> None:
    kafka = await start_kafka(inproc_broker)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.address, compression_type=codec, linger_ms=20
    )
    await producer.start()
    futures = [
        await producer.send("zipped", b"payload-%d" % i * 10, key=b"k%d" % i, partition=0)
        for i in range(50)
    ]
    offsets = [(await f).offset for f in futures]
    await producer.stop()
    assert offsets == list(range(50))  # one stored message per record, compressed or not
    await kafka.controller.ctx.store.wait_dispatched(5)  # acks precede dispatch
    message = kafka.controller.ctx.store.get_messages("zipped", 0, 49, 1).messages[0]
    assert message.body == b"payload-49" * 10 and message.keys == ["k49"]
    await kafka.close()


async def test_admin_create_describe_delete(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    await admin.create_topics([NewTopic("made", num_partitions=3, replication_factor=1)])
    topic = kafka.controller.ctx.topics.get("made")
    assert topic is not None and (topic.read_queue_nums, topic.write_queue_nums) == (3, 3)
    again = await admin.create_topics([NewTopic("made", num_partitions=3, replication_factor=1)])
    assert [e[:2] for e in again.topic_errors] == [("made", TopicAlreadyExistsError.errno)]
    (described,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "made")])
    configs = {c[0]: c[1] for c in described.resources[0][4]}
    store = kafka.controller.ctx.store.config
    assert configs["retention.ms"] == str(store.file_reserved_time * 3_600_000)
    assert configs["max.message.bytes"] == str(store.max_message_size)
    await admin.delete_topics(["made"])
    assert kafka.controller.ctx.topics.get("made") is None
    await admin.close()
    await kafka.close()


async def test_two_aiokafka_members_split_the_partitions(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    kafka.controller.ctx.topics.create("split", 2, 2, 6, {})

    def member() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            "split",
            bootstrap_servers=kafka.address,
            group_id="pair",
            auto_offset_reset="earliest",
            heartbeat_interval_ms=200,
            session_timeout_ms=6000,
        )

    first, second = member(), member()
    await first.start()
    async with asyncio.timeout(15):
        while len(first.assignment()) != 2:
            await first.getmany(timeout_ms=100)
    await second.start()
    async with asyncio.timeout(20):
        while len(first.assignment()) != 1 or len(second.assignment()) != 1:
            await asyncio.gather(first.getmany(timeout_ms=100), second.getmany(timeout_ms=100))
    assert first.assignment() | second.assignment() == {
        TopicPartition("split", 0),
        TopicPartition("split", 1),
    }
    await second.stop()  # LeaveGroup: the first takes both partitions again
    async with asyncio.timeout(15):
        while len(first.assignment()) != 2:
            await first.getmany(timeout_ms=100)
    await first.stop()
    await kafka.close()
