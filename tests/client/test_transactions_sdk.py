"""The SDK's transactional producer and the ``wharf tx`` CLI against the real daemon: commit on a
clean exit, rollback when the block raises, a check-back answered by another producer's checker
for a producer that died before its END, and an open half listed and resolved by hand."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wharf.client import Admin, Producer, PullConsumer

from tests.harness import REPO_ROOT, BrokerProcess, Daemons

pytestmark = pytest.mark.slow
TOPIC = "Payments"


async def visible(endpoint: str) -> list[bytes]:
    async with PullConsumer(endpoint, "tx-check") as puller:
        out: list[bytes] = []
        for queue in await puller.queues(TOPIC):
            out += [m.body for m in (await puller.pull(queue, 0, max_messages=100)).messages]
        return sorted(out)


def run_cli(endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wharf.client.cli.main", "--endpoints", endpoint, *args],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip


def cli(endpoint: str, *args: str) -> Any:
    proc = run_cli(endpoint, "--json", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def broker(daemons: Daemons, tmp_path: Path) -> Iterator[BrokerProcess]:
    settings = {
        "defaultTopicQueueNums": 2,
        "transactionTimeOut": 500,
        "transactionCheckInterval": 500,
    }
    with daemons.broker(tmp_path / "broker", settings=settings) as process:
        yield process


async def test_commit_rollback_check_back_and_cli(broker: BrokerProcess) -> None:
    ep = broker.endpoint
    async with Admin(ep) as admin:
        await admin.create_topic(TOPIC, queue_nums=2)
    async with Producer(ep) as producer:
        async with producer.transaction() as tx:
            await tx.send(TOPIC, b"paid-1")
            await tx.send(TOPIC, b"paid-2")
            assert await visible(ep) == []  # nothing visible before the commit
        assert tx.resolution == "committed"
        with pytest.raises(RuntimeError):
            async with producer.transaction() as failed:
                await failed.send(TOPIC, b"never")
                raise RuntimeError("the local transaction failed")
        assert failed.resolution == "rolled back"
        # A producer that "dies" between its send and its END: the halves stay open.
        orphan = producer.transaction()
        await orphan.send(TOPIC, b"orphan-commit")
        await orphan.send(TOPIC, b"orphan-rollback")
        await orphan.send(TOPIC, b"by-hand", properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
    assert await visible(ep) == [b"paid-1", b"paid-2"]

    asked: list[str] = []

    def checker(message: Any) -> bool | None:
        body = message.body.decode()
        asked.append(body)
        return {"orphan-commit": True, "orphan-rollback": False}.get(body)

    async with Producer(ep, transaction_checker=checker, transaction_topics=[TOPIC]):
        for _ in range(100):  # the broker checks back after transactionTimeOut (0.5 s)
            if await visible(ep) == [b"orphan-commit", b"paid-1", b"paid-2"] and (
                "orphan-rollback" in asked
            ):
                break
            await asyncio.sleep(0.1)
    assert await visible(ep) == [b"orphan-commit", b"paid-1", b"paid-2"]
    assert "by-hand" not in asked  # immune for 60 s: not checked yet

    open_ones = cli(ep, "tx", "list", "--topic", TOPIC)
    assert [m["topic"] for m in open_ones] == [TOPIC]
    by_hand = open_ones[0]["transaction_id"]
    assert cli(ep, "tx", "commit", by_hand)["resolution"] == "committed"
    assert cli(ep, "tx", "list") == []
    assert await visible(ep) == [b"by-hand", b"orphan-commit", b"paid-1", b"paid-2"]
    proc = run_cli(ep, "tx", "rollback", by_hand)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # not open any more: NOT_FOUND


async def test_end_transactions_resolves_a_writer_s_halves_after_a_kill_9(
    broker: BrokerProcess,
) -> None:
    """The batch END the Spark sink commits with: refused without a prefix or for another
    writer's half (nothing resolved); after kill -9 between the halves and the END, one call
    commits the named ranges, rolls back the writer's other halves, and a repeat is a no-op."""
    import grpc
    from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

    def halves(ids: list[str]) -> messaging_pb2.SendMessageRequest:
        return messaging_pb2.SendMessageRequest(
            topic=TOPIC, queue_id=0, messages=[
                common_pb2.Message(body=i.encode(), unique_id=i, properties={"TRAN_MSG": "true"})
                for i in ids
            ],
        )  # fmt: skip

    def end(stub, first: int, count: int, prefix: str, rest: bool = True):  # type: ignore[no-untyped-def]
        request = messaging_pb2.EndTransactionsRequest(
            msg_id_prefix=prefix, commit=True, rollback_rest=rest
        )
        request.ranges.add(first=first, count=count)
        return stub.EndTransactions(request, timeout=10)

    async with Admin(broker.endpoint) as admin:
        await admin.create_topic(TOPIC, queue_nums=2)
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        sent = stub.SendMessage(halves(["w.0.0", "w.0.1", "w.0.2"]), timeout=10).results
        assert [r.queue_offset for r in sent] == [0, 1, 2]
        stub.SendMessage(halves(["w.0.0"]), timeout=10)  # a failed attempt's copy: id 3
        stub.SendMessage(halves(["v.0.0"]), timeout=10)  # another writer's: id 4
        with pytest.raises(grpc.RpcError) as err:
            end(stub, 0, 3, "")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as err:
            end(stub, 2, 3, "w.0.")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert "v.0.0" in (err.value.details() or "")
    broker.kill()
    broker.start()
    assert await visible(broker.endpoint) == []
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        reply = end(stub, 0, 3, "w.0.")
        assert (reply.committed, reply.rolled_back, reply.resolved_before) == (3, 1, 0)
        again = end(stub, 0, 3, "w.0.")
        assert (again.committed, again.rolled_back, again.resolved_before) == (0, 0, 3)
    assert await visible(broker.endpoint) == [b"w.0.0", b"w.0.1", b"w.0.2"]
    async with Admin(broker.endpoint) as admin:
        assert [h.msg_id for h in (await admin.list_half_messages(TOPIC)).messages] == ["v.0.0"]
