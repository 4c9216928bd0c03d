"""SASL against the ACL accounts (aiokafka, PLAIN and SCRAM-SHA-256): a good secret works and
permissions apply per topic and group; a wrong secret fails authentication; a connection that
skips SASL is closed."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import struct
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError as ClientKafkaError
from wharf.broker.frontends.acl_guard import AclGuard

from tests.broker.kafka.kafka_helpers import (
    NO_INITIAL_DELAY,
    SMALL_STORE,
    KafkaUnderTest,
    attach_kafka,
)
from tests.inproc import InProcFactory

ACL = """
accounts:
  - accessKey: root
    secretKey: root-secret
    admin: true
  - accessKey: app
    secretKey: app-secret
    topicPerms: ["orders=PUB|SUB"]
    groupPerms: ["billing=SUB"]
"""


async def kafka_with_acl(inproc_broker: InProcFactory, tmp_path: Path) -> KafkaUnderTest:
    path = tmp_path / "config" / "plain_acl.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ACL)
    guard = AclGuard(path, 900.0)
    guard.load_blocking()
    broker = await inproc_broker(**SMALL_STORE, **NO_INITIAL_DELAY)
    kafka = await attach_kafka(broker.controller, guard)
    broker.controller.ctx.topics.create("orders", 2, 2, 6, {})
    broker.controller.ctx.topics.create("secret", 2, 2, 6, {})
    return kafka


def sasl(mechanism: str, user: str, password: str) -> dict:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_authenticated_produce_and_group_consume(
    inproc_broker: InProcFactory, tmp_path: Path, mechanism: str
) -> None:
    kafka = await kafka_with_acl(inproc_broker, tmp_path)
    auth = sasl(mechanism, "app", "app-secret")
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, **auth)
    await producer.start()
    meta = await producer.send_and_wait("orders", b"hello", partition=0)
    assert meta.offset == 0
    with pytest.raises(ClientKafkaError):  # PUB on "secret" is not granted
        await producer.send_and_wait("secret", b"no", partition=0)
    await producer.stop()
    consumer = AIOKafkaConsumer(
        "orders",
        bootstrap_servers=kafka.address,
        group_id="billing",
        auto_offset_reset="earliest",
        **auth,
    )
    await consumer.start()
    async with asyncio.timeout(15):
        got = []
        while not got:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.extend(records)
    assert got[0].value == b"hello"
    await consumer.commit()
    await consumer.stop()
    assert kafka.controller.ctx.offsets.query("billing", "orders", 0) == 1
    await kafka.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
@pytest.mark.parametrize("user", ["app", "ghost"])  # a wrong secret, an unknown user
async def test_a_wrong_secret_fails(
    inproc_broker: InProcFactory, tmp_path: Path, mechanism: str, user: str
) -> None:
    kafka = await kafka_with_acl(inproc_broker, tmp_path)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.address, request_timeout_ms=3000, **sasl(mechanism, user, "nope")
    )
    with pytest.raises(ClientKafkaError):
        await producer.start()
    await producer.stop()
    assert all(not c.authenticated for c in kafka.part.server.connections)  # type: ignore[union-attr]
    await kafka.close()


async def test_a_connection_without_sasl_is_closed(
    inproc_broker: InProcFactory, tmp_path: Path
) -> None:
    kafka = await kafka_with_acl(inproc_broker, tmp_path)
    client = await kafka.client()
    versions = await client.call(18, 2, {})  # ApiVersions is open
    assert versions["error_code"] == 0
    client.writer.write(struct.pack(">ihhih", 10, 3, 1, 2, -1) + b"\x00\x00\x00\x00")
    async with asyncio.timeout(5):
        assert await client.reader.read() == b""  # Metadata before SASL: closed
    await client.close()
    await kafka.close()


async def test_handshake_v0_then_bare_tokens(inproc_broker: InProcFactory, tmp_path: Path) -> None:
    """Pre-1.0 clients: SaslHandshake v0, then the PLAIN token as a bare frame, answered by a
    bare (empty) frame; a wrong secret closes the connection."""
    kafka = await kafka_with_acl(inproc_broker, tmp_path)
    client = await kafka.client()
    reply = await client.call(17, 0, {"mechanism": "PLAIN"})
    assert reply["error_code"] == 0 and "SCRAM-SHA-256" in reply["mechanisms"]
    token = b"\x00app\x00app-secret"
    client.writer.write(struct.pack(">i", len(token)) + token)
    assert await client.reader.readexactly(4) == b"\x00\x00\x00\x00"
    metadata = await client.call(3, 1, {"topics": None})
    assert {t["name"] for t in metadata["topics"]} == {"orders"}  # "secret": not granted
    await client.close()

    client = await kafka.client()
    await client.call(17, 0, {"mechanism": "PLAIN"})
    token = b"\x00app\x00wrong"
    client.writer.write(struct.pack(">i", len(token)) + token)
    async with asyncio.timeout(5):
        assert await client.reader.read() == b""
    await client.close()
    await kafka.close()


async def test_scram_does_not_tell_unknown_users_apart(
    inproc_broker: InProcFactory, tmp_path: Path
) -> None:
    kafka = await kafka_with_acl(inproc_broker, tmp_path)
    challenges = []
    for user in ("app", "ghost"):
        client = await kafka.client()
        assert (await client.call(17, 1, {"mechanism": "SCRAM-SHA-256"}))["error_code"] == 0
        first = await client.call(36, 1, {"auth_bytes": f"n,,n={user},r=abc".encode()})
        challenges.append(first)
        final = await client.call(36, 1, {"auth_bytes": b"c=biws,r=x,p=AAAA"})
        assert final["error_code"] == 58
        await client.close()
    assert [c["error_code"] for c in challenges] == [0, 0]  # both challenged alike
    assert all(c["auth_bytes"].startswith(b"r=abc") for c in challenges)
    await kafka.close()


def _scram_final(first: str, server_first: str, password: str, nonce: str) -> bytes:
    """The client-final-message for ``nonce`` (RFC 5802, computed here with hashlib)."""
    fields = dict(f.split("=", 1) for f in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"{first},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, hashlib.sha256).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize(
    ("sent_nonce", "accepted"),
    [
        ("{server}", True),  # RFC 5802
        ("{client}{server}", True),  # librdkafka < 2.6.1 (Debian's kcat): client nonce twice
        ("other{server}", False),
        ("{client}", False),
    ],
)
async def test_scram_final_nonce(
    inproc_broker: InProcFactory, tmp_path: Path, sent_nonce: str, accepted: bool
) -> None:
    kafka = await kafka_with_acl(inproc_broker, tmp_path)
    client = await kafka.client()
    assert (await client.call(17, 1, {"mechanism": "SCRAM-SHA-256"}))["error_code"] == 0
    first = "n=app,r=clientnonce"
    reply = await client.call(36, 1, {"auth_bytes": f"n,,{first}".encode()})
    server_first = reply["auth_bytes"].decode()
    server = server_first.split(",")[0][2:]
    nonce = sent_nonce.format(client="clientnonce", server=server)
    final = await client.call(
        36, 1, {"auth_bytes": _scram_final(first, server_first, "app-secret", nonce)}
    )
    assert (final["error_code"] == 0) is accepted, final
    await client.close()
    await kafka.close()
