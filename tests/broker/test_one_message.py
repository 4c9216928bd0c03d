"""One message, every protocol: against ONE daemon, each producer path sends the same messages
and each consumer path reads every one of them, checking the body bytes, the key, the tag and
the properties as its protocol defines them (the mapping: broker/frontends/kafka/README.md "Mapping").

Producers (one topic each): wharf.v1 over gRPC and over the wire port (the SDK's Producer,
which zlib-compresses bodies over 4 KiB), RocketMQ 4.x remoting (a raw client sending what the
4.x clients send: bodies over 4 KiB deflated with sysFlag COMPRESSED), apache.rocketmq.v2 (raw
stubs sending what the official 5.x clients send: bodies over 4 KiB GZIP-encoded, which the
broker stores inflated) and Kafka (confluent-kafka, gzip batches, which the broker stores as
one plain message per record). Bodies: 0 bytes, 100 bytes, 5,000 compressible bytes and
1 MiB of random (incompressible) bytes; each with a key, a tag (not Kafka: it has none) and a
property / header.

Consumers: the SDK's pull over gRPC and over the wire port, remoting pull (raw records; the
reader inflates a COMPRESSED body, as the 4.x clients do; also where the stored sysflags are
checked), v2 ReceiveMessage, Kafka fetch (confluent-kafka).

An empty body is refused by every RocketMQ protocol (the store holds none) and accepted by
Kafka, whose empty value RocketMQ readers see as the placeholder body ``\\x00`` with property
``__KAFKA_VALUE=empty``."""

from __future__ import annotations

import asyncio
import gzip
import random
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka import Producer as KafkaProducer
from google.protobuf.duration_pb2 import Duration
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.client import Producer, PullConsumer
from wharf.client.errors import InvalidArgumentError
from wharf.client.message import MessageQueue
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc
from wharf.store.codec.layout import SYSFLAG_COMPRESSED
from wharf.store.codec.properties import SYSTEM_PROPERTY_NAMES
from wharf.store.codec.records import decode_record

from tests.broker.remoting.test_server import Client
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow  # one daemon, every protocol's client, 1 MiB bodies: ~15 s

COMPRESS_OVER = 4 * 1024  # the SDK's, the 4.x clients' and the 5.x clients' threshold
SIZES = (0, 100, 5000, 1 << 20)
BODIES = {
    0: b"",
    100: bytes(range(100)),
    5000: (b"one message, every protocol. " * 200)[:5000],  # deflates to ~60 bytes
    1 << 20: random.Random(78).randbytes(1 << 20),  # does not deflate: stored as it is
}
TAG = "paid"
PROPERTY = ("region", "eu-west")
PATHS = ("v1-grpc", "v1-wire", "remoting", "v2", "kafka")
COMPRESSING = ("v1-grpc", "v1-wire", "remoting")  # store a deflatable body over 4 KiB deflated
V2_META = (("x-mq-client-id", "127.0.0.1@one-message@0@matrix"),)


@dataclass
class Sent:
    path: str
    size: int
    key: str
    stored: bool = True  # False: refused (an empty body on a RocketMQ protocol)

    @property
    def body(self) -> bytes:
        return BODIES[self.size]

    @property
    def tag(self) -> str | None:
        return None if self.path == "kafka" else TAG

    @property
    def placeholder(self) -> bool:
        """An empty Kafka value: the store holds the body ``\\x00`` + ``__KAFKA_VALUE``."""
        return self.path == "kafka" and self.size == 0


@dataclass
class Matrix:
    broker: BrokerProcess
    sent: dict[str, list[Sent]] = field(default_factory=dict)  # topic -> its messages, in order

    def stored(self, topic: str) -> list[Sent]:
        return [m for m in self.sent[topic] if m.stored]


def topic_of(path: str) -> str:
    return "one-" + path.replace("-", "")


def key_of(path: str, size: int) -> str:
    return f"key-{path}-{size}"


# ------------------------------------------------------------------------------------ sending
async def send_sdk(endpoint: str, path: str) -> list[Sent]:
    sent = []
    async with Producer(endpoint) as producer:
        for size in SIZES:
            key = key_of(path, size)
            if size == 0:  # the SDK refuses it before the broker would
                with pytest.raises(InvalidArgumentError):
                    await producer.send(topic_of(path), b"", tags=TAG, keys=(key,))
                sent.append(Sent(path, size, key, stored=False))
                continue
            await producer.send(
                topic_of(path), BODIES[size], tags=TAG, keys=(key,), properties=dict([PROPERTY])
            )
            sent.append(Sent(path, size, key))
    return sent


