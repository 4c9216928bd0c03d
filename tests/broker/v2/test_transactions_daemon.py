"""Transactional messages through the daemon over wharf.rocketmq.v2 stubs, with kill -9 between
the half message and its resolution and right after it: a commit is neither lost nor doubled,
a rollback never comes back, and a check-back of an unresolved half discards it after
transactionCheckMax checks when no producer answers."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import grpc
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.harness import Daemons

META = (("x-mq-client-id", "host@1@0@tx"),)
TOPIC = "Tx"


async def send_half(endpoint: str, body: str) -> str:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        m = d.Message(body=body.encode())
        m.topic.name = TOPIC
        m.system_properties.message_id = f"id-{body}"
        m.system_properties.message_type = d.TRANSACTION
        m.system_properties.body_encoding = d.IDENTITY
        reply = await service_pb2_grpc.MessagingServiceStub(channel).SendMessage(
            s.SendMessageRequest(messages=[m]), metadata=META
        )
    assert reply.status.code == d.Code.OK, reply.status
    assert reply.entries[0].transaction_id
    return reply.entries[0].transaction_id


async def end(endpoint: str, body: str, transaction_id: str, commit: bool) -> int:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        reply = await service_pb2_grpc.MessagingServiceStub(channel).EndTransaction(
            s.EndTransactionRequest(
                topic=d.Resource(name=TOPIC),
                message_id=f"id-{body}",
                transaction_id=transaction_id,
                resolution=d.COMMIT if commit else d.ROLLBACK,
                source=d.SOURCE_CLIENT,
            ),
            metadata=META,
        )
    return reply.status.code


def scrape(endpoint: str) -> str:
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


async def visible(endpoint: str) -> list[bytes]:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        out: list[bytes] = []
        for queue_id in range(2):
            reply = await stub.PullMessage(
                messaging_pb2.PullMessageRequest(
                    consumer_group="check", topic=TOPIC, queue_id=queue_id, queue_offset=0
                )
            )
            out += [m.body for m in reply.messages]
        return sorted(out)


async def test_kill_9_around_end_transaction(daemons: Daemons, tmp_path: Path) -> None:
    settings = {"defaultTopicQueueNums": 2, "flushDiskType": "SYNC_FLUSH"}
    with daemons.broker(tmp_path / "b", settings=settings) as broker:
        commit_id = await send_half(broker.endpoint, "commit")
        rollback_id = await send_half(broker.endpoint, "rollback")
        committed_id = await send_half(broker.endpoint, "committed-before")
        assert await end(broker.endpoint, "committed-before", committed_id, True) == d.Code.OK
        assert await end(broker.endpoint, "rollback", rollback_id, False) == d.Code.OK
        assert await visible(broker.endpoint) == [b"committed-before"]
        broker.kill()  # halves open and resolved, a commit a moment ago

        broker.start()
        assert await end(broker.endpoint, "commit", commit_id, True) == d.Code.OK
        # Repeats after the restart (a producer retrying, a check-back answered late):
        # answered OK, nothing written.
        assert await end(broker.endpoint, "committed-before", committed_id, True) == d.Code.OK
        assert await end(broker.endpoint, "rollback", rollback_id, True) == d.Code.OK
        broker.kill()  # right after the commit

        broker.start()
        assert await end(broker.endpoint, "commit", commit_id, True) == d.Code.OK
        assert await visible(broker.endpoint) == [b"commit", b"committed-before"]
        bad = await end(broker.endpoint, "commit", "12345", True)
        assert bad == d.Code.INVALID_TRANSACTION_ID


async def test_unanswered_half_is_discarded_after_check_max(
    daemons: Daemons, tmp_path: Path
) -> None:
    settings = {
        "defaultTopicQueueNums": 2,
        "transactionTimeOut": 200,
        "transactionCheckInterval": 200,
        "transactionCheckMax": 2,
    }
    with daemons.broker(tmp_path / "b", settings=settings) as broker:
        transaction_id = await send_half(broker.endpoint, "orphan")
        for _ in range(100):  # 2 checks (no producer listens) then the discard: ~0.6 s
            await asyncio.sleep(0.1)
            if "discarded" in broker.log():
                break
        assert "transaction 0 (message id-orphan, topic Tx) discarded" in broker.log()
        # Discarded: a late commit changes nothing.
        assert await end(broker.endpoint, "orphan", transaction_id, True) == d.Code.OK
        assert await visible(broker.endpoint) == []
        text = await asyncio.to_thread(scrape, broker.metrics_endpoint)
        assert "wharf_transaction_discards_total 1.0" in text
        assert "wharf_transaction_checks_total 2.0" in text
        assert "rocketmq_half_messages 0.0" in text
