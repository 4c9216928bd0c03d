"""Kafka's names up to 249 characters through a real daemon and real clients: confluent-kafka
(librdkafka) creates a 249-character topic, produces, consumes it from the beginning in a
group of a 249-character id, commits and lists it; Wharf's SDK (wharf.v1) pulls it and lists
it; the store holds its records in RocketMQ 5's second record version (magic 0xDAA320AB, a
two-byte TOPICLENGTH) while a 127-character topic's stay V1, byte for byte what RocketMQ 4.x
reads (the raw records the SDK pulls show the magic). Kafka's internal names stay reserved."""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from wharf.client import sync
from wharf.client.message import MessageQueue

from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow  # a daemon and a real Kafka client

V1, V2 = 0xDAA320A7, 0xDAA320AB


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker(
        settings={"defaultTopicQueueNums": 1}, extra_args=["--kafka-listen", "127.0.0.1:0"]
    )


def named(length: int) -> str:
    """A fresh Kafka-legal name of exactly ``length`` characters."""
    tag = f"n.{uuid.uuid4().hex[:8]}-"
    return tag + "x" * (length - len(tag))


def create(broker: BrokerProcess, topic: str) -> tuple[int, str]:
    admin = AdminClient({"bootstrap.servers": broker.kafka_endpoint})
    (future,) = admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10).values()
    try:
        future.result(15)
    except Exception as exc:  # KafkaException carrying the broker's KafkaError
        error = exc.args[0]
        return error.code(), error.str()
    return 0, ""


def produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.kafka_endpoint, "acks": "all"})
    errors: list[Any] = []
    for i, value in enumerate(values):
        producer.produce(topic, value, b"k%d" % i, headers=[("h", b"v")],
                         on_delivery=lambda err, _msg: errors.append(err))  # fmt: skip
    assert producer.flush(15) == 0
    assert errors == [None] * len(values)


def consume(broker: BrokerProcess, topic: str, group: str, count: int) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": broker.kafka_endpoint, "group.id": group,
         "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
        consumer.commit(asynchronous=False)
        listed = consumer.list_topics(timeout=10).topics
        assert topic in listed and listed[topic].error is None
    finally:
        consumer.close()
    return got


def sdk_pull(broker: BrokerProcess, topic: str, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 10
    with sync.PullConsumer(broker.endpoint, group=named(40)) as consumer:
        while len(got) < count:
            assert time.monotonic() < deadline, [m.body for m in got]
            result = consumer.pull(MessageQueue(topic, 0), len(got), max_messages=10,
                                   max_wait_ms=1000)  # fmt: skip
            got += result.messages
    return got


@pytest.mark.parametrize(("length", "magic"), [(249, V2), (128, V2), (127, V1)])
def test_a_kafka_topic_of_kafka_s_length_works_on_kafka_and_the_sdk(
    broker: BrokerProcess, length: int, magic: int
) -> None:
    topic, group = named(length), named(249)
    assert len(topic) == length and len(group) == 249
    assert create(broker, topic) == (0, "")
    values = [b"v%d" % i for i in range(5)]
    produce(broker, topic, values)
    got = consume(broker, topic, group, len(values))
    assert [m.value() for m in got] == values
    assert [m.key() for m in got] == [b"k%d" % i for i in range(5)]
    assert {m.topic() for m in got} == {topic} and got[0].headers() == [("h", b"v")]
    # the SDK reads the raw records: the version the store wrote shows in their magic
    pulled = sdk_pull(broker, topic, len(values))
    assert [m.body for m in pulled] == values
    assert {m.queue_topic for m in pulled} == {topic}
    assert {struct.unpack_from(">I", m._buf, m._pos + 4)[0] for m in pulled} == {magic}
    with sync.Admin(broker.endpoint) as admin:
        assert topic in {t.name for t in admin.list_topics().topics}
        progress = admin.consumer_progress(group)
    assert {(q.topic, q.consumer_offset) for q in progress.queues} == {(topic, len(values))}


def test_the_sdk_sends_to_a_long_topic_and_kafka_reads_it(broker: BrokerProcess) -> None:
    topic = named(249)
    assert create(broker, topic) == (0, "")
    with sync.Producer(broker.endpoint) as producer:
        producer.send(topic, b"from the sdk", keys=["k"])
    got = consume(broker, topic, named(20), 1)
    assert [(m.value(), m.key()) for m in got] == [(b"from the sdk", b"k")]


def test_names_past_kafka_s_limit_and_internal_names_are_refused(broker: BrokerProcess) -> None:
    code, message = create(broker, named(250))
    assert code == KafkaError.TOPIC_EXCEPTION and "limit is 249" in message
    for internal in ("__consumer_offsets", "__transaction_state"):
        code, message = create(broker, internal)
        assert code == KafkaError.TOPIC_EXCEPTION and "internal topic" in message
