"""SASL and TLS with real clients against the daemon: confluent-kafka (librdkafka 2.16),
aiokafka and kcat (Debian, librdkafka 2.0.2) authenticate with SASL PLAIN and SCRAM-SHA-256
against the broker's ACL accounts (aclEnable), over the plaintext Kafka port and over TLS on
its TLS port (tlsEnable + tlsListen: ``kafka_tls``, the daemon's generated development
certificate), and the account's permissions apply (a topic not granted is refused); a wrong
password is refused with an authentication error the client reports as such, and nothing is
stored. (test_sasl.py and test_tls.py test the same paths in process with aiokafka, and SASL's
byte-level corners.)"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from aiokafka.structs import TopicPartition as TopicPartitionAio
from confluent_kafka import Consumer, KafkaError, Producer

from tests.broker.acl_helpers import write_acl
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow  # daemons and real clients (the RocketMQ venvs, kcat): make test-slow
ACL = """
accounts:
  - accessKey: root
    secretKey: root-secret
    admin: true
  - accessKey: app
    secretKey: app-secret
    topicPerms: ["orders=PUB|SUB"]
    groupPerms: ["billing=SUB", "g-*=SUB"]
"""
APP = ("app", "app-secret")
MECHANISMS = ["PLAIN", "SCRAM-SHA-256"]


class Secured:
    def __init__(self, broker: BrokerProcess, ca: Path, plain: str, tls: str) -> None:
        self.broker, self.ca, self.plain, self.tls = broker, ca, plain, tls

    def address(self, over_tls: bool) -> str:
        return self.tls if over_tls else self.plain

    def librdkafka(self, mechanism: str, user: str, password: str, over_tls: bool) -> dict:
        """librdkafka's settings (confluent-kafka's config, kcat's ``-X``)."""
        settings = {
            "bootstrap.servers": self.address(over_tls),
            "security.protocol": "SASL_SSL" if over_tls else "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }
        if over_tls:
            settings["ssl.ca.location"] = str(self.ca)
        return settings


@pytest.fixture(scope="module")
def secured(module_daemons: Daemons) -> Secured:
    broker = module_daemons.broker(
        settings={"aclEnable": True, "tlsEnable": True, "tlsListen": "127.0.0.1:0",
                  "defaultTopicQueueNums": 2},
        extra_args=["--kafka-listen", "127.0.0.1:0"],
        start=False,
    )  # fmt: skip
    write_acl(broker.store_dir, ACL)
    broker.start()
    ready = json.loads((broker.root / "ready.json").read_text())
    assert ready["kafka"] and ready["kafka_tls"] and ready["kafka"] != ready["kafka_tls"], ready
    ca = broker.store_dir / "config" / "tls" / "broker.crt"
    assert ca.exists()
    return Secured(broker, ca, ready["kafka"], ready["kafka_tls"])


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def confluent_produce(settings: dict, topic: str, values: list[bytes]) -> list[Any]:
    """Each value to partition 0, acks=all; the delivery reports' errors (None = stored)."""
    errors: list[Any] = []
    producer = Producer({**settings, "acks": "all", "message.timeout.ms": 10000})
    for value in values:
        producer.produce(topic, value, b"k", partition=0,
                         on_delivery=lambda err, _msg: errors.append(err))  # fmt: skip
    producer.flush(15)
    return errors


def confluent_group_read(settings: dict, topic: str, group: str, want: set[bytes]) -> set[bytes]:
    """Reads the topic as a new group member until every value of ``want`` came."""
    consumer = Consumer({**settings, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})  # fmt: skip
    consumer.subscribe([topic])
    got: set[bytes] = set()
    deadline = time.monotonic() + 20
    try:
        while not want <= got and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.add(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("over_tls", [False, True], ids=["plaintext", "tls"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_authenticates_and_permissions_apply(
    secured: Secured, mechanism: str, over_tls: bool
) -> None:
    settings = secured.librdkafka(mechanism, *APP, over_tls)
    values = [f"{mechanism}-{over_tls}-{i}".encode() for i in range(3)]
    assert confluent_produce(settings, "orders", values) == [None] * 3
    # PUB on "secret" is not granted: refused per record, nothing stored
    [denied] = confluent_produce(settings, "secret", [b"no"])
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied
    assert set(values) <= confluent_group_read(settings, "orders", fresh("g"), set(values))


@pytest.mark.parametrize("over_tls", [False, True], ids=["plaintext", "tls"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_wrong_password_is_an_authentication_error(
    secured: Secured, mechanism: str, over_tls: bool
) -> None:
    errors: list[KafkaError] = []
    delivered: list[Any] = []
    settings = secured.librdkafka(mechanism, "app", "wrong", over_tls)
    producer = Producer({**settings, "error_cb": errors.append, "message.timeout.ms": 2000})
    producer.produce("orders", b"never", partition=0,
                     on_delivery=lambda err, _msg: delivered.append(err))  # fmt: skip
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported for a wrong password"
    error = errors[0]
    assert error.code() == KafkaError._AUTHENTICATION, error
    if mechanism == "PLAIN":  # librdkafka shows the broker's message for PLAIN
        assert "unknown user or wrong secret" in error.str(), error.str()
    else:  # SCRAM: librdkafka's own words for SASL_AUTHENTICATION_FAILED
        assert "invalid credentials" in error.str() or "wrong secret" in error.str(), error.str()
    producer.flush(10)
    [failed] = delivered  # the record was never acknowledged: timed out unsent
    assert failed is not None and failed.code() == KafkaError._MSG_TIMED_OUT, failed


def test_confluent_kafka_without_tls_on_the_tls_port_fails(secured: Secured) -> None:
    """A plaintext (SASL_PLAINTEXT) client of the TLS port gets a transport error, no answer."""
    errors: list[KafkaError] = []
    delivered: list[Any] = []
    settings = {**secured.librdkafka("PLAIN", *APP, False), "bootstrap.servers": secured.tls}
    producer = Producer({**settings, "error_cb": errors.append, "message.timeout.ms": 2000})
    producer.produce("orders", b"never", partition=0,
                     on_delivery=lambda err, _msg: delivered.append(err))  # fmt: skip
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    producer.flush(10)
    assert [e.code() for e in delivered] == [KafkaError._MSG_TIMED_OUT]


# ------------------------------------------------------------------ aiokafka
def aiokafka_settings(secured: Secured, mechanism: str, password: str) -> dict:
    """SASL_SSL: the TLS port (the plaintext port is test_sasl.py's, in process)."""
    return {
        "bootstrap_servers": secured.tls,
        "security_protocol": "SASL_SSL",
        "ssl_context": ssl.create_default_context(cafile=str(secured.ca)),
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "app",
        "sasl_plain_password": password,
    }


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_aiokafka_over_tls_with_sasl(secured: Secured, mechanism: str) -> None:
    settings = aiokafka_settings(secured, mechanism, "app-secret")
    producer = AIOKafkaProducer(**settings)
    await producer.start()
    try:
        meta = await producer.send_and_wait("orders", b"aio " + mechanism.encode(), partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(group_id=fresh("g"), enable_auto_commit=False, **settings)
    await consumer.start()
    try:
        partition = TopicPartitionAio("orders", 0)
        consumer.assign([partition])
        consumer.seek(partition, meta.offset)
        async with asyncio.timeout(15):
            record = await consumer.getone()
    finally:
        await consumer.stop()
    assert (record.offset, record.value) == (meta.offset, b"aio " + mechanism.encode())


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_aiokafka_wrong_password_over_tls(
    secured: Secured, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    producer = AIOKafkaProducer(request_timeout_ms=5000,
                                **aiokafka_settings(secured, mechanism, "wrong"))  # fmt: skip
    with pytest.raises(KafkaConnectionError):  # "Unable to bootstrap from [...]"
        await producer.start()
    await producer.stop()
    # ... after logging the broker's answer (error 58 and its message) as the reason
    reasons = [r.getMessage() for r in caplog.records if r.name.startswith("aiokafka")]
    assert any("SaslAuthenticationFailed" in r and "wrong secret" in r for r in reasons), reasons


# ------------------------------------------------------------------ kcat
def kcat(settings: dict, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed: make system-deps")
    options = [a for name, value in settings.items() for a in ("-X", f"{name}={value}")]
    return subprocess.run(["kcat", *options, *args], input=stdin, capture_output=True,
                          timeout=30, check=False)  # fmt: skip


@pytest.mark.parametrize(("mechanism", "over_tls"), [("PLAIN", True), ("SCRAM-SHA-256", False)])
def test_kcat_produces_and_consumes_with_sasl(
    secured: Secured, mechanism: str, over_tls: bool
) -> None:
    settings = secured.librdkafka(mechanism, *APP, over_tls)
    topic = "orders"
    line = f"kcat-{mechanism}-{over_tls}-{uuid.uuid4().hex[:6]}".encode()
    sent = kcat(settings, "-P", "-t", topic, "-p", "0", stdin=line + b"\n")
    assert sent.returncode == 0, sent.stderr.decode()
    read = kcat(settings, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q")
    assert read.returncode == 0, read.stderr.decode()
    assert line in read.stdout.splitlines()


def test_kcat_wrong_password_fails_with_an_authentication_error(secured: Secured) -> None:
    settings = secured.librdkafka("PLAIN", "app", "wrong", True)
    out = kcat(settings, "-L", "-m", "3")
    assert out.returncode != 0
    assert b"wrong secret" in out.stderr or b"Authentication" in out.stderr, out.stderr.decode()
