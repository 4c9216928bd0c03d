"""The admin and query codes of mqadmin and the Dashboard on a real daemon's remoting port, with
the raw client: topics (17, 215, 21, 202), groups (200, 208, 203), the runtime table (28) and
messages by offset (33) and key (12), bodies checked in fastjson's shape (MessageQueue-keyed
maps included)."""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time
from typing import Any

import pytest
from wharf.broker.config import BrokerConfig, StoreConfig
from wharf.broker.frontends.remoting.admin import fastjson_mq_table, java_string_hash
from wharf.broker.frontends.remoting.broker_config import (
    parse_java_properties,
    update_broker_config_response,
)
from wharf.broker.frontends.remoting.headers import properties_to_string
from wharf.broker.kit.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, RequestCode, ResponseCode
from wharf.broker.kit.remoting.frame import RemotingCommand, encode
from wharf.store.codec.ids import decode_offset_msg_id
from wharf.store.codec.records import decode_record

from tests.broker.remoting.test_server import Client, _pull_fields, _records, _send_fields
from tests.harness import BrokerProcess, Daemons


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker(
        "remoting-admin",
        settings={"defaultTopicQueueNums": 4},
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    )


def parse_mq_table(text: str) -> dict[tuple[str, str, int], Any]:
    """fastjson's ``Map<MessageQueue, V>`` (object keys) -> {(topic, brokerName, queueId): V}."""
    decoder = json.JSONDecoder()
    out: dict[tuple[str, str, int], Any] = {}
    assert text[0] == "{"
    pos = 1
    while text[pos] != "}":
        key, pos = decoder.raw_decode(text, pos)
        assert text[pos] == ":"
        value, pos = decoder.raw_decode(text, pos + 1)
        out[(key["topic"], key["brokerName"], key["queueId"])] = value
        if text[pos] == ",":
            pos += 1
    return out


def _offset_table(body: bytes) -> tuple[dict[str, Any], dict[tuple[str, str, int], Any]]:
    """An ``{..., "offsetTable": {MessageQueue: V}}`` body: (the other fields, the table)."""
    text = body.decode()
    start = text.index('"offsetTable":') + len('"offsetTable":')
    decoder = json.JSONDecoder()
    depth, pos = 0, start
    while True:  # the table's extent: braces balanced outside strings
        if text[pos] == '"':
            _, pos = decoder.raw_decode(text, pos)
            continue
        depth += {"{": 1, "}": -1}.get(text[pos], 0)
        pos += 1
        if depth == 0:
            break
    table = parse_mq_table(text[start:pos])
    rest = json.loads(text[:start] + "{}" + text[pos:])
    rest.pop("offsetTable")
    return rest, table


def test_fastjson_helpers() -> None:
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("") == 0
    assert java_string_hash("TagATagATagA") == -1266899563  # wraps as Java's int does
    text = fastjson_mq_table([("t", "b", 1, {"x": 1})])
    assert text == '{{"brokerName":"b","queueId":1,"topic":"t"}:{"x":1}}'
    assert parse_mq_table(text) == {("t", "b", 1): {"x": 1}}


