"""Readers through the other protocols (issue 63): RocketMQ 4.x remoting (the suite's raw
client, ``tests/broker/remoting/test_server.py``) and RocketMQ 5's v2 ``PullMessage``, each
pulling every queue from every live replica in turn (a replica serves reads while its master
is gone: the SDK's consumer reads there too). What each is handed is a ``Read`` op; they
commit nothing. A read path that skips the committed offset shows as a conflicting offset
whichever protocol it is on, instead of hiding behind the SDK consumer's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import grpc
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc
from wharf.store.codec.records import decode_record, read_total_size

from tests.broker.remoting.test_server import Client
from tests.fault.campaign.cluster import BROKER, Process
from tests.fault.checker import History
from tests.fault.power_campaign import id_of

QUEUES = 2  # the campaign's topic (runner.py)
ROUND_PAUSE_S = 0.05
CALL_TIMEOUT_S = 5.0
SUBSCRIPTION_FLAG = 4  # PullSysFlag: the request carries its subscription; no suspend
V2_METADATA = (("x-mq-client-id", "fault-campaign@1@0@v2-reader"),)


class _Reader:
    """One protocol's reader: ``pull(process, queue, offset)`` returns [(offset, body)] and
    the next offset; the loop records each message as a ``Read``."""

    name = ""

    def __init__(self, topic: str, group: str, history: History) -> None:
        self.topic, self.group, self.history = topic, group, history
        self.positions: dict[tuple[str, int], int] = {}

    async def pull(self, process: Process, queue: int, offset: int) -> tuple[list[Any], int]:
        raise NotImplementedError

    async def close(self, process: Process) -> None:
        """Drop what connects to ``process`` (after an error: it may have restarted)."""

    async def run(self, replicas: list[Process], done: Callable[[], bool],
                  error: Callable[[BaseException], None]) -> None:  # fmt: skip
        while not done():
            for process in replicas:
                if not process.alive or process.paused:
                    continue
                try:
                    for queue in range(QUEUES):
                        key = (process.name, queue)
                        async with asyncio.timeout(CALL_TIMEOUT_S):
                            messages, next_offset = await self.pull(
                                process, queue, self.positions.get(key, 0)
                            )
                        for offset, body in messages:
                            ident = id_of(body)[0] or f"?{offset}"
                            self.history.read(BROKER, queue, offset, ident)
                        self.positions[key] = next_offset
                except Exception as exc:
                    error(exc)
                    await self.close(process)
            await asyncio.sleep(ROUND_PAUSE_S)
        for process in replicas:
            await self.close(process)


class RemotingReader(_Reader):
    """PULL_MESSAGE over a raw remoting connection per replica."""

    name = "remoting"

    def __init__(self, topic: str, group: str, history: History) -> None:
        super().__init__(topic, group, history)
        self._clients: dict[str, tuple[Client, asyncio.StreamWriter]] = {}

    async def _client(self, process: Process) -> Client:
        known = self._clients.get(process.name)
        if known is not None:
            return known[0]
        host, _, port = process.daemon.remoting_endpoint.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        client = Client(reader, writer)
        self._clients[process.name] = (client, writer)
        return client

    async def close(self, process: Process) -> None:
        known = self._clients.pop(process.name, None)
        if known is not None:
            known[1].close()

    async def pull(self, process: Process, queue: int, offset: int) -> tuple[list[Any], int]:
        client = await self._client(process)
        fields = {
            "consumerGroup": self.group, "topic": self.topic, "queueId": queue,
            "queueOffset": offset, "maxMsgNums": 64, "sysFlag": SUBSCRIPTION_FLAG,
            "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
            "subVersion": 0,
        }  # fmt: skip
        reply = await client.call(RequestCode.PULL_MESSAGE, fields)
        next_offset = int(reply.ext_fields.get("nextBeginOffset", offset))
        if reply.code != ResponseCode.SUCCESS:
            return [], next_offset
        messages, body, pos = [], reply.body, 0
        while pos < len(body):
            record = decode_record(body, pos)
            messages.append((record.queue_offset, record.body))
            pos += read_total_size(body, pos)
        return messages, next_offset


class V2Reader(_Reader):
    """RocketMQ 5's offset-based PullMessage on each replica's gRPC port."""

    name = "v2"

    def __init__(self, topic: str, group: str, history: History) -> None:
        super().__init__(topic, group, history)
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def close(self, process: Process) -> None:
        channel = self._channels.pop(process.name, None)
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.close(None)

    async def pull(self, process: Process, queue: int, offset: int) -> tuple[list[Any], int]:
        channel = self._channels.get(process.name)
        if channel is None:
            channel = grpc.aio.insecure_channel(process.daemon.endpoint)
            self._channels[process.name] = channel
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = s.PullMessageRequest(
            group=d.Resource(name=self.group),
            message_queue=d.MessageQueue(topic=d.Resource(name=self.topic), id=queue),
            offset=offset,
            batch_size=64,
            filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        )
        messages, next_offset = [], offset
        async for reply in stub.PullMessage(request, metadata=V2_METADATA,
                                            timeout=CALL_TIMEOUT_S):  # fmt: skip
            if reply.HasField("message"):
                props = reply.message.system_properties
                messages.append((props.queue_offset, reply.message.body))
            elif reply.WhichOneof("content") == "next_offset":
                next_offset = reply.next_offset
        return messages, next_offset
