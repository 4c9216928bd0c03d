"""The remoting listener of a real broker daemon (``--remoting-listen 127.0.0.1:0``), driven by
a raw asyncio client of these tests: pipelining (replies by opaque, in completion order, a long
poll woken by a send), unknown codes, oneway requests, garbage frames, a ROCKETMQ-serialized
request answered in JSON, and the NameServer / send / pull / offset / heartbeat codes."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import pytest
from wharf.broker.frontends.remoting.batch import BatchMessage, encode_messages
from wharf.broker.frontends.remoting.headers import parse_send_message_request_header
from wharf.broker.kit.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode, SerializeType
from wharf.broker.kit.remoting.frame import FrameDecoder, RemotingCommand, encode
from wharf.store.codec.ids import decode_offset_msg_id
from wharf.store.codec.records import decode_record

from tests.harness import BrokerProcess, Daemons

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker(
        "remoting",
        settings={"defaultTopicQueueNums": 4},
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    )


class Client:
    """A raw remoting connection: ``send`` frames, ``reply`` reads the next command."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []
        self.raw = bytearray()  # every byte received (to check serialize types)
        self.opaque = 0

    def send(
        self,
        code: int,
        fields: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        flag: int = 0,
        serialize_type: SerializeType = SerializeType.JSON,
        version: int = 0,
    ) -> int:
        self.opaque += 1
        cmd = RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=flag,
            version=version,
            ext_fields={k: str(v) for k, v in (fields or {}).items()},
            body=body,
        )
        self.writer.write(encode(cmd, serialize_type))
        return self.opaque

    async def reply(self, wait: float = TIMEOUT) -> RemotingCommand:
        while not self.pending:
            data = await asyncio.wait_for(self.reader.read(65536), wait)
            if not data:
                raise ConnectionError("closed by the broker")
            self.raw += data
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    async def call(
        self,
        code: int,
        fields: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        version: int = 0,
    ) -> RemotingCommand:
        """Send a request and return its response; the broker's own requests that come first
        (NOTIFY_CONSUMER_IDS_CHANGED, written before a heartbeat's response as Apache's
        broker does) stay queued for ``reply``. ``version``: the request's, as a Java client
        stamps its MQVersion.CURRENT_VERSION (4.9.8: 409)."""
        opaque = self.send(code, fields, body, version=version)
        while True:
            while not any(c.is_response for c in self.pending):
                data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT)
                if not data:
                    raise ConnectionError("closed by the broker")
                self.raw += data
                self.pending.extend(self.decoder.feed(data))
            response = next(c for c in self.pending if c.is_response)
            self.pending.remove(response)
            assert response.opaque == opaque
            return response


def _send_fields(
    topic: str, queue_id: int, properties: str = "", batch: bool = False
) -> dict[str, Any]:
    return {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue_id,
        "sysFlag": 0,
        "bornTimestamp": 1,
        "flag": 0,
        "properties": properties,
        "reconsumeTimes": 0,
        "unitMode": "false",
        "batch": "1" if batch else "0",
    }


def _pull_fields(
    topic: str, queue_id: int, offset: int, sys_flag: int, wait_ms: int = 0
) -> dict[str, Any]:
    return {
        "consumerGroup": "CG",
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": 32,
        "sysFlag": sys_flag,
        "commitOffset": 0,
        "suspendTimeoutMillis": wait_ms,
        "subscription": "*",
        "subVersion": 0,
    }


def _records(body: bytes) -> list[Any]:
    out, pos = [], 0
    while pos < len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        out.append(decode_record(body, pos))
        pos += size
    return out