async def _dispatched(client: Client, topic: str, queue_id: int, count: int) -> None:
    """Wait until the queue's max offset shows ``count`` sends (dispatch runs behind)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        reply = await client.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
        if int(reply.ext_fields.get("offset", -1)) >= count:
            return
        assert loop.time() < deadline, reply
        await asyncio.sleep(0.05)


async def _topic_config(client: Client) -> dict[str, Any]:
    reply = await client.call(RequestCode.GET_ALL_TOPIC_CONFIG)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    data = json.loads(reply.body)
    assert set(data["dataVersion"]) >= {"counter", "timestamp"}
    return dict(data["topicConfigTable"])


def _create_fields(topic: str, queues: int, perm: int = 6) -> dict[str, Any]:
    return {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": perm,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": "false",
    }


async def test_a_topic_over_127_characters_is_not_for_4x_clients(client: Client) -> None:
    """A topic over 127 characters is stored in RocketMQ 5's second record version, which 4.x
    clients cannot decode: remoting creates no such name, and a PULL of one (a topic made over
    another protocol, here by a send) is refused, naming why; the 127-character one works."""
    long, short = "r" * 200, "s" * 127
    created = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields(long, 1))
    assert created.code != ResponseCode.SUCCESS and "limit is 127" in created.remark
    created = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields(short, 1))
    assert created.code == ResponseCode.SUCCESS, created.remark
    for topic in (long, short):
        sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields(topic, 0), b"x")
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    await _dispatched(client, short, 0, 1)
    pulled = await client.call(RequestCode.PULL_MESSAGE, _pull_fields(short, 0, 0, 4))
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    assert struct.unpack_from(">I", pulled.body, 4)[0] == 0xDAA320A7  # V1, as 4.x reads it
    assert [r.topic for r in _records(pulled.body)] == [short]
    refused = await client.call(RequestCode.PULL_MESSAGE, _pull_fields(long, 0, 0, 4))
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert "RocketMQ 4.x remoting clients cannot decode" in refused.remark


async def test_topics(client: Client) -> None:
    created = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields("adm-t", 3))
    assert created.code == ResponseCode.SUCCESS, created.remark
    table = await _topic_config(client)
    config = table["adm-t"]
    assert config["topicName"] == "adm-t"
    assert (config["readQueueNums"], config["writeQueueNums"], config["perm"]) == (3, 3, 6)
    assert config["topicFilterType"] == "SINGLE_TAG" and config["order"] is False
    assert "TBW102" in table or "SCHEDULE_TOPIC_XXXX" in table  # system topics listed
    # Again: an update (RocketMQ creates or updates); PERM_INHERIT (1) is dropped.
    updated = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields("adm-t", 5, 7))
    assert updated.code == ResponseCode.SUCCESS, updated.remark
    config = (await _topic_config(client))["adm-t"]
    assert (config["readQueueNums"], config["writeQueueNums"], config["perm"]) == (5, 5, 6)
    bad = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields("bad topic!", 1))
    assert bad.code != ResponseCode.SUCCESS and bad.remark
    # Stats: every queue, fastjson's MessageQueue keys.
    for i in range(3):
        sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("adm-t", 1), b"x%d" % i)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    await _dispatched(client, "adm-t", 1, 3)
    stats = await client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "adm-t"})
    assert stats.code == ResponseCode.SUCCESS, stats.remark
    _, offsets = _offset_table(stats.body)
    assert sorted(q for _, _, q in offsets) == [0, 1, 2, 3, 4]
    name = next(b for _, b, _ in offsets)
    queue1 = offsets[("adm-t", name, 1)]
    assert (queue1["minOffset"], queue1["maxOffset"]) == (0, 3)
    assert queue1["lastUpdateTimestamp"] > 0
    assert offsets[("adm-t", name, 0)] == {"lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0}
    # Delete: gone from the table and the stats; deleting again is fine (RocketMQ's answer).
    for _ in range(2):
        deleted = await client.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "adm-t"})
        assert deleted.code == ResponseCode.SUCCESS, deleted.remark
    assert "adm-t" not in await _topic_config(client)
    missing = await client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "adm-t"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    assert missing.remark == "topic[adm-t] not exist"


async def test_groups_consume_stats_and_connections(client: Client) -> None:
    group = {
        "groupName": "CG_ADM",
        "consumeEnable": True,
        "consumeBroadcastEnable": True,
        "consumeFromMinEnable": True,
        "retryMaxTimes": 5,
        "retryQueueNums": 1,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }
    made = await client.call(
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(group).encode()
    )
    assert made.code == ResponseCode.SUCCESS, made.remark
    created = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields("adm-c", 2))
    assert created.code == ResponseCode.SUCCESS, created.remark
    for i in range(4):
        sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("adm-c", 0), b"c%d" % i)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    await _dispatched(client, "adm-c", 0, 4)
    commit = {"consumerGroup": "CG_ADM", "topic": "adm-c", "queueId": 0, "commitOffset": 3}
    assert (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == 0
    stats = await client.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CG_ADM"})
    assert stats.code == ResponseCode.SUCCESS, stats.remark
    rest, offsets = _offset_table(stats.body)
    assert rest == {"consumeTps": 0.0}
    by_queue = {(t, q): v for (t, _, q), v in offsets.items()}
    assert set(by_queue) == {("adm-c", 0), ("adm-c", 1)}
    assert by_queue[("adm-c", 0)]["brokerOffset"] == 4
    assert by_queue[("adm-c", 0)]["consumerOffset"] == 3
    assert by_queue[("adm-c", 0)]["lastTimestamp"] > 0
    assert by_queue[("adm-c", 1)]["brokerOffset"] == 0
    assert by_queue[("adm-c", 1)]["consumerOffset"] == 0
    nobody = await client.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CG_NOBODY"})
    assert nobody.code == ResponseCode.SUCCESS
    assert _offset_table(nobody.body)[1] == {}
    # Connections: none online yet, then one heartbeat.
    offline = await client.call(
        RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "CG_ADM"}
    )
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert offline.remark == "the consumer group[CG_ADM] not online"
    heartbeat = {
        "clientID": "127.0.0.1@adm",
        "consumerDataSet": [
            {
                "groupName": "CG_ADM",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [
                    {"topic": "adm-c", "subString": "TagA || TagB", "expressionType": "TAG"}
                ],
            }
        ],
    }
    beat = await client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
    assert beat.code == ResponseCode.SUCCESS, beat.remark
    listed = await client.call(
        RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "CG_ADM"}
    )
    assert listed.code == ResponseCode.SUCCESS, listed.remark
    data = json.loads(listed.body)
    [connection] = data["connectionSet"]
    assert connection["clientId"] == "127.0.0.1@adm"
    assert connection["language"] == "JAVA"
    assert connection["clientAddr"].startswith("127.0.0.1:")
    assert data["messageModel"] == "CLUSTERING"
    assert data["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
    assert data["consumeType"] == "CONSUME_PASSIVELY"
    sub = data["subscriptionTable"]["adm-c"]
    assert sub["tagsSet"] == ["TagA", "TagB"]
    assert sub["codeSet"] == [java_string_hash("TagA"), java_string_hash("TagB")]
    assert sub["expressionType"] == "TAG" and sub["subString"] == "TagA || TagB"
    # Online and not subscribed to a topic: no stats for it (RocketMQ's rule).
    commit = {"consumerGroup": "CG_ADM", "topic": "adm-other", "queueId": 0, "commitOffset": 0}
    assert (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == 0
    stats = await client.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CG_ADM"})
    assert {t for t, _, _ in _offset_table(stats.body)[1]} == {"adm-c"}


async def test_runtime_info(client: Client) -> None:
    for i in range(2):
        sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("adm-rt", 0), b"r%d" % i)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    reply = await client.call(RequestCode.GET_BROKER_RUNTIME_INFO)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    table = json.loads(reply.body)["table"]
    assert all(isinstance(v, str) for v in table.values())
    assert int(table["msgPutTotalTodayNow"]) >= 2
    assert int(table["commitLogMaxOffset"]) > 0
    assert len(table["putTps"].split(" ")) == 3
    assert table["runtime"].startswith("[ 0 days, ")
    assert int(table["bootTimestamp"]) > 0
    # Every key mqadmin clusterList (4.9.8 ClusterListSubCommand) reads.
    for key in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgGetTotalTodayNow",
                "getTransferedTps", "sendThreadPoolQueueSize", "pullThreadPoolQueueSize",
                "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills",
                "pageCacheLockTimeMills", "earliestMessageTimeStamp", "commitLogDiskRatio",
                "brokerVersionDesc"):  # fmt: skip
        assert key in table, key
    # As Apache's broker: the version's MQVersion name (clusterList's column, parsed back by
    # tools) and the store time of the log's first record (clusterList's "#Hour" = now minus
    # it: 0 read as 1970 showed 498873 hours). This store is fresh: its first record is one of
    # this module's, stored after the boot and by now.
    assert table["brokerVersionDesc"] == "V4_9_8"
    assert table["wharfVersion"]
    earliest = int(table["earliestMessageTimeStamp"])
    assert int(table["bootTimestamp"]) - 1000 <= earliest <= time.time() * 1000


async def test_view_and_query_messages(client: Client) -> None:
    ids = []
    for i in range(3):
        props = properties_to_string({"KEYS": f"order-{i} shared", "UNIQ_KEY": f"UQ{i:030d}"})
        sent = await client.call(
            RequestCode.SEND_MESSAGE, _send_fields("adm-q", 0, props), b"q%d" % i
        )
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        ids.append(sent.ext_fields["msgId"])
    _, offset = decode_offset_msg_id(ids[1])
    viewed = await client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
    assert viewed.code == ResponseCode.SUCCESS, viewed.remark
    record = decode_record(viewed.body, 0)
    assert record.body == b"q1" and record.commit_log_offset == offset
    assert record.store_size == len(viewed.body)
    nothing = await client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset + 1})
    assert nothing.code == ResponseCode.SYSTEM_ERROR
    assert nothing.remark == f"can not find message by the offset, {offset + 1}"

    def query(key: str, unique: bool = False) -> dict[str, Any]:
        # mqadmin queryMsgByKey / queryMsgByUniqueKey: maxNum 64 / 32, end Long.MAX_VALUE.
        fields = {"topic": "adm-q", "key": key, "maxNum": 32 if unique else 64,
                  "beginTimestamp": 0, "endTimestamp": 2**63 - 1}  # fmt: skip
        if unique:
            fields["_UNIQUE_KEY_QUERY"] = "true"
        return fields

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:  # the index is built behind the commit log
        found = await client.call(RequestCode.QUERY_MESSAGE, query("shared"))
        if found.code == ResponseCode.SUCCESS and len(_records(found.body)) == 3:
            break
        assert loop.time() < deadline, (found.code, found.remark)
        await asyncio.sleep(0.1)
    assert sorted(r.body for r in _records(found.body)) == [b"q0", b"q1", b"q2"]
    assert int(found.ext_fields["indexLastUpdatePhyoffset"]) >= 0
    assert "indexLastUpdateTimestamp" in found.ext_fields
    one = await client.call(RequestCode.QUERY_MESSAGE, query("order-2"))
    assert [r.body for r in _records(one.body)] == [b"q2"]
    unique = await client.call(RequestCode.QUERY_MESSAGE, query(f"UQ{0:030d}", unique=True))
    assert [r.body for r in _records(unique.body)] == [b"q0"]
    missing = await client.call(RequestCode.QUERY_MESSAGE, query("no-such-key"))
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    assert missing.remark == "can not find message, maybe time range not correct"


async def test_dashboard_topic_and_group_lists(client: Client, broker: BrokerProcess) -> None:
    """What the Dashboard's topic and consumer pages and mqadmin topicList -c ask, as the Java
    client asks it (MQClientAPIImpl 4.9.8): each failed the page on 3 before."""
    # getSystemTopicList: 304 names the broker to ask, then 305 there gives the system topics.
    listed = await client.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert listed.code == ResponseCode.SUCCESS, listed.remark
    names = json.loads(listed.body)
    assert names["brokerAddr"] == broker.remoting_endpoint
    cluster = json.loads((await client.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    [(cluster_name, broker_names)] = cluster["clusterAddrTable"].items()
    assert set(names["topicList"]) == {cluster_name, *broker_names}
    system = await client.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
    assert system.code == ResponseCode.SUCCESS, system.remark
    system_topics = set(json.loads(system.body)["topicList"])
    assert {"TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"} <= system_topics
    sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("adm-who", 0), b"w")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert "adm-who" not in system_topics
    # The consumer page: every subscription group (201), SubscriptionGroupConfig fields.
    group = {"groupName": "CG_DASH", "retryMaxTimes": 7, "consumeBroadcastEnable": False}
    made = await client.call(
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(group).encode()
    )
    assert made.code == ResponseCode.SUCCESS, made.remark
    wrapper = await client.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert wrapper.code == ResponseCode.SUCCESS, wrapper.remark
    data = json.loads(wrapper.body)
    assert "counter" in data["dataVersion"]
    config = data["subscriptionGroupTable"]["CG_DASH"]
    assert config["groupName"] == "CG_DASH" and config["retryMaxTimes"] == 7
    assert (config["consumeEnable"], config["consumeBroadcastEnable"]) == (True, False)
    assert (config["retryQueueNums"], config["brokerId"]) == (1, 0)
    # Who consumes a topic (300): a group with an offset on it and a group online subscribed
    # to it (a DefaultLitePullConsumer's heartbeat: CONSUME_ACTIVELY, shown by 203).
    commit = {"consumerGroup": "CG_DASH", "topic": "adm-who", "queueId": 0, "commitOffset": 1}
    assert (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == 0
    heartbeat = {
        "clientID": "127.0.0.1@lite",
        "consumerDataSet": [
            {
                "groupName": "CG_LITE",
                "consumeType": "CONSUME_ACTIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {"topic": "adm-who", "subString": "*", "expressionType": "TAG"}
                ],
                "unitMode": False,
            }
        ],
        "producerDataSet": [],
    }
    beat = await client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
    assert beat.code == ResponseCode.SUCCESS, beat.remark
    who = await client.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "adm-who"})
    assert who.code == ResponseCode.SUCCESS, who.remark
    assert json.loads(who.body) == {"groupList": ["CG_DASH", "CG_LITE"]}
    nobody = await client.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "adm-none"})
    assert json.loads(nobody.body) == {"groupList": []}
    connections = await client.call(
        RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "CG_LITE"}
    )
    assert json.loads(connections.body)["consumeType"] == "CONSUME_ACTIVELY"  # mqadmin: PULL
    # The runtime table names the protocol version every response carries (V4_9_8).
    runtime = await client.call(RequestCode.GET_BROKER_RUNTIME_INFO)
    assert json.loads(runtime.body)["table"]["brokerVersion"] == "409"
    assert runtime.version == 409


async def test_consumer_running_info_is_asked_of_the_consumer(
    client: Client, broker: BrokerProcess
) -> None:
    """307 GET_CONSUMER_RUNNING_INFO (mqadmin consumerStatus, the Dashboard's consumer client
    page): the broker asks the consumer on its own connection and relays its answer, as
    RocketMQ's AdminBrokerProcessor.callConsumer (the Java client's ClientRemotingProcessor
    answers it with its ConsumerRunningInfo). It was 3 before."""
    host, _, port = broker.remoting_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    consumer = Client(reader, writer)
    heartbeat = {
        "clientID": "127.0.0.1@running",
        "consumerDataSet": [
            {
                "groupName": "CG_RUN",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [{"topic": "adm-run", "subString": "*"}],
            }
        ],
    }
    beat = await consumer.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
    assert beat.code == ResponseCode.SUCCESS, beat.remark
    ask = {"consumerGroup": "CG_RUN", "clientId": "127.0.0.1@running", "jstackEnable": "false"}
    opaque = client.send(RequestCode.GET_CONSUMER_RUNNING_INFO, ask)
    while True:  # the consumer is asked (after the NOTIFY_CONSUMER_IDS_CHANGED of its join)
        asked = await consumer.reply()
        if asked.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            break
    assert not asked.is_response and not asked.flag & FLAG_ONEWAY
    assert asked.ext_fields == ask
    info = {"properties": {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"}, "jstack": None}
    consumer.writer.write(
        encode(
            RemotingCommand(
                code=ResponseCode.SUCCESS,
                opaque=asked.opaque,
                flag=FLAG_RESPONSE,
                body=json.dumps(info).encode(),
            )
        )
    )
    relayed = await client.reply()
    assert (relayed.opaque, relayed.code) == (opaque, ResponseCode.SUCCESS)
    assert json.loads(relayed.body) == info
    # 309 CONSUME_MESSAGE_DIRECTLY (mqadmin consumeMessage, the Dashboard's resend): the
    # consumer gets the record of msgId in the body and the broker's name in the header.
    sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("adm-run", 0), b"again")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    direct = {"consumerGroup": "CG_RUN", "clientId": "127.0.0.1@running",
              "msgId": sent.ext_fields["msgId"]}  # fmt: skip
    opaque = client.send(RequestCode.CONSUME_MESSAGE_DIRECTLY, direct)
    asked = await consumer.reply()
    assert asked.code == RequestCode.CONSUME_MESSAGE_DIRECTLY
    assert decode_record(asked.body, 0).body == b"again"
    cluster = json.loads((await client.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert asked.ext_fields == {**direct, "brokerName": next(iter(cluster["brokerAddrTable"]))}
    result = {
        "autoCommit": True,
        "consumeResult": "CR_SUCCESS",
        "order": False,
        "spentTimeMills": 1,
    }
    consumer.writer.write(encode(RemotingCommand(code=ResponseCode.SUCCESS, opaque=asked.opaque,
                                                 flag=FLAG_RESPONSE,
                                                 body=json.dumps(result).encode())))  # fmt: skip
    relayed = await client.reply()
    assert (relayed.opaque, json.loads(relayed.body)) == (opaque, result)
    unknown = await client.call(RequestCode.CONSUME_MESSAGE_DIRECTLY, {**direct, "msgId": "XY"})
    assert unknown.code == ResponseCode.SYSTEM_ERROR
    assert unknown.remark == "can not find message by the msgId, XY"
    # A client not in the group, or gone: "not online", as RocketMQ words it.
    stranger = {**ask, "clientId": "127.0.0.1@nobody"}
    offline = await client.call(RequestCode.GET_CONSUMER_RUNNING_INFO, stranger)
    assert offline.code == ResponseCode.SYSTEM_ERROR
    assert offline.remark == "The Consumer <CG_RUN> <127.0.0.1@nobody> not online"
    # The consumer's connection closing while it is asked: an error, not a hang.
    client.send(RequestCode.GET_CONSUMER_RUNNING_INFO, ask)
    while (await consumer.reply()).code != RequestCode.GET_CONSUMER_RUNNING_INFO:
        pass
    consumer.writer.close()
    closed = await client.reply()
    assert closed.code == ResponseCode.SYSTEM_ERROR
    assert (closed.remark or "").startswith("invoke consumer <CG_RUN> <127.0.0.1@running>")


async def test_producer_connections_and_group_deletion(client: Client) -> None:
    """204 GET_PRODUCER_CONNECTION_LIST (mqadmin producerConnection, the Dashboard's producer
    page) and 207 DELETE_SUBSCRIPTIONGROUP (mqadmin deleteSubGroup, the Dashboard's consumer
    delete), as the 4.9.8 client asks them (headers producerGroup; groupName, removeOffset):
    both were 3 before."""
    none = await client.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG_X"})
    assert none.code == ResponseCode.SYSTEM_ERROR
    assert none.remark == "the producer group[PG_X] not exist"
    heartbeat = {"clientID": "127.0.0.1@producer", "consumerDataSet": [],
                 "producerDataSet": [{"groupName": "PG_X"}]}  # fmt: skip
    beat = await client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
    assert beat.code == ResponseCode.SUCCESS, beat.remark
    listed = await client.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG_X"})
    assert listed.code == ResponseCode.SUCCESS, listed.remark
    [connection] = json.loads(listed.body)["connectionSet"]
    assert connection["clientId"] == "127.0.0.1@producer"
    assert connection["language"] == "JAVA" and connection["clientAddr"].startswith("127.0.0.1:")

    async def groups() -> dict[str, Any]:
        reply = await client.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        return dict(json.loads(reply.body)["subscriptionGroupTable"])

    async def offset(group: str) -> str | None:
        fields = {"consumerGroup": group, "topic": "adm-del", "queueId": 0,
                  "setZeroIfNotFound": "false"}  # fmt: skip
        return (await client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)).ext_fields.get(
            "offset"
        )

    for group in ("CG_DEL_KEEP", "CG_DEL_ALL"):
        made = await client.call(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            body=json.dumps({"groupName": group}).encode(),
        )
        assert made.code == ResponseCode.SUCCESS, made.remark
        commit = {"consumerGroup": group, "topic": "adm-del", "queueId": 0, "commitOffset": 5}
        assert (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == 0
    keep = await client.call(
        RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "CG_DEL_KEEP", "removeOffset": "false"}
    )
    assert keep.code == ResponseCode.SUCCESS, keep.remark
    drop = await client.call(
        RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "CG_DEL_ALL", "removeOffset": "true"}
    )
    assert drop.code == ResponseCode.SUCCESS, drop.remark
    table = await groups()
    assert "CG_DEL_KEEP" not in table and "CG_DEL_ALL" not in table
    assert await offset("CG_DEL_KEEP") == "5"  # removeOffset false: the offsets stay
    assert await offset("CG_DEL_ALL") is None
    again = await client.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "CG_DEL_ALL"})
    assert again.code == ResponseCode.SUCCESS  # an unknown group, as RocketMQ's


async def test_reset_offset_by_time(client: Client, broker: BrokerProcess) -> None:
    """222 INVOKE_BROKER_TO_RESET_OFFSET (mqadmin resetOffsetByTime, the Dashboard's reset
    offset) as the 4.9.8 client asks it (topic, group, timestamp, isForce): per queue the
    offset at the time, sent as 220 RESET_CONSUMER_CLIENT_OFFSET to the online members and
    answered as ResetOffsetBody; an offline group is 206, on which the tools commit the
    offsets themselves (Broker2Client.resetOffset). It was 3, which failed both tools."""
    created = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields("adm-rst", 2))
    assert created.code == ResponseCode.SUCCESS, created.remark
    for i in range(3):
        sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("adm-rst", 0), b"a%d" % i)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    await _dispatched(client, "adm-rst", 0, 3)
    await asyncio.sleep(0.05)
    middle = int(time.time() * 1000)  # between the two sends (store times in ms)
    await asyncio.sleep(0.05)
    for i in range(2):
        sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("adm-rst", 0), b"b%d" % i)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    await _dispatched(client, "adm-rst", 0, 5)
    search = await client.call(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        {"topic": "adm-rst", "queueId": 0, "timestamp": middle},
    )
    at_middle = int(search.ext_fields["offset"])
    assert at_middle == 3
    for queue_id, committed in ((0, 4), (1, 0)):
        commit = {"consumerGroup": "CG_RST", "topic": "adm-rst", "queueId": queue_id,
                  "commitOffset": committed}  # fmt: skip
        assert (await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == 0
    ask = {"topic": "adm-rst", "group": "CG_RST", "timestamp": middle, "isForce": "false"}
    offline = await client.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ask)
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert offline.remark == (
        f"Consumer not online, so can not reset offset, Group: CG_RST Topic: adm-rst "
        f"Timestamp: {middle}"
    )
    host, _, port = broker.remoting_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    consumer = Client(reader, writer)
    heartbeat = {"clientID": "127.0.0.1@reset", "consumerDataSet": [
        {"groupName": "CG_RST", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
         "subscriptionDataSet": [{"topic": "adm-rst", "subString": "*"}]}]}  # fmt: skip
    beat = await consumer.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
    assert beat.code == ResponseCode.SUCCESS, beat.remark

    async def reset(**fields: Any) -> dict[int, int]:
        reply = await client.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**ask, **fields})
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        _, table = _offset_table(reply.body)
        while True:  # the member is told, oneway, with the same table
            told = await consumer.reply()
            if told.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
                break
        assert told.flag & FLAG_ONEWAY
        assert told.ext_fields["group"] == "CG_RST" and told.ext_fields["topic"] == "adm-rst"
        assert _offset_table(told.body)[1] == table
        return {q: v for (_, _, q), v in table.items()}

    # Not forced: a queue moves back only (4 -> 3), never ahead of the group (0 stays 0).
    assert await reset() == {0: at_middle, 1: 0}
    # The queues' ends (-1), forced: ahead too.
    assert await reset(timestamp=-1, isForce="true") == {0: 5, 1: 0}
    assert await reset(timestamp=-1) == {0: 4, 1: 0}  # not forced: the group's offsets
    unknown = await client.call(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**ask, "group": "CG_NO"}
    )
    assert unknown.code == ResponseCode.SYSTEM_ERROR
    assert unknown.remark == "THe consumer group <CG_NO> not exist"
    writer.close()


async def test_broker_config(client: Client, broker: BrokerProcess) -> None:
    """26 GET_BROKER_CONFIG (mqadmin getBrokerConfig, the Dashboard's broker config view):
    ``name=value`` lines the 4.9.8 client reads with MixAll.string2Properties, by setting
    name, without the secrets. It was 3."""
    reply = await client.call(RequestCode.GET_BROKER_CONFIG)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    assert "counter" in json.loads(reply.ext_fields["version"])
    lines = reply.body.decode().splitlines()
    settings = dict(line.split("=", 1) for line in lines)
    cluster = json.loads((await client.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert settings["brokerName"] in cluster["brokerAddrTable"]
    assert settings["brokerClusterName"] in cluster["clusterAddrTable"]
    assert settings["brokerId"] == "0"
    assert settings["autoCreateTopicEnable"] in ("true", "false")
    assert "namesrvSecretKey" not in settings and "haSecretKey" not in settings
    assert lines == sorted(lines)


# --- issue 66: the admin codes the 4.9.8 Java client sent and got 3 for ---------------------
# Each request is replayed as MQClientAPIImpl (or BrokerOuterAPI) builds it: the code, version
# 409 (MQVersion.CURRENT_VERSION of 4.9.8, V4_9_8's ordinal) and the header fields
# makeCustomHeaderToNet writes (null fields left out). Each code answered 3 before.
JAVA_4_9_8 = 409
JAVA_5_3_3 = 479  # V5_3_3's ordinal: 351 is a 5.x code


async def test_update_broker_config_changes_nothing_at_run_time_and_says_which_key(
    client: Client,
) -> None:
    """25 UPDATE_BROKER_CONFIG (mqadmin updateBrokerConfig -k K -v V, the Dashboard's broker
    config edit): createRequestCommand(25, null), body MixAll.properties2String. A value equal
    to the current one is SUCCESS; anything else 16 NO_PERMISSION naming the key and why, and
    26 still answers the old value."""
    config = await client.call(RequestCode.GET_BROKER_CONFIG, version=JAVA_4_9_8)
    settings = dict(line.split("=", 1) for line in config.body.decode().splitlines())

    async def update(body: str) -> RemotingCommand:
        return await client.call(
            RequestCode.UPDATE_BROKER_CONFIG, None, body.encode(), version=JAVA_4_9_8
        )

    name, auto = settings["brokerName"], settings["autoCreateTopicEnable"]
    same = await update(f"brokerName={name}\nautoCreateTopicEnable={auto}\n")
    assert same.code == ResponseCode.SUCCESS, same.remark
    flipped = "false" if auto == "true" else "true"
    refused = await update(f"autoCreateTopicEnable={flipped}\n")
    assert refused.code == ResponseCode.NO_PERMISSION
    assert refused.remark is not None
    assert "autoCreateTopicEnable: read once at start" in refused.remark
    assert "WHARF_AUTO_CREATE_TOPIC_ENABLE" in refused.remark
    assert "nothing was changed" in refused.remark
    unknown = await update(f"brokerName={name}\nbrokerPermission=4\n")  # Apache's, not Wharf's
    assert unknown.code == ResponseCode.NO_PERMISSION
    assert unknown.remark is not None and "brokerPermission: not a setting" in unknown.remark
    secret = await update("namesrvSecretKey=\n")  # never compared, even when equal
    assert secret.code == ResponseCode.NO_PERMISSION
    assert secret.remark is not None and "namesrvSecretKey: a secret" in secret.remark
    black = await update("rocketmqHome=/tmp/x\n")
    assert (black.code, black.remark) == (
        ResponseCode.NO_PERMISSION,
        "Can not update config in black list.",
    )
    after = await client.call(RequestCode.GET_BROKER_CONFIG, version=JAVA_4_9_8)
    assert f"autoCreateTopicEnable={auto}" in after.body.decode().splitlines()


async def test_earliest_msg_storetime_is_the_store_time_of_the_first_message(
    client: Client, broker: BrokerProcess
) -> None:
    """32 GET_EARLIEST_MSG_STORETIME: header {topic, queueId, bname} (4.9.8's
    GetEarliestMsgStoretimeRequestHeader + RpcRequestHeader.bname); response header
    ``timestamp``: the store time of the queue's first message, -1 for an empty queue."""
    created = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields("adm-e", 2))
    assert created.code == ResponseCode.SUCCESS, created.remark
    ids = []
    for i in range(2):
        sent = await client.call(RequestCode.SEND_MESSAGE, _send_fields("adm-e", 0), b"e%d" % i)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        ids.append(sent.ext_fields["msgId"])
        await asyncio.sleep(0.01)
    await _dispatched(client, "adm-e", 0, 2)
    viewed = await client.call(
        RequestCode.VIEW_MESSAGE_BY_ID, {"offset": decode_offset_msg_id(ids[0])[1]}
    )
    first = decode_record(viewed.body, 0)
    cluster = json.loads((await client.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    bname = next(iter(cluster["brokerAddrTable"]))

    async def earliest(topic: str, queue_id: int) -> RemotingCommand:
        fields = {"topic": topic, "queueId": queue_id, "bname": bname}
        return await client.call(RequestCode.GET_EARLIEST_MSG_STORETIME, fields, version=JAVA_4_9_8)

    reply = await earliest("adm-e", 0)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    assert int(reply.ext_fields["timestamp"]) == first.store_timestamp > 0
    assert int((await earliest("adm-e", 1)).ext_fields["timestamp"]) == -1  # empty queue
    assert int((await earliest("adm-no-such", 0)).ext_fields["timestamp"]) == -1


def _fastjson_int_keys(text: str) -> Any:
    """fastjson's Map<Integer, Long> keys are unquoted (``{0:12}``): quote them to parse."""
    return json.loads(re.sub(r"([{,])(-?\d+):", r'\1"\2":', text))


async def test_all_consumer_offset_is_the_offset_table_as_fastjson_writes_it(
    client: Client,
) -> None:
    """43 GET_ALL_CONSUMER_OFFSET (BrokerOuterAPI.getAllConsumerOffset: createRequestCommand
    (43, null)): ConsumerOffsetSerializeWrapper, ``{"offsetTable": {"topic@group": {queueId:
    offset}}}`` with the queue ids unquoted, as fastjson writes them."""
    for queue_id, offset in ((0, 3), (1, 5)):
        commit = {"consumerGroup": "CG_ALL", "topic": "adm-all", "queueId": queue_id,
                  "commitOffset": offset}  # fmt: skip
        done = await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)
        assert done.code == ResponseCode.SUCCESS, done.remark
    reply = await client.call(RequestCode.GET_ALL_CONSUMER_OFFSET, version=JAVA_4_9_8)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    text = reply.body.decode()
    assert text.startswith('{"offsetTable":{')
    assert '"adm-all@CG_ALL":{0:3,1:5}' in text
    table = _fastjson_int_keys(text)["offsetTable"]
    assert table["adm-all@CG_ALL"] == {"0": 3, "1": 5}
    assert all("@" in key for key in table)


async def test_topic_config_of_the_5x_tools(client: Client) -> None:
    """351 GET_TOPIC_CONFIG: a RocketMQ 5 code (not in 4.9.8's RequestCode), sent by the 5.x
    MQClientAPIImpl.getTopicConfig with {topic, lo=true}: TopicConfigAndQueueMapping, the
    topic's TopicConfig; unknown topic: 17."""
    created = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields("adm-tc", 2))
    assert created.code == ResponseCode.SUCCESS, created.remark
    reply = await client.call(
        RequestCode.GET_TOPIC_CONFIG, {"topic": "adm-tc", "lo": "true"}, version=JAVA_5_3_3
    )
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    config = json.loads(reply.body)
    assert config == (await _topic_config(client))["adm-tc"]
    assert (config["topicName"], config["readQueueNums"], config["perm"]) == ("adm-tc", 2, 6)
    assert "mappingDetail" not in config
    missing = await client.call(
        RequestCode.GET_TOPIC_CONFIG, {"topic": "adm-tc-no", "lo": "true"}, version=JAVA_5_3_3
    )
    assert (missing.code, missing.remark) == (
        ResponseCode.TOPIC_NOT_EXIST,
        "No topic in this broker. topic: adm-tc-no",
    )


