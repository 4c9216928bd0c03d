"""Transactional messages of RocketMQ 4.x producers on the remoting port of a real daemon, driven
as the Java and C++ clients drive them (the C++ client's Python binding, PyPI ``rocketmq``
0.4.4, has no TransactionMQProducer): HEART_BEAT with the producer group, SEND_MESSAGE with
``TRAN_MSG``/``PGROUP`` and sysFlag TRANSACTION_PREPARED, END_TRANSACTION oneway; one half
committed, one rolled back, one left unknown and resolved through CHECK_TRANSACTION_STATE (39)
sent by the broker on the producer's connection. A raw pull and the real C++ PushConsumer see
exactly the committed ones."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from wharf.broker.frontends.remoting.headers import properties_to_string
from wharf.broker.kit.remoting.codes import (
    FLAG_ONEWAY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    RequestCode,
    ResponseCode,
)
from wharf.broker.kit.remoting.frame import RemotingCommand
from wharf.store.codec.ids import decode_offset_msg_id
from wharf.store.codec.records import decode_record

from tests.broker.remoting.test_cpp_client import run
from tests.broker.remoting.test_server import Client, _pull_fields, _records, _send_fields
from tests.harness import BrokerProcess, Daemons

PRODUCER = "PG_TX"
CLIENT_ID = "127.0.0.1@tx-test"
SETTINGS = {
    "defaultTopicQueueNums": 4,
    "transactionTimeOut": 500,  # ms: the first check-back about 0.5 s after the send
    "transactionCheckInterval": 500,
}


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker(
        "remoting-tx",
        settings=SETTINGS,
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    )


class TxClient(Client):
    """The raw client, with the broker's requests (CHECK_TRANSACTION_STATE) that arrive while a
    call waits for its answer kept aside in ``requests`` instead of taken for the answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.requests: list[RemotingCommand] = []

    async def call(
        self, code: int, fields: dict[str, Any] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        opaque = self.send(code, fields, body)
        while True:
            cmd = await self.reply()
            if not cmd.is_response:
                self.requests.append(cmd)
                continue
            assert cmd.opaque == opaque
            return cmd

    async def next_request(self, code: int, wait: float) -> RemotingCommand:
        """The next broker -> client request of ``code`` (other commands are skipped)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            while self.requests:
                cmd = self.requests.pop(0)
                if cmd.code == code:
                    return cmd
            cmd = await self.reply(max(deadline - loop.time(), 0.01))
            if not cmd.is_response:
                self.requests.append(cmd)


async def _connect(broker: BrokerProcess) -> TxClient:
    host, _, port = broker.remoting_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    return TxClient(reader, writer)


@pytest.fixture
async def client(broker: BrokerProcess) -> AsyncIterator[TxClient]:
    connected = await _connect(broker)
    yield connected
    connected.writer.close()


async def _heartbeat(client: TxClient, group: str = PRODUCER, client_id: str = CLIENT_ID) -> None:
    data = {"clientID": client_id, "consumerDataSet": [], "producerDataSet": [{"groupName": group}]}
    reply = await client.call(RequestCode.HEART_BEAT, body=json.dumps(data).encode())
    assert reply.code == ResponseCode.SUCCESS, reply.remark


async def _send_half(client: TxClient, topic: str, body: str, uniq: str) -> RemotingCommand:
    props = {"TRAN_MSG": "true", "PGROUP": PRODUCER, "UNIQ_KEY": uniq, "KEYS": body}
    fields = _send_fields(topic, 0, properties_to_string(props))
    fields.update(producerGroup=PRODUCER, sysFlag=TRANSACTION_PREPARED_TYPE)
    reply = await client.call(RequestCode.SEND_MESSAGE, fields, body.encode())
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return reply


def _end_fields(send: RemotingCommand, uniq: str, how: int, **extra: Any) -> dict[str, Any]:
    """END_TRANSACTION's header as the clients make it from the send result."""
    _, log_offset = decode_offset_msg_id(send.ext_fields["msgId"])
    return {
        "producerGroup": PRODUCER,
        "tranStateTableOffset": send.ext_fields["queueOffset"],
        "commitLogOffset": log_offset,
        "commitOrRollback": how,
        "fromTransactionCheck": "false",
        "msgId": uniq,
        "transactionId": uniq,
        **extra,
    }


async def _pull_bodies(client: TxClient, topic: str) -> list[str]:
    reply = await client.call(RequestCode.PULL_MESSAGE, _pull_fields(topic, 0, 0, 0))
    if reply.code == ResponseCode.PULL_NOT_FOUND:
        return []
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    records = _records(reply.body)
    assert all(r.sys_flag & TRANSACTION_ROLLBACK_TYPE == 0 for r in records)
    return [r.body.decode() for r in records]


async def test_commit_rollback_and_check_back(client: TxClient) -> None:
    topic = "tx-t"
    await _heartbeat(client)
    committed = await _send_half(client, topic, "tx-commit", "U-COMMIT")
    rolled_back = await _send_half(client, topic, "tx-rollback", "U-ROLLBACK")
    unknown = await _send_half(client, topic, "tx-unknown", "U-UNKNOWN")
    # Half messages: nothing visible yet.
    assert await _pull_bodies(client, topic) == []
    # The clients send END oneway: no answer comes.
    for send, uniq, how in (
        (committed, "U-COMMIT", TRANSACTION_COMMIT_TYPE),
        (rolled_back, "U-ROLLBACK", TRANSACTION_ROLLBACK_TYPE),
        (unknown, "U-UNKNOWN", TRANSACTION_NOT_TYPE),
    ):
        client.send(RequestCode.END_TRANSACTION, _end_fields(send, uniq, how), flag=FLAG_ONEWAY)
    # The unknown one comes back as CHECK_TRANSACTION_STATE on this (the producer's) connection.
    check = await client.next_request(RequestCode.CHECK_TRANSACTION_STATE, 15)
    assert check.flag & FLAG_ONEWAY
    fields = check.ext_fields
    assert fields["tranStateTableOffset"] == unknown.ext_fields["queueOffset"]
    assert fields["msgId"] == fields["transactionId"] == "U-UNKNOWN"
    assert fields["offsetMsgId"] == unknown.ext_fields["msgId"]
    _, log_offset = decode_offset_msg_id(unknown.ext_fields["msgId"])
    assert fields["commitLogOffset"] == str(log_offset)
    half = decode_record(check.body, 0)  # MessageDecoder.encode of the half
    assert half.topic == topic and half.queue_id == 0
    assert half.body == b"tx-unknown"
    assert half.queue_offset == int(fields["tranStateTableOffset"])
    assert half.commit_log_offset == log_offset
    assert half.properties["PGROUP"] == PRODUCER
    assert half.properties["UNIQ_KEY"] == "U-UNKNOWN"
    # The producer's checker answers: commit, flagged fromTransactionCheck.
    answer = {
        "producerGroup": PRODUCER,
        "tranStateTableOffset": fields["tranStateTableOffset"],
        "commitLogOffset": fields["commitLogOffset"],
        "commitOrRollback": TRANSACTION_COMMIT_TYPE,
        "fromTransactionCheck": "true",
        "msgId": fields["msgId"],
        "transactionId": fields["transactionId"],
    }
    client.send(RequestCode.END_TRANSACTION, answer, flag=FLAG_ONEWAY)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while (bodies := await _pull_bodies(client, topic)) != ["tx-commit", "tx-unknown"]:
        assert loop.time() < deadline, bodies
        await asyncio.sleep(0.1)
    # A repeated END (a late check answer) changes nothing and is answered OK when not oneway.
    again = await client.call(
        RequestCode.END_TRANSACTION, _end_fields(committed, "U-COMMIT", TRANSACTION_COMMIT_TYPE)
    )
    assert again.code == ResponseCode.SUCCESS, again.remark
    client.requests.clear()  # checks sent before the END was in
    await asyncio.sleep(1.2)  # two check rounds: nothing is open, nothing is asked
    assert await _pull_bodies(client, topic) == ["tx-commit", "tx-unknown"]
    assert [c for c in client.requests if c.code == RequestCode.CHECK_TRANSACTION_STATE] == []


async def test_end_transaction_is_checked(client: TxClient) -> None:
    topic = "tx-errors"
    await _heartbeat(client)
    send = await _send_half(client, topic, "tx-e", "U-E")
    commit = TRANSACTION_COMMIT_TYPE
    wrong_group = await client.call(
        RequestCode.END_TRANSACTION, _end_fields(send, "U-E", commit, producerGroup="PG_OTHER")
    )
    assert wrong_group.code == ResponseCode.SYSTEM_ERROR
    assert wrong_group.remark == "The producer group wrong"
    wrong_offset = await client.call(
        RequestCode.END_TRANSACTION, _end_fields(send, "U-E", commit, commitLogOffset=1)
    )
    assert wrong_offset.code == ResponseCode.SYSTEM_ERROR
    unknown = await client.call(
        RequestCode.END_TRANSACTION, _end_fields(send, "U-E", commit, tranStateTableOffset=99999)
    )
    assert unknown.code == ResponseCode.SYSTEM_ERROR
    assert unknown.remark and "Find prepared transaction message failed" in unknown.remark
    missing = await client.call(RequestCode.END_TRANSACTION, {"producerGroup": PRODUCER})
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert await _pull_bodies(client, topic) == []
    rollback = await client.call(
        RequestCode.END_TRANSACTION, _end_fields(send, "U-E", TRANSACTION_ROLLBACK_TYPE)
    )
    assert rollback.code == ResponseCode.SUCCESS, rollback.remark
    await asyncio.sleep(0.2)
    assert await _pull_bodies(client, topic) == []


async def test_check_back_goes_to_the_producer_group(broker: BrokerProcess) -> None:
    """Two producer groups on two connections: a half is checked on its group's connection
    (whichever connection sent it); a half whose producer is gone is sent nowhere."""
    one, two = await _connect(broker), await _connect(broker)
    try:
        await _heartbeat(one, "PG_ONE", "127.0.0.1@one")
        await _heartbeat(two, "PG_TWO", "127.0.0.1@two")

        async def send_half(uniq: str) -> None:
            props = {"TRAN_MSG": "true", "PGROUP": "PG_TWO", "UNIQ_KEY": uniq}
            fields = _send_fields("tx-groups", 1, properties_to_string(props))
            fields.update(producerGroup="PG_TWO", sysFlag=TRANSACTION_PREPARED_TYPE)
            sent = await one.call(RequestCode.SEND_MESSAGE, fields, b"two")  # sent on "one"
            assert sent.code == ResponseCode.SUCCESS, sent.remark

        await send_half("U-TWO")
        check = await two.next_request(RequestCode.CHECK_TRANSACTION_STATE, 15)
        assert check.ext_fields["msgId"] == "U-TWO"
        assert decode_record(check.body, 0).queue_id == 1
        end = {
            "producerGroup": "PG_TWO",
            "tranStateTableOffset": check.ext_fields["tranStateTableOffset"],
            "commitLogOffset": check.ext_fields["commitLogOffset"],
            "commitOrRollback": TRANSACTION_ROLLBACK_TYPE,
            "fromTransactionCheck": "true",
            "msgId": "U-TWO",
        }
        reply = await two.call(RequestCode.END_TRANSACTION, end)
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        # PG_TWO's producer leaves: its next half is checked on no connection.
        two.writer.close()
        await send_half("U-ORPHAN")
        await asyncio.sleep(1.5)  # three check rounds
        await _heartbeat(one, "PG_ONE", "127.0.0.1@one")  # reads what came meanwhile
        assert [c for c in one.requests if c.code == RequestCode.CHECK_TRANSACTION_STATE] == []
    finally:
        one.writer.close()
        two.writer.close()


@pytest.mark.slow
def test_cpp_consumer_sees_only_committed(broker: BrokerProcess, tmp_path: Path) -> None:
    """The real C++ PushConsumer on a topic with committed, rolled back and checked halves."""

    async def produce() -> None:
        client = await _connect(broker)
        try:
            await _heartbeat(client, PRODUCER, "127.0.0.1@cpp-tx")
            for i in range(6):
                uniq = f"U-CPP-{i}"
                send = await _send_half(client, "tx-cpp", f"cpp-{i}", uniq)
                how = (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_NOT_TYPE)
                client.send(
                    RequestCode.END_TRANSACTION,
                    _end_fields(send, uniq, how[i % 3]),
                    flag=FLAG_ONEWAY,
                )
            resolved: set[bytes] = set()
            while len(resolved) < 2:  # cpp-2 and cpp-5 come back: commit one, roll back one
                check = await client.next_request(RequestCode.CHECK_TRANSACTION_STATE, 15)
                body = decode_record(check.body, 0).body
                answer = {
                    "producerGroup": PRODUCER,
                    "tranStateTableOffset": check.ext_fields["tranStateTableOffset"],
                    "commitLogOffset": check.ext_fields["commitLogOffset"],
                    "commitOrRollback": TRANSACTION_COMMIT_TYPE
                    if body == b"cpp-2"
                    else TRANSACTION_ROLLBACK_TYPE,
                    "fromTransactionCheck": "true",
                    "msgId": check.ext_fields["msgId"],
                }
                client.send(RequestCode.END_TRANSACTION, answer, flag=FLAG_ONEWAY)
                resolved.add(body)
            deadline = asyncio.get_running_loop().time() + 10
            while sorted(await _pull_bodies(client, "tx-cpp")) != ["cpp-0", "cpp-2", "cpp-3"]:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
        finally:
            client.writer.close()

    asyncio.run(produce())
    got = run(broker, tmp_path / "home", "consume", group="CG_TX", topic="tx-cpp",
              bodies=["cpp-0", "cpp-2", "cpp-3"], timeout=40, settle_s=2)  # fmt: skip
    assert sorted(m["body"] for m in got["received"]) == ["cpp-0", "cpp-2", "cpp-3"]
