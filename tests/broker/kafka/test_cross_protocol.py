"""One message, every protocol: records produced by a real Kafka client (confluent-kafka,
librdkafka 2.16) are read by Wharf's SDK (wharf.v1), the official RocketMQ 5.x client (v2
gRPC, .venv-rmq) and the RocketMQ 4.x C++ client (remoting, .venv-rmq4), and the messages
those three send are read by the Kafka client, all through one daemon (gRPC, remoting and
Kafka ports over one store).

What must survive each crossing (broker/frontends/kafka/README.md "Mapping"): the body; the Kafka key as
the message's KEYS and back (RocketMQ keys space-joined into one Kafka key); text headers as
user properties and back, in order, a RocketMQ tag as the header ``TAGS``; a null key as no
KEYS and no keys as a null key; binary header values, which RocketMQ properties (text) cannot
hold, in the one property ``__KAFKA_HEADERS`` (JSON, base64 values) that every RocketMQ client
reads back byte for byte. The RocketMQ clients run in subprocesses (their generated protos
clash with Wharf's; the 4.x library has its own threads)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from wharf.client import sync
from wharf.client.message import MessageQueue

from tests.harness import REPO_ROOT, BrokerProcess, Daemons

pytestmark = pytest.mark.slow  # daemons and real clients (the RocketMQ venvs, kcat): make test-slow
RMQ5_PYTHON = REPO_ROOT / ".venv-rmq" / "bin" / "python"
RMQ5_SCRIPT = Path(__file__).parent / "clients" / "rmq5_script.py"
RMQ4_PYTHON = REPO_ROOT / ".venv-rmq4" / "bin" / "python"
RMQ4_SCRIPT = REPO_ROOT / "tests" / "broker" / "remoting" / "cpp_client_script.py"
PARTITIONS = 2
BINARY = bytes([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF])  # not UTF-8, NUL and RocketMQ's separators

# What a Kafka producer sends (partition 0, in this order): a keyed record with text headers;
# a null key; a record with a binary header value beside a text one.
KAFKA_RECORDS: list[dict[str, Any]] = [
    {"key": b"order-1", "value": b"paid #1", "headers": [("region", b"eu"), ("note", "\u00fc".encode())]},
    {"key": None, "value": b"no key", "headers": [("region", b"us")]},
    {"key": b"order-3", "value": b"binary", "headers": [("kind", b"raw"), ("sig", BINARY)]},
]  # fmt: skip
# What a RocketMQ-side producer sends: tag, keys (two of them on one), properties; no keys.
RMQ_MESSAGES: list[dict[str, Any]] = [
    {"body": "rmq-1", "tag": "paid", "keys": ["order-1"], "props": {"region": "eu", "n": "1"}},
    {"body": "rmq-2", "tag": None, "keys": ["a-2", "b-2"], "props": {"region": "us"}},
    {"body": "rmq-3", "tag": "free", "keys": [], "props": {"n": "3"}},
]


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker(
        settings={"defaultTopicQueueNums": PARTITIONS},
        extra_args=["--kafka-listen", "127.0.0.1:0", "--remoting-listen", "127.0.0.1:0"],
    )


def fresh(name: str) -> str:
    return f"x{name}{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ the Kafka side
def kafka_produce(broker: BrokerProcess, topic: str) -> list[int]:
    """KAFKA_RECORDS into partition 0, acks=all; the offsets the producer was told."""
    producer = Producer({"bootstrap.servers": broker.kafka_endpoint, "acks": "all"})
    offsets: list[int] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for record in KAFKA_RECORDS:  # one at a time: the order of the offsets is the send order
        producer.produce(topic, record["value"], record["key"], partition=0,
                         headers=record["headers"], on_delivery=delivered)  # fmt: skip
        assert producer.flush(15) == 0
    return offsets


def kafka_read(broker: BrokerProcess, topic: str, count: int) -> list[Any]:
    """Every record of the topic's partitions from offset 0 (assigned, no group rebalance)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.kafka_endpoint,
            "group.id": fresh("g"),
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: list[Any] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    assert len(got) == count, [m.value() for m in got]
    return got