async def test_wipe_write_perm_on_the_broker_as_its_own_namesrv(client: Client) -> None:
    """205 WIPE_WRITE_PERM_OF_BROKER / 327 ADD_WRITE_PERM_OF_BROKER (mqadmin wipeWritePerm /
    addWritePerm -b NAME, sent to each namesrvAddr: here the broker's own port): {brokerName}
    -> {wipeTopicCount} / {addTopicCount}; the routes lose the write bit until 327 or a change
    of the topic table (Apache: the broker re-registering a changed topic config)."""
    created = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields("adm-w", 2))
    assert created.code == ResponseCode.SUCCESS, created.remark
    cluster = json.loads((await client.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    name = next(iter(cluster["brokerAddrTable"]))

    async def perm() -> int:
        route = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "adm-w"})
        return int(json.loads(route.body)["queueDatas"][0]["perm"])

    async def call(code: int, broker_name: str) -> RemotingCommand:
        reply = await client.call(code, {"brokerName": broker_name}, version=JAVA_4_9_8)
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        return reply

    topics = json.loads((await client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)
    other = await call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, "not-this-broker")
    assert other.ext_fields["wipeTopicCount"] == "0" and await perm() == 6
    wiped = await call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, name)
    assert int(wiped.ext_fields["wipeTopicCount"]) == len(topics["topicList"])
    assert await perm() == 4
    added = await call(RequestCode.ADD_WRITE_PERM_OF_BROKER, name)
    assert added.ext_fields["addTopicCount"] == wiped.ext_fields["wipeTopicCount"]
    assert await perm() == 6
    await call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, name)
    assert await perm() == 4
    again = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_fields("adm-w2", 1))
    assert again.code == ResponseCode.SUCCESS, again.remark
    assert await perm() == 6  # the topic table changed: routed writable again
    missing = await client.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {}, version=JAVA_4_9_8)
    assert missing.code == ResponseCode.SYSTEM_ERROR