async def send_remoting(broker: BrokerProcess) -> list[Sent]:
    host, _, port = broker.remoting_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    client = Client(reader, writer)
    sent = []
    try:
        for size in SIZES:
            key = key_of("remoting", size)
            body, sys_flag = BODIES[size], 0
            if size > COMPRESS_OVER:  # as DefaultMQProducer does (compressMsgBodyOverHowmuch)
                packed = zlib.compress(body, 5)
                if len(packed) < len(body):
                    body, sys_flag = packed, SYSFLAG_COMPRESSED
            props = {"KEYS": key, "TAGS": TAG, PROPERTY[0]: PROPERTY[1], "WAIT": "true",
                     "UNIQ_KEY": uuid.uuid4().hex.upper()}  # fmt: skip
            fields = {
                "producerGroup": "PG-one", "topic": topic_of("remoting"), "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 1, "queueId": 0, "sysFlag": sys_flag,
                "bornTimestamp": int(time.time() * 1000), "flag": 0,
                "properties": "".join(f"{k}\x01{v}\x02" for k, v in props.items()),
                "reconsumeTimes": 0, "unitMode": "false", "batch": "0",
            }  # fmt: skip
            reply = await client.call(RequestCode.SEND_MESSAGE, fields, body)
            if size == 0:
                assert reply.code == ResponseCode.MESSAGE_ILLEGAL, reply.remark
                sent.append(Sent("remoting", size, key, stored=False))
                continue
            assert reply.code == ResponseCode.SUCCESS, reply.remark
            sent.append(Sent("remoting", size, key))
    finally:
        writer.close()
    return sent


async def send_v2(broker: BrokerProcess) -> list[Sent]:
    sent = []
    async with grpc.aio.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for size in SIZES:
            key = key_of("v2", size)
            message = d.Message(body=BODIES[size])
            message.topic.name = topic_of("v2")
            sysp = message.system_properties
            sysp.message_id = uuid.uuid4().hex.upper()
            sysp.message_type = d.NORMAL
            sysp.tag = TAG
            sysp.keys.append(key)
            sysp.body_encoding = d.IDENTITY
            if size > COMPRESS_OVER:  # as the 5.x clients do: GZIP, the broker inflates it
                message.body = gzip.compress(BODIES[size])
                sysp.body_encoding = d.GZIP
            message.user_properties[PROPERTY[0]] = PROPERTY[1]
            reply = await stub.SendMessage(
                s.SendMessageRequest(messages=[message]), metadata=V2_META, timeout=30
            )
            if size == 0:
                assert reply.status.code == d.Code.MESSAGE_BODY_EMPTY, reply.status
                sent.append(Sent("v2", size, key, stored=False))
                continue
            assert reply.status.code == d.Code.OK, reply.status
            sent.append(Sent("v2", size, key))
    return sent


def send_kafka(broker: BrokerProcess) -> list[Sent]:
    producer = KafkaProducer(
        {
            "bootstrap.servers": broker.kafka_endpoint,
            "acks": "all",
            "compression.type": "gzip",  # a compressed batch, stored as plain messages
            "message.max.bytes": 4 << 20,  # 1 MiB values (librdkafka's default is 1,000,000)
            "linger.ms": 0,
        }
    )
    errors: list[Any] = []
    sent = []
    for size in SIZES:  # one at a time: offsets in send order
        key = key_of("kafka", size)
        producer.produce(
            topic_of("kafka"), BODIES[size], key.encode(), partition=0,
            headers=[(PROPERTY[0], PROPERTY[1].encode())],
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )  # fmt: skip
        assert producer.flush(30) == 0
        sent.append(Sent("kafka", size, key))
    assert errors == []
    return sent