def check_read_by_kafka(got: list[Any], tags: bool = True) -> None:
    """RMQ_MESSAGES as a Kafka consumer sees them."""
    by_value = {m.value(): m for m in got}
    assert sorted(by_value) == sorted(m["body"].encode() for m in RMQ_MESSAGES)
    for sent in RMQ_MESSAGES:
        record = by_value[sent["body"].encode()]
        if sent["keys"]:  # keys space-joined (the 5.x client keeps them in a set: any order)
            assert sorted((record.key() or b"").split(b" ")) == sorted(
                k.encode() for k in sent["keys"]
            ), sent
        else:
            assert record.key() is None, sent  # none = a null key
        headers = [(n, v.encode()) for n, v in sent["props"].items()]
        if sent["tag"] and tags:
            headers.append(("TAGS", sent["tag"].encode()))
        # confluent-kafka gives None for no headers; a map on the RocketMQ side: no order
        assert sorted(record.headers() or []) == sorted(headers), sent


def check_kafka_properties(record: dict[str, Any], props: dict[str, str], keys: list[str]) -> None:
    """KAFKA_RECORDS[i] as a RocketMQ-side consumer sees it (``props`` = its user
    properties, ``keys`` its keys)."""
    if record["key"] is None:
        assert keys == []
    else:
        assert keys == [record["key"].decode()]
    assert "__KAFKA_KEY" not in props  # text keys are KEYS (query by key), not base64
    if any(v == BINARY for _, v in record["headers"]):
        # not text: all the headers, in order, in __KAFKA_HEADERS
        packed = json.loads(props["__KAFKA_HEADERS"])
        assert [(n, base64.b64decode(v)) for n, v in packed] == record["headers"]
    else:
        # text: one property each (RocketMQ's properties are a map: no order to compare)
        got = {n: v for n, v in props.items() if not n.startswith("__KAFKA_")}
        assert got == {n: v.decode() for n, v in record["headers"]}


# ------------------------------------------------------------------ Wharf's SDK
def test_kafka_records_read_by_the_sdk(broker: BrokerProcess) -> None:
    topic = fresh("k2sdk")
    assert kafka_produce(broker, topic) == [0, 1, 2]
    # An acknowledged record becomes visible once dispatch reaches it (the reput runs behind the
    # append, as RocketMQ's): pull until all three came, long-polling each time.
    got: list[Any] = []
    deadline = time.monotonic() + 10
    with sync.PullConsumer(broker.endpoint, group=fresh("g")) as consumer:
        while len(got) < len(KAFKA_RECORDS):
            assert time.monotonic() < deadline, [m.body for m in got]
            result = consumer.pull(
                MessageQueue(topic, 0), len(got), max_messages=10, max_wait_ms=1000
            )
            got += result.messages
    assert [m.body for m in got] == [r["value"] for r in KAFKA_RECORDS]
    for record, message in zip(KAFKA_RECORDS, got, strict=True):
        check_kafka_properties(record, dict(message.properties), list(message.keys))
        assert message.tags in (None, "")  # Kafka has no tags
    # query by key: the store's key index finds the Kafka record by its key
    with sync.Admin(broker.endpoint) as admin:
        found = admin.query_messages(topic, "order-3").messages
    assert [m.body for m in found] == [b"binary"]