def test_update_broker_config_parses_java_properties_and_knows_store_settings() -> None:
    """25's body is read as java.util.Properties.load reads it; store settings are known (a
    value equal to the current one is SUCCESS), and one refused key refuses the request."""
    assert parse_java_properties(
        "# comment\n! also\n  a=1\nb : two\nc three\nd=x\\\n   y\ne=\\u0041\\=\\:\n\n"
    ) == {"a": "1", "b": "two", "c": "three", "d": "xy", "e": "A=:"}
    broker, store = BrokerConfig(), StoreConfig()

    def update(body: str) -> RemotingCommand:
        request = RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG, opaque=3, version=409)
        request.body = body.encode()
        return update_broker_config_response(request, broker, store, "peer")

    same = update(f"flushDiskType={store.flush_disk_type}\nbrokerId=0\nlongPollingEnable=TRUE\n")
    assert same.code == ResponseCode.SUCCESS, same.remark
    assert update("").code == ResponseCode.SUCCESS  # nothing asked (the client sends none)
    bad = update("a=\\u00zz\n")  # a broken unicode escape: Java's load throws
    assert bad.code == ResponseCode.SYSTEM_ERROR and "string2Properties error" in (bad.remark or "")
    both = update(f"flushDiskType={store.flush_disk_type}\ndefaultTopicQueueNums=16\n")
    assert both.code == ResponseCode.NO_PERMISSION
    assert both.remark is not None
    assert "defaultTopicQueueNums: read once at start (now 8)" in both.remark
    assert "WHARF_DEFAULT_TOPIC_QUEUE_NUMS" in both.remark and "flushDiskType" not in both.remark