async def test_route_names_the_remoting_address(client: Client, broker: BrokerProcess) -> None:
    reply = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "route-t"})
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    route = json.loads(reply.body)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": broker.remoting_endpoint}
    assert route["queueDatas"][0]["readQueueNums"] == 4
    assert route["queueDatas"][0]["perm"] == 6
    retry = json.loads(
        (await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%CG_X"})).body
    )
    assert retry["queueDatas"][0]["writeQueueNums"] == 1
    topics = json.loads((await client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)
    assert "route-t" in topics["topicList"]
    cluster = json.loads((await client.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert cluster["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


async def test_pipelined_requests_are_answered_by_opaque(
    client: Client, broker: BrokerProcess
) -> None:
    await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "pipe-t"})
    # A long poll on an empty queue (suspend flag), then two quick requests behind it.
    pull = client.send(RequestCode.PULL_MESSAGE, _pull_fields("pipe-t", 2, 0, 2 | 4, 20_000))
    max_offset = client.send(RequestCode.GET_MAX_OFFSET, {"topic": "pipe-t", "queueId": 2})
    unknown = client.send(999, {"x": 1})
    first, second = await client.reply(), await client.reply()
    assert {first.opaque, second.opaque} == {max_offset, unknown}  # not held behind the pull
    # A send to the queue wakes the parked pull.
    send = client.send(
        RequestCode.SEND_MESSAGE, _send_fields("pipe-t", 2, "TAGS\x01TagP\x02KEYS\x01kp\x02"), b"hi"
    )
    replies = {r.opaque: r for r in [await client.reply(), await client.reply()]}
    assert set(replies) == {send, pull}
    assert replies[send].code == ResponseCode.SUCCESS
    assert replies[pull].code == ResponseCode.SUCCESS, replies[pull].remark
    assert replies[pull].ext_fields["nextBeginOffset"] == "1"
    (record,) = _records(replies[pull].body)
    assert (record.topic, record.body, record.properties["TAGS"]) == ("pipe-t", b"hi", "TagP")
    # The store host is the remoting address (offset ids decode to it).
    address, offset = decode_offset_msg_id(replies[send].ext_fields["msgId"])
    assert address == broker.remoting_endpoint
    assert offset == record.commit_log_offset
    assert record.store_host == broker.remoting_endpoint


async def test_unknown_code_is_not_supported_and_the_connection_stays(client: Client) -> None:
    reply = await client.call(4242)
    assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "4242" in (reply.remark or "")
    assert (await client.call(RequestCode.GET_MAX_OFFSET, {"topic": "x", "queueId": 0})).code == 0


async def test_oneway_request_gets_no_reply(client: Client) -> None:
    fields = {"consumerGroup": "CG_ONEWAY", "topic": "oneway-t", "queueId": 0, "commitOffset": 7}
    client.send(RequestCode.UPDATE_CONSUMER_OFFSET, fields, flag=FLAG_ONEWAY)
    query = client.send(
        RequestCode.QUERY_CONSUMER_OFFSET,
        {"consumerGroup": "CG_ONEWAY", "topic": "oneway-t", "queueId": 0},
    )
    reply = await client.reply()
    assert reply.opaque == query  # the oneway one was not answered
    assert reply.ext_fields["offset"] == "7"  # but it was served
    with pytest.raises(TimeoutError):
        await client.reply(wait=0.5)


async def test_garbage_closes_the_connection_and_the_broker_still_serves(
    client: Client, broker: BrokerProcess
) -> None:
    # A well-delimited frame with a header that does not parse: skipped, connection kept.
    client.writer.write(struct.pack(">ii", 4 + 5, 5) + b"{nope")
    assert (await client.call(RequestCode.GET_MAX_OFFSET, {"topic": "g", "queueId": 0})).code == 0
    # A negative length: the framing is lost, the connection is closed.
    client.writer.write(b"\xff\xff\xff\xf0garbage")
    with pytest.raises(ConnectionError):
        await client.reply()
    host, _, port = broker.remoting_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        again = Client(reader, writer)
        assert (
            await again.call(RequestCode.GET_MAX_OFFSET, {"topic": "g", "queueId": 0})
        ).code == 0
    finally:
        writer.close()
    assert broker.proc is not None and broker.proc.poll() is None


async def test_rocketmq_serialized_request_is_answered_in_json(client: Client) -> None:
    opaque = client.send(
        RequestCode.GET_MAX_OFFSET,
        {"topic": "bin-t", "queueId": 1},
        serialize_type=SerializeType.ROCKETMQ,
    )
    reply = await client.reply()
    assert reply.opaque == opaque and reply.code == ResponseCode.SUCCESS
    assert client.raw[4] == SerializeType.JSON  # the type byte of the answer
    header_length = struct.unpack_from(">i", client.raw, 4)[0] & 0xFFFFFF
    header = json.loads(client.raw[8 : 8 + header_length])
    assert header["extFields"] == {"offset": "0"}  # strings, as the C++ client needs
    assert header["flag"] == 1


async def test_batch_send_stores_each_message(client: Client, broker: BrokerProcess) -> None:
    body = encode_messages(
        [
            BatchMessage(0, b"one", {"TAGS": "A", "KEYS": "k1", "UNIQ_KEY": "U1"}),
            BatchMessage(0, b"two", {"TAGS": "B", "KEYS": "k2", "p": "v"}),
        ]
    )
    reply = await client.call(
        RequestCode.SEND_MESSAGE, _send_fields("batch-t", 1, "WAIT\x01true\x02", batch=True), body
    )
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    ids = reply.ext_fields["msgId"].split(",")
    assert len(ids) == 2 and reply.ext_fields["queueOffset"] == "0"
    pulled = await client.call(RequestCode.PULL_MESSAGE, _pull_fields("batch-t", 1, 0, 4))
    records = _records(pulled.body)
    assert [r.body for r in records] == [b"one", b"two"]
    assert records[0].properties["UNIQ_KEY"] == "U1"
    assert records[1].properties["p"] == "v" and records[1].properties["UNIQ_KEY"]
    assert [decode_offset_msg_id(i)[1] for i in ids] == [r.commit_log_offset for r in records]
    # The request's own properties after each message's, and the broker's CLUSTER: Apache's
    # 4.9.8 batch encoder appends them (a reader's map keeps the last of a name).
    assert records[0].properties == {
        "TAGS": "A", "KEYS": "k1", "UNIQ_KEY": "U1", "WAIT": "true", "CLUSTER": "DefaultCluster"
    }  # fmt: skip


async def test_a_send_is_stored_with_cluster_and_without_wait(client: Client) -> None:
    """A send as the 4.9.8 Java client makes it (Message's WAIT=true, UNIQ_KEY, KEYS, TAGS, a
    user property) is stored as Apache's 4.9.8 SendMessageProcessor stores it: CLUSTER = the
    broker's cluster added (mqadmin queryMsgById and every consumer see it), WAIT=true left
    out (9 bytes a message, meaningless once stored); a CLUSTER the client set is replaced."""
    props = "KEYS\x01k1\x02TAGS\x01TagA\x02WAIT\x01true\x02UNIQ_KEY\x01U9\x02p\x01v\x02"
    # 310 with the short field names, as the Java client sends by default.
    v2 = parse_send_message_request_header(10, _send_fields("props-t", 0, props)).to_v2_ext_fields()
    reply = await client.call(RequestCode.SEND_MESSAGE_V2, v2, b"x", version=409)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    spoofed = props + "CLUSTER\x01Elsewhere\x02"
    reply = await client.call(RequestCode.SEND_MESSAGE, _send_fields("props-t", 0, spoofed), b"y")
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    records: list[Any] = []
    while len(records) < 2:  # the second may not be dispatched to its queue yet
        pulled = await client.call(
            RequestCode.PULL_MESSAGE, _pull_fields("props-t", 0, len(records), 6, wait_ms=5000)
        )
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark
        records += _records(pulled.body)
    expected = {"KEYS": "k1", "TAGS": "TagA", "UNIQ_KEY": "U9", "p": "v", "CLUSTER": "DefaultCluster"}  # fmt: skip
    assert [r.properties for r in records] == [expected, expected]


async def test_pull_statuses(client: Client) -> None:
    await client.call(RequestCode.SEND_MESSAGE, _send_fields("status-t", 0), b"x")
    caught_up = await client.call(RequestCode.PULL_MESSAGE, _pull_fields("status-t", 0, 1, 4))
    assert caught_up.code == ResponseCode.PULL_NOT_FOUND
    assert caught_up.ext_fields["nextBeginOffset"] == "1"
    beyond = await client.call(RequestCode.PULL_MESSAGE, _pull_fields("status-t", 0, 9, 4))
    assert beyond.code == ResponseCode.PULL_OFFSET_MOVED
    empty = await client.call(RequestCode.PULL_MESSAGE, _pull_fields("status-t", 3, 5, 4))
    assert (
        empty.code == ResponseCode.PULL_OFFSET_MOVED and empty.ext_fields["nextBeginOffset"] == "0"
    )
    unknown = await client.call(RequestCode.PULL_MESSAGE, _pull_fields("no-such-t", 0, 0, 4))
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    filtered = _pull_fields("status-t", 0, 0, 4)
    filtered["subscription"] = "OtherTag"
    retry = await client.call(RequestCode.PULL_MESSAGE, filtered)
    assert retry.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert retry.ext_fields["nextBeginOffset"] == "1"


async def test_query_offset_follows_the_broker_rule(client: Client) -> None:
    await client.call(RequestCode.SEND_MESSAGE, _send_fields("offset-t", 0), b"x")
    fields = {"consumerGroup": "CG_NEW", "topic": "offset-t", "queueId": 0}
    reply = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)
    assert (reply.code, reply.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "0")
    strict = await client.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {**fields, "setZeroIfNotFound": "false"}
    )
    assert strict.code == ResponseCode.QUERY_NOT_FOUND
    negative = await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**fields, "commitOffset": -1})
    assert negative.code == ResponseCode.SUCCESS  # ignored
    # A send is acknowledged before dispatch writes its queue unit (ASYNC_FLUSH): wait for it.
    for _ in range(100):
        max_offset = await client.call(
            RequestCode.GET_MAX_OFFSET, {"topic": "offset-t", "queueId": 0}
        )
        if max_offset.ext_fields["offset"] == "1":
            break
        await asyncio.sleep(0.05)
    assert max_offset.ext_fields["offset"] == "1"
    search = await client.call(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "offset-t", "queueId": 0, "timestamp": 0}
    )
    assert search.ext_fields["offset"] == "0"