@pytest.fixture(scope="module")
def matrix(module_daemons: Daemons) -> Matrix:
    broker = module_daemons.broker(
        settings={"defaultTopicQueueNums": 1},  # one queue / partition: offsets are send order
        extra_args=["--kafka-listen", "127.0.0.1:0", "--remoting-listen", "127.0.0.1:0"],
    )
    assert broker.wire_endpoint and broker.remoting_endpoint and broker.kafka_endpoint
    m = Matrix(broker)

    async def rocketmq_side() -> None:
        m.sent[topic_of("v1-grpc")] = await send_sdk(broker.endpoint, "v1-grpc")
        m.sent[topic_of("v1-wire")] = await send_sdk(broker.wire_endpoint, "v1-wire")
        m.sent[topic_of("remoting")] = await send_remoting(broker)
        m.sent[topic_of("v2")] = await send_v2(broker)

    asyncio.run(rocketmq_side())
    m.sent[topic_of("kafka")] = send_kafka(broker)
    return m


# ------------------------------------------------------------------------------ expectations
def user_properties(props: dict[str, str]) -> dict[str, str]:
    """The user's properties among a RocketMQ reader's (the broker's own names left out)."""
    return {k: v for k, v in props.items() if k not in SYSTEM_PROPERTY_NAMES}


def rocketmq_body(sent: Sent) -> bytes:
    return b"\x00" if sent.placeholder else sent.body


def rocketmq_user_properties(sent: Sent) -> dict[str, str]:
    props = dict([PROPERTY])
    if sent.placeholder:
        props["__KAFKA_VALUE"] = "empty"
    return props


@dataclass
class Seen:
    """One message as a reader saw it, in the reader's protocol's terms."""

    body: bytes | None
    keys: list[str]
    tag: str | None
    properties: dict[str, str]  # user properties / Kafka headers


def check_rocketmq_reader(matrix: Matrix, read: Callable[[str, int], list[Seen]]) -> None:
    for path in PATHS:
        topic = topic_of(path)
        expected = matrix.stored(topic)
        seen = read(topic, len(expected))
        assert len(seen) == len(expected), (topic, len(seen))
        for sent, got in zip(expected, seen, strict=True):
            where = f"{sent.path} {sent.size} bytes"
            assert got.body == rocketmq_body(sent), where  # whole, inflated, byte for byte
            assert got.keys == [sent.key], where
            assert (got.tag or None) == sent.tag, where
            assert user_properties(got.properties) == rocketmq_user_properties(sent), where


# ------------------------------------------------------------------------------ the readers
def test_refusals_of_an_empty_body_and_what_was_stored(matrix: Matrix) -> None:
    for path in PATHS:
        refused = [m.size for m in matrix.sent[topic_of(path)] if not m.stored]
        assert refused == ([] if path == "kafka" else [0]), path


@pytest.mark.parametrize("via", ["grpc", "wire"])
def test_the_sdk_pull_reads_every_message(matrix: Matrix, via: str) -> None:
    endpoint = matrix.broker.endpoint if via == "grpc" else matrix.broker.wire_endpoint

    async def read_all() -> dict[str, list[Seen]]:
        out: dict[str, list[Seen]] = {}
        async with PullConsumer(endpoint, group=f"one-sdk-{via}") as consumer:
            for path in PATHS:
                topic, want = topic_of(path), len(matrix.stored(topic_of(path)))
                got: list[Any] = []
                deadline = time.monotonic() + 20
                while len(got) < want and time.monotonic() < deadline:
                    result = await consumer.pull(
                        MessageQueue(topic, 0), len(got), max_messages=32, max_wait_ms=500
                    )
                    got += result.messages
                out[topic] = [Seen(m.body, list(m.keys), m.tags, dict(m.properties)) for m in got]
        return out

    seen = asyncio.run(read_all())
    check_rocketmq_reader(matrix, lambda topic, _count: seen[topic])


