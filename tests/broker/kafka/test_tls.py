"""The Kafka listener over TLS beside plaintext (tlsListen keeps plaintext: kafkaTlsListen):
aiokafka produces and fetches over TLS, and Metadata on the TLS listener names the TLS port."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from wharf.broker.frontends.frontend import PortBook, Serving, TlsSource
from wharf.broker.frontends.kafka.part import KafkaPart, kafka_part
from wharf.broker.kit.tls.certs import build_development_pair

from tests.broker.kafka.kafka_helpers import NO_INITIAL_DELAY, SMALL_STORE
from tests.inproc import InProcFactory


async def test_tls_listener_beside_plaintext(inproc_broker: InProcFactory, tmp_path: Path) -> None:
    cert, key = build_development_pair(["127.0.0.1", "localhost"])
    (tmp_path / "c.pem").write_bytes(cert)
    (tmp_path / "k.pem").write_bytes(key)

    def server_context() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
        return context

    broker = await inproc_broker(**SMALL_STORE, **NO_INITIAL_DELAY)
    controller = broker.controller
    config = dataclasses.replace(
        controller.config,
        broker=dataclasses.replace(
            controller.config.broker, kafka_listen="127.0.0.1:0", kafka_tls_listen="127.0.0.1:0"
        ),
    )
    tls = TlsSource(enabled=True, separate_port=True, make_context=server_context)
    part = kafka_part(config)
    assert isinstance(part, KafkaPart)
    ports = PortBook()
    part.reserve(ports, tls)
    assert controller.ctx is not None
    part.attach(Serving(kit=controller.ctx.front_end_kit(), acl=None, tls=tls))
    await part.serve()
    ports.close()
    ready = part.ready()
    assert ready["kafka"] and ready["kafka_tls"] and ready["kafka"] != ready["kafka_tls"]

    client_context = ssl.create_default_context(cafile=str(tmp_path / "c.pem"))
    common = {
        "bootstrap_servers": ready["kafka_tls"],
        "security_protocol": "SSL",
        "ssl_context": client_context,
    }
    producer = AIOKafkaProducer(**common)
    await producer.start()
    meta = await producer.send_and_wait("secure", b"over tls", partition=0)
    # the client dialled the broker Metadata named: the TLS port (a plaintext port would fail)
    await producer.stop()
    consumer = AIOKafkaConsumer("secure", group_id="tls-g", auto_offset_reset="earliest", **common)
    await consumer.start()
    async with asyncio.timeout(15):
        record = await consumer.getone()
    assert (record.offset, record.value) == (meta.offset, b"over tls")
    await consumer.stop()
    part.close_listener()
    await part.stop(0)