async def test_heartbeat_registers_the_consumer(client: Client) -> None:
    heartbeat = {
        "clientID": "1-127.0.0.1@T",
        "consumerDataSet": [
            {
                "consumeFromWhere": 0,
                "consumeType": 1,
                "groupName": "CG_HB",
                "messageModel": 1,
                "subscriptionDataSet": [{"subString": "*", "subVersion": "1", "topic": "hb-t"}],
            }
        ],
    }
    fields = {"consumerGroup": "CG_HB"}
    assert (await client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields)).code != 0
    reply = await client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode() + b"\n")
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    members = await client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields)
    assert json.loads(members.body) == {"consumerIdList": ["1-127.0.0.1@T"]}
    gone = {"clientID": "1-127.0.0.1@T", "consumerGroup": "CG_HB", "producerGroup": ""}
    assert (await client.call(RequestCode.UNREGISTER_CLIENT, gone)).code == ResponseCode.SUCCESS
    assert (await client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields)).code != 0


async def test_a_closed_connection_takes_its_consumer_out_of_the_group(
    client: Client, broker: BrokerProcess
) -> None:
    """The consumer's connection closes (the process exited or crashed, no UNREGISTER): it
    leaves its group at once and the member still there is told (NOTIFY_CONSUMER_IDS_CHANGED),
    as RocketMQ's broker does, not after the heartbeat expiry."""

    def heartbeat(client_id: str) -> bytes:
        data = {
            "clientID": client_id,
            "consumerDataSet": [
                {"consumeFromWhere": 0, "consumeType": 1, "groupName": "CG_CLOSE",
                 "messageModel": 1,
                 "subscriptionDataSet": [{"subString": "*", "subVersion": "1", "topic": "c-t"}]}
            ],
        }  # fmt: skip
        return json.dumps(data).encode()

    host, _, port = broker.remoting_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    leaving = Client(reader, writer)
    staying = (await leaving.call(RequestCode.HEART_BEAT, body=heartbeat("leaving@1"))).code
    assert staying == ResponseCode.SUCCESS
    reply = await client.call(RequestCode.HEART_BEAT, body=heartbeat("staying@2"))
    assert reply.code == ResponseCode.SUCCESS
    fields = {"consumerGroup": "CG_CLOSE"}
    members = await client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields)
    assert json.loads(members.body) == {"consumerIdList": ["leaving@1", "staying@2"]}
    # Each member is told when the group changes, the one that just joined included.
    told = [c for c in client.pending if not c.is_response]
    assert [c.code for c in told] == [RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
    client.pending.clear()
    writer.close()  # no UNREGISTER_CLIENT
    notified = await client.reply()  # the broker's own request to the member left
    assert notified.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and not notified.is_response
    assert notified.ext_fields["consumerGroup"] == "CG_CLOSE"
    members = await client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields)
    assert json.loads(members.body) == {"consumerIdList": ["staying@2"]}