def test_remoting_pull_reads_every_message_and_the_stored_flags(matrix: Matrix) -> None:
    records: dict[str, list[Any]] = {}

    async def read_all() -> None:
        host, _, port = matrix.broker.remoting_endpoint.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        client = Client(reader, writer)
        try:
            for path in PATHS:
                topic, want = topic_of(path), len(matrix.stored(topic_of(path)))
                got: list[Any] = []
                deadline = time.monotonic() + 20
                while len(got) < want and time.monotonic() < deadline:
                    fields = {
                        "consumerGroup": "one-remoting", "topic": topic, "queueId": 0,
                        "queueOffset": len(got), "maxMsgNums": 32, "sysFlag": 0,
                        "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                        "subVersion": 0,
                    }  # fmt: skip
                    reply = await client.call(RequestCode.PULL_MESSAGE, fields)
                    if reply.code == ResponseCode.SUCCESS:
                        pos = 0
                        while pos < len(reply.body):
                            record = decode_record(reply.body, pos)
                            got.append(record)
                            pos += record.store_size
                    else:
                        await asyncio.sleep(0.1)
                records[topic] = got
        finally:
            writer.close()

    asyncio.run(read_all())
    # Stored as sent: a deflatable body over 4 KiB deflated (sysflag COMPRESSED) by the paths
    # that compress, never by v2 (the broker inflates GZIP) or Kafka (one plain message per
    # record of a compressed batch); the 1 MiB random body does not deflate: sent plain.
    for path in PATHS:
        topic = topic_of(path)
        flagged = [
            sent.size
            for sent, r in zip(matrix.stored(topic), records[topic], strict=False)
            if r.sys_flag & SYSFLAG_COMPRESSED
        ]
        assert flagged == ([5000] if path in COMPRESSING else []), path

    def seen(topic: str, _count: int) -> list[Seen]:
        out = []
        for r in records[topic]:
            body = zlib.decompress(r.body) if r.sys_flag & SYSFLAG_COMPRESSED else r.body
            keys = r.properties.get("KEYS", "")
            out.append(Seen(body, keys.split(" ") if keys else [], r.tags, r.properties))
        return out

    check_rocketmq_reader(matrix, seen)


def test_v2_receive_reads_every_message(matrix: Matrix) -> None:
    async def read_all() -> dict[str, list[Seen]]:
        out: dict[str, list[Seen]] = {}
        async with grpc.aio.insecure_channel(matrix.broker.endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            for path in PATHS:
                topic, want = topic_of(path), len(matrix.stored(topic_of(path)))
                got: list[d.Message] = []
                deadline = time.monotonic() + 20
                while len(got) < want and time.monotonic() < deadline:
                    request = s.ReceiveMessageRequest(
                        group=d.Resource(name="one-v2"),
                        message_queue=d.MessageQueue(topic=d.Resource(name=topic)),
                        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
                        batch_size=32,
                        invisible_duration=Duration(seconds=60),
                        long_polling_timeout=Duration(seconds=1),
                    )
                    replies = stub.ReceiveMessage(request, metadata=V2_META, timeout=30)
                    got += [r.message async for r in replies if r.HasField("message")]
                got.sort(key=lambda m: m.system_properties.queue_offset)
                out[topic] = [
                    Seen(
                        m.body, list(m.system_properties.keys),
                        m.system_properties.tag if m.system_properties.HasField("tag") else None,
                        dict(m.user_properties),
                    )
                    for m in got
                ]  # fmt: skip
                for m in got:  # the bodies leave IDENTITY-encoded, inflated by the broker
                    assert m.system_properties.body_encoding == d.IDENTITY
        return out

    seen = asyncio.run(read_all())
    check_rocketmq_reader(matrix, lambda topic, _count: seen[topic])


def test_kafka_fetch_reads_every_message(matrix: Matrix) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": matrix.broker.kafka_endpoint,
            "group.id": "one-kafka",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 4 << 20,
            "fetch.max.bytes": 16 << 20,
        }
    )
    consumer.assign([TopicPartition(topic_of(p), 0, OFFSET_BEGINNING) for p in PATHS])
    want = sum(len(matrix.stored(topic_of(p))) for p in PATHS)
    got: dict[str, list[Any]] = {topic_of(p): [] for p in PATHS}
    deadline = time.monotonic() + 30
    try:
        while sum(map(len, got.values())) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got[msg.topic()].append(msg)
    finally:
        consumer.close()
    for path in PATHS:
        topic = topic_of(path)
        expected = matrix.stored(topic)
        assert [m.offset() for m in got[topic]] == list(range(len(expected))), topic
        for sent, record in zip(expected, got[topic], strict=True):
            where = f"{sent.path} {sent.size} bytes"
            # The value is the body, inflated (5,000 bytes, not the ~60 stored), and an empty
            # Kafka value comes back empty, not as the store's placeholder byte.
            assert record.value() == sent.body, (where, len(record.value() or b""))
            assert record.key() == sent.key.encode(), where  # KEYS <-> key
            headers = [(PROPERTY[0], PROPERTY[1].encode())]  # properties <-> headers
            if sent.tag:
                headers.append(("TAGS", sent.tag.encode()))  # tag -> header TAGS
            assert sorted(record.headers() or []) == sorted(headers), where
