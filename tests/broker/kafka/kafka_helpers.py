"""The Kafka front end in a test: an in-process broker (``tests/inproc.py``) with the Kafka
part attached by hand (the controller does not compose parts yet), and a tiny raw client
speaking the tables of ``wharf.broker.frontends.kafka.apis`` for byte-level tests.

Use: ``kafka = await start_kafka(inproc_broker, **settings)``; ``kafka.address`` is
``host:port``; ``await kafka.close()`` (the inproc fixture shuts the broker down)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import struct
from dataclasses import dataclass
from typing import Any

from wharf.broker.controller import BrokerController
from wharf.broker.frontends.acl_guard import AclGuard
from wharf.broker.frontends.frontend import PortBook, Serving, TlsSource
from wharf.broker.frontends.kafka.apis import APIS
from wharf.broker.frontends.kafka.codec import decode_response, encode_request
from wharf.broker.frontends.kafka.part import KafkaPart, kafka_part

from tests.harness import BrokerProcess, Daemons
from tests.inproc import InProcFactory

__all__ = ["KafkaClient", "KafkaUnderTest", "kafka_groups", "start_kafka"]


@dataclass
class KafkaUnderTest:
    controller: BrokerController
    part: KafkaPart

    @property
    def address(self) -> str:
        address = self.part.ready()["kafka"]
        assert address is not None
        return address

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    async def close(self) -> None:
        self.part.close_listener()
        await self.part.stop(0.0)

    async def client(self) -> KafkaClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        return KafkaClient(reader, writer)


async def attach_kafka(
    controller: BrokerController, acl: AclGuard | None = None, **broker: Any
) -> KafkaUnderTest:
    config = controller.config
    settings = {"kafka_listen": "127.0.0.1:0", **broker}
    config = dataclasses.replace(config, broker=dataclasses.replace(config.broker, **settings))
    part = kafka_part(config)
    assert isinstance(part, KafkaPart)
    ports = PortBook()
    part.reserve(ports, TlsSource())
    assert controller.ctx is not None
    part.attach(Serving(kit=controller.ctx.front_end_kit(), acl=acl, tls=TlsSource()))
    await part.serve()
    ports.close()
    return KafkaUnderTest(controller, part)


# Small store files: a broker with the default 1 GiB commit log segment takes ~5 s to start.
SMALL_STORE = {
    "mapped_file_size_commit_log": str(16 << 20),
    "mapped_file_size_consume_queue": "60000",
    "default_topic_queue_nums": "4",
}


# Groups of the byte-level tests form at once (Kafka's docs advise a 0 initial rebalance delay
# in tests); test_groups.py covers the delay, the daemons of the client tests keep one.
NO_INITIAL_DELAY = {"kafka_group_initial_rebalance_delay_ms": "0"}


async def start_kafka(
    inproc_broker: InProcFactory, acl: AclGuard | None = None, **settings: str
) -> KafkaUnderTest:
    broker = await inproc_broker(**{**SMALL_STORE, **NO_INITIAL_DELAY, **settings})
    return await attach_kafka(broker.controller, acl)


class KafkaClient:
    """Requests by API key and version, answered in order (the tests' byte-level client)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._correlation = 0

    def send(self, key: int, version: int, body: dict[str, Any]) -> int:
        self._correlation += 1
        self.writer.write(encode_request(APIS[key], version, self._correlation, body))
        return self._correlation

    async def receive(self, key: int, version: int) -> tuple[int, dict[str, Any]]:
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        frame = await self.reader.readexactly(size)
        return decode_response(APIS[key], version, frame)

    async def call(self, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        correlation = self.send(key, version, body)
        await self.writer.drain()
        got, response = await self.receive(key, version)
        assert got == correlation
        return response

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


def kafka_groups(
    daemons: Daemons, root: Any, namesrv: str, **settings: Any
) -> dict[str, BrokerProcess]:
    """broker-a and broker-b, masters of cluster C registered with ``namesrv``, each a Kafka
    leader of its own queues (no auto-created topics, 200 ms heartbeats); ``settings`` add
    to or override theirs. Started; the caller waits for their registration."""
    common = {
        "namesrvAddr": namesrv,
        "brokerClusterName": "C",
        "autoCreateTopicEnable": False,
        "brokerHeartbeatInterval": 200,
        "kafkaListen": "127.0.0.1:0",
        **settings,
    }
    return {
        name: daemons.broker(root / name, settings={**common, "brokerName": name})
        for name in ("broker-a", "broker-b")
    }