async def test_send_errors_are_answered(client: Client) -> None:
    bad_queue = await client.call(RequestCode.SEND_MESSAGE, _send_fields("err-t", 99), b"x")
    assert bad_queue.code != ResponseCode.SUCCESS and bad_queue.remark
    empty = await client.call(RequestCode.SEND_MESSAGE, _send_fields("err-t", 0), b"")
    assert empty.code == ResponseCode.MESSAGE_ILLEGAL
    broken_batch = await client.call(
        RequestCode.SEND_MESSAGE, _send_fields("err-t", 0, batch=True), b"\x00\x00\x00\x05"
    )
    assert broken_batch.code == ResponseCode.MESSAGE_ILLEGAL
    missing = await client.call(RequestCode.SEND_MESSAGE, {"topic": "err-t"}, b"x")
    assert missing.code == ResponseCode.SYSTEM_ERROR and "producerGroup" in (missing.remark or "")
    assert (
        await client.call(RequestCode.GET_MAX_OFFSET, {"topic": "err-t", "queueId": 0})
    ).code == 0


async def test_lite_pull_consumer_requests_as_the_4_9_8_client_sends_them(
    client: Client,
) -> None:
    """A DefaultLitePullConsumer's broker traffic for one queue (issue 66 item 3), with the
    fields the 4.9.8 client sets: RemoteBrokerOffsetStore.fetchConsumeOffsetFromBroker (14 with
    ``bname``), pullSyncImpl (sysFlag 22 = suspend | subscription | lite, 20 s suspend, 10 a
    pull), updateConsumeOffsetToBroker (15, oneway). Each record comes once with its own
    queue offset and ``nextBeginOffset`` past it: the client's ProcessQueue keys records by
    queue offset, and a record delivered twice would leave its ``consumeOffset`` at -1.
    The ``consumerOffset is -1`` that commitSync() logs otherwise is the client's own, for
    assigned queues poll() has not returned a record from (README.md). This pins the answers
    that finding rests on; it passed before any change."""
    for i in range(3):
        sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("lite-t", 2), b"l%d" % i)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    queue = {"consumerGroup": "CG_LITE", "topic": "lite-t", "queueId": 2, "bname": "b"}
    start = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, queue)
    assert (start.code, start.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
    offset, seen = 0, []
    for _ in range(20):
        pull = {**queue, "queueOffset": offset, "maxMsgNums": 10, "sysFlag": 22,
                "commitOffset": 0, "suspendTimeoutMillis": 300, "subscription": "*",
                "subVersion": 0, "expressionType": "TAG"}  # fmt: skip
        reply = await client.call(RequestCode.PULL_MESSAGE, pull)
        if reply.code == ResponseCode.SUCCESS:
            seen += [(r.queue_offset, r.body) for r in _records(reply.body)]
        else:
            assert reply.code == ResponseCode.PULL_NOT_FOUND, (reply.code, reply.remark)
        offset = int(reply.ext_fields["nextBeginOffset"])
        if len(seen) == 3 and reply.code == ResponseCode.PULL_NOT_FOUND:
            break
    assert seen == [(0, b"l0"), (1, b"l1"), (2, b"l2")]
    assert offset == 3
    client.send(RequestCode.UPDATE_CONSUMER_OFFSET, {**queue, "commitOffset": 3}, flag=FLAG_ONEWAY)
    for _ in range(100):  # a oneway request runs beside the next one: wait for it
        committed = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, queue)
        if committed.ext_fields.get("offset") == "3":
            break
        await asyncio.sleep(0.02)
    assert committed.ext_fields["offset"] == "3"