def test_kafka_dotted_names_on_every_protocol(broker: BrokerProcess) -> None:
    """Kafka's everyday names (``com.acme.orders.v1``, a group ``com.acme.billing``): created by
    a Kafka producer, consumed and committed by a Kafka group, read and listed by the SDK."""
    topic, group = f"com.acme.orders.{fresh('v')}", f"com.acme.billing.{fresh('g')}"
    assert kafka_produce(broker, topic) == [0, 1, 2]
    consumer = Consumer(
        {"bootstrap.servers": broker.kafka_endpoint, "group.id": group,
         "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < len(KAFKA_RECORDS) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(m.value() for m in got) == sorted(r["value"] for r in KAFKA_RECORDS)
    with sync.PullConsumer(broker.endpoint, group=fresh("g")) as puller:
        result = puller.pull(MessageQueue(topic, 0), 0, max_messages=10, max_wait_ms=1000)
    assert [m.body for m in result.messages] == [r["value"] for r in KAFKA_RECORDS]
    with sync.Admin(broker.endpoint) as admin:
        assert topic in {t.name for t in admin.list_topics().topics}
        progress = admin.consumer_progress(group)
    committed = {(q.topic, q.queue_id, q.consumer_offset) for q in progress.queues}
    assert (topic, 0, len(KAFKA_RECORDS)) in committed and progress.total_lag == 0


def test_sdk_messages_read_by_kafka(broker: BrokerProcess) -> None:
    topic = fresh("sdk2k")
    with sync.Producer(broker.endpoint) as producer:
        for sent in RMQ_MESSAGES:
            producer.send(topic, sent["body"], tags=sent["tag"], keys=sent["keys"],
                          properties=sent["props"])  # fmt: skip
    check_read_by_kafka(kafka_read(broker, topic, len(RMQ_MESSAGES)))


# ------------------------------------------------------------------ RocketMQ 5.x (official)
def run_rmq5(broker: BrokerProcess, home: Path, *args: str) -> dict[str, Any]:
    if not RMQ5_PYTHON.exists():
        pytest.skip("the official client's venv is missing: run `make rmq-client`")
    home.mkdir(exist_ok=True)  # the client logs to ~/logs/rocketmq_python/
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(RMQ5_PYTHON), str(RMQ5_SCRIPT), broker.endpoint, *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_kafka_records_read_by_rocketmq_5_client(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = fresh("k2rmq5")
    kafka_produce(broker, topic)
    out = run_rmq5(broker, tmp_path / "home", "receive", topic, fresh("g"), "3")
    by_body = {bytes.fromhex(m["body_hex"]): m for m in out["received"]}
    assert sorted(by_body) == sorted(r["value"] for r in KAFKA_RECORDS)  # each once
    for record in KAFKA_RECORDS:
        message = by_body[record["value"]]
        check_kafka_properties(record, message["props"], message["keys"])
        assert message["tag"] is None


def test_rocketmq_5_client_messages_read_by_kafka(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = fresh("rmq52k")
    specs = [{"body_hex": m["body"].encode().hex(), "tag": m["tag"], "keys": m["keys"],
              "props": m["props"]} for m in RMQ_MESSAGES]  # fmt: skip
    out = run_rmq5(broker, tmp_path / "home", "send", topic, json.dumps(specs))
    assert len(out["ids"]) == len(RMQ_MESSAGES)
    check_read_by_kafka(kafka_read(broker, topic, len(RMQ_MESSAGES)))


# ------------------------------------------------------------------ RocketMQ 4.x (C++ client)
def run_rmq4(broker: BrokerProcess, home: Path, mode: str, **args: Any) -> dict[str, Any]:
    if not RMQ4_PYTHON.exists():
        pytest.skip("the RocketMQ 4.x C++ client's venv is missing: run `make rmq4-client`")
    home.mkdir(exist_ok=True)  # the library logs to ~/logs/rocketmq-cpp/
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(RMQ4_PYTHON), str(RMQ4_SCRIPT), broker.remoting_endpoint, mode, json.dumps(args)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_kafka_records_read_by_rocketmq_4_client(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = fresh("k2rmq4")
    kafka_produce(broker, topic)
    names = sorted({n for r in KAFKA_RECORDS for n, _ in r["headers"]} | {"__KAFKA_HEADERS"})
    out = run_rmq4(broker, tmp_path / "home", "consume", group=fresh("G"), topic=topic,
                   expect=3, timeout=30, props=names)  # fmt: skip
    by_body = {m["body"].encode(): m for m in out["received"]}
    assert sorted(by_body) == sorted(r["value"] for r in KAFKA_RECORDS)
    for record in KAFKA_RECORDS:
        message = by_body[record["value"]]
        # the library answers "" for a property the message does not have
        props = {n: v for n, v in message["props"].items() if v}
        keys = message["keys"].split(" ") if message["keys"] else []
        check_kafka_properties(record, props, keys)
        assert not message["tags"]


def test_rocketmq_4_client_messages_read_by_kafka(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = fresh("rmq42k")
    specs = [{"body": m["body"], "tags": m["tag"], "keys": " ".join(m["keys"]),
              "props": m["props"]} for m in RMQ_MESSAGES]  # fmt: skip
    out = run_rmq4(broker, tmp_path / "home", "send", group=fresh("P"), topic=topic,
                   messages=specs)  # fmt: skip
    assert out["error"] is None and [r["status"] for r in out["sent"]] == [0, 0, 0]
    check_read_by_kafka(kafka_read(broker, topic, len(RMQ_MESSAGES)))