async def test_a_subscription_change_notifies_the_group(client: Client) -> None:
    """A member's heartbeat that adds or drops a topic sends NOTIFY_CONSUMER_IDS_CHANGED, as
    Apache's ConsumerManager.registerConsumer (ConsumerGroupInfo.updateSubscription true): a
    DefaultLitePullConsumer that subscribes after start() heartbeats at once
    (sendHeartbeatToAllBrokerWithLock) and rebalances on that notice, not on its 20 s timer.
    The same subscriptions again notify nobody."""

    def heartbeat(*topics: str) -> bytes:
        subs = [{"subString": "*", "subVersion": 1, "topic": t, "expressionType": "TAG"}
                for t in topics]  # fmt: skip
        data = {"clientID": "lite@sub", "consumerDataSet": [
            {"groupName": "CG_SUB", "consumeType": "CONSUME_ACTIVELY",
             "messageModel": "CLUSTERING", "subscriptionDataSet": subs}]}  # fmt: skip
        return json.dumps(data).encode()

    async def notices(*topics: str) -> list[int]:
        reply = await client.call(RequestCode.HEART_BEAT, body=heartbeat(*topics))
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        told = [c.code for c in client.pending if not c.is_response]
        client.pending.clear()
        return told

    notify = RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
    assert await notices("sub-a") == [notify]  # joined
    assert await notices("sub-a") == []  # nothing changed
    assert await notices("sub-a", "sub-b") == [notify]  # subscribe(sub-b) after start()
    assert await notices("sub-b") == [notify]  # unsubscribe(sub-a)
    assert await notices("sub-b") == []
