"""SQL92 property filters over remoting (issue 35): what a Java consumer built with
``MessageSelector.bySql("a > 5 AND b = 'x'")`` sends, driven by the raw client of these tests.

Java (``DefaultMQPushConsumer`` / ``DefaultLitePullConsumer``) puts the expression in the
heartbeat's ``subscriptionDataSet`` (``subString`` = the expression, ``expressionType`` =
``SQL92``) and, on each PULL_MESSAGE with the subscription flag (0x4), in ``subscription`` +
``expressionType``; without that flag the broker uses the group's last heartbeat. The broker
applies the filter before the records leave (RocketMQ's ExpressionMessageFilter), so a pull
answers only the matching records; a range with none answers 20 PULL_RETRY_IMMEDIATELY with
``nextBeginOffset`` past it. A bad expression is 23 SUBSCRIPTION_PARSE_FAILED with the parse
error as remark; with ``enablePropertyFilter = false`` every SQL92 pull (and 46) is 1
SYSTEM_ERROR "The broker does not support consumer to filter message by SQL92", as Apache's
PullMessageProcessor and ClientManageProcessor answer it.

Not covered by a real client here: the C++ client of PyPI ``rocketmq==0.4.4`` has no SQL92
subscription (its ``PushConsumer.subscribe(topic, callback, expression)`` and the library's
SubscriptionData carry tags only: no ``expressionType`` is ever sent), and ali-ons subscribes by
tag only. Java's push consumer also sends CHECK_CLIENT_CONFIG (46) for a SQL92 subscription
at start (``MQClientInstance.checkClientInBroker``): ``test_check_client_config_accepts_sql92``.
The 4.9 Java client also checks the version its broker stamps in responses before any SQL92
pull (``PullAPIWrapper.pullKernelImpl``: older than V4_1_0_SNAPSHOT and it throws instead of
pulling): ``test_responses_carry_a_broker_version_that_allows_sql92``.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import pytest
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.store.codec.records import decode_record

from tests.broker.remoting.test_server import Client, _send_fields
from tests.harness import BrokerProcess, Daemons

TOPIC = "sql-t"
QUEUE = 1
# (a, b) of each message sent: a 0..9, b 'x' or 'y', some without one of them.
MESSAGES: list[dict[str, str]] = [
    {"a": str(a), "b": "x" if a % 2 == 0 else "y"} for a in range(10)
] + [{"b": "x"}, {"a": "7"}, {"a": "8", "b": "x", "TAGS": "T1"}, {"a": "6.5", "b": "x"}]


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker(
        "sql92",
        settings={"defaultTopicQueueNums": 4},
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    )


async def _connect(broker: BrokerProcess) -> Client:
    host, _, port = broker.remoting_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    return Client(reader, writer)


def _props(properties: dict[str, str]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items())


@pytest.fixture(scope="module")
def sent(broker: BrokerProcess) -> list[dict[str, str]]:
    """MESSAGES in queue 1 of TOPIC (offsets 0..13), each with its index as the body."""

    async def send_all() -> None:
        conn = await _connect(broker)
        try:
            for index, properties in enumerate(MESSAGES):
                reply = await conn.call(
                    RequestCode.SEND_MESSAGE,
                    _send_fields(TOPIC, QUEUE, _props({**properties, "KEYS": f"k{index}"})),
                    str(index).encode(),
                )
                assert reply.code == ResponseCode.SUCCESS, reply.remark
                assert reply.ext_fields["queueOffset"] == str(index)
        finally:
            conn.writer.close()

    asyncio.run(send_all())
    return MESSAGES


def _pull(
    group: str,
    offset: int,
    *,
    expression: str | None = None,
    expression_type: str = "SQL92",
    max_msgs: int = 32,
) -> dict[str, Any]:
    """PULL_MESSAGE fields; with ``expression`` the subscription flag (0x4) and the
    expression of this request, else the group's heartbeat subscription."""
    fields: dict[str, Any] = {
        "consumerGroup": group,
        "topic": TOPIC,
        "queueId": QUEUE,
        "queueOffset": offset,
        "maxMsgNums": max_msgs,
        "sysFlag": 4 if expression is not None else 0,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subVersion": 0,
    }
    if expression is not None:
        fields["subscription"] = expression
        fields["expressionType"] = expression_type
    return fields


def _bodies(body: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        out.append(int(decode_record(body, pos).body))
        pos += size
    return out


async def _pull_all(client: Client, group: str, **kwargs: Any) -> list[int]:
    """Every body index the filter lets through, pulling from 0 to the end of the queue."""
    got: list[int] = []
    offset = 0
    for _ in range(50):
        reply = await client.call(RequestCode.PULL_MESSAGE, _pull(group, offset, **kwargs))
        if reply.code == ResponseCode.PULL_NOT_FOUND:
            return got
        assert reply.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), (
            reply.code,
            reply.remark,
        )
        got += _bodies(reply.body) if reply.code == ResponseCode.SUCCESS else []
        next_offset = int(reply.ext_fields["nextBeginOffset"])
        assert next_offset > offset
        offset = next_offset
    raise AssertionError("the pulls never reached the end of the queue")


def _expected(predicate: Any) -> list[int]:
    return [i for i, props in enumerate(MESSAGES) if predicate(props)]


def _int(props: dict[str, str], name: str) -> int | None:
    """A property compared with an integer literal: Java's ``Integer.valueOf`` (``"6.5"`` does
    not parse: the comparison fails, the message does not match, as in RocketMQ)."""
    try:
        return int(props[name])
    except (KeyError, ValueError):
        return None


@pytest.mark.parametrize(
    ("expression", "predicate"),
    [
        (
            "a > 5 AND b = 'x'",
            lambda p: (_int(p, "a") or 0) > 5 and p.get("b") == "x",
        ),
        ("a BETWEEN 2 AND 4", lambda p: 2 <= (_int(p, "a") or 0) <= 4),
        ("b IN ('y') OR a IS NULL", lambda p: p.get("b") == "y" or "a" not in p),
        ("b IS NULL", lambda p: "b" not in p),
        ("NOT (a < 8) AND TAGS = 'T1'", lambda p: p.get("TAGS") == "T1"),
        ("a <> 3 AND b = 'y'", lambda p: p.get("b") == "y" and p.get("a") != "3"),
    ],
)
async def test_a_sql92_pull_gets_only_the_matching_messages(
    client: Client, sent: list[dict[str, str]], expression: str, predicate: Any
) -> None:
    got = await _pull_all(client, "sql-g-request", expression=expression)
    assert got == _expected(predicate), expression
    assert got, "the filter matched nothing: the test proves nothing"


async def test_a_lowercase_expression_type_and_one_message_per_pull(
    client: Client, sent: list[dict[str, str]]
) -> None:
    got = await _pull_all(
        client, "sql-g-one", expression="a >= 8", expression_type="sql92", max_msgs=1
    )
    assert got == [8, 9, 12]  # 11 has a = '7'; 13 a = '6.5'; 10 no a


async def test_the_heartbeat_subscription_filters_pulls_without_one(
    client: Client, sent: list[dict[str, str]]
) -> None:
    heartbeat = {
        "clientID": "127.0.0.1@sql-java",
        "consumerDataSet": [
            {
                "groupName": "sql-g-hb",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [
                    {
                        "topic": TOPIC,
                        "subString": "a > 5 AND b = 'x'",
                        "expressionType": "SQL92",
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": 1,
                        "classFilterMode": False,
                    }
                ],
                "unitMode": False,
            }
        ],
        "producerDataSet": [],
    }
    reply = await client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    got = await _pull_all(client, "sql-g-hb")  # no subscription flag: the heartbeat's filter
    assert got == [6, 8, 12]  # 13 has a = '6.5': no Integer, no match (RocketMQ's rule)
    # A plain tag subscription of another group still gets everything.
    assert await _pull_all(client, "sql-g-all", expression="*", expression_type="TAG") == list(
        range(len(MESSAGES))
    )


@pytest.mark.parametrize("expression", ["a >", "a > 5 AND", "(a = 1", "a LIKE 'x%' +", "= 3"])
async def test_a_bad_expression_is_subscription_parse_failed(
    client: Client, sent: list[dict[str, str]], expression: str
) -> None:
    reply = await client.call(
        RequestCode.PULL_MESSAGE, _pull("sql-g-bad", 0, expression=expression)
    )
    assert reply.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED, (reply.code, reply.remark)
    assert reply.remark
    assert not reply.body
    # The connection goes on.
    ok = await client.call(RequestCode.PULL_MESSAGE, _pull("sql-g-bad", 0, expression="a = 1"))
    assert ok.code == ResponseCode.SUCCESS, ok.remark


async def test_a_bad_expression_in_the_heartbeat_fails_the_pulls(
    client: Client, sent: list[dict[str, str]]
) -> None:
    heartbeat = {
        "clientID": "127.0.0.1@sql-bad",
        "consumerDataSet": [
            {
                "groupName": "sql-g-hb-bad",
                "subscriptionDataSet": [
                    {"topic": TOPIC, "subString": "a >>> 1", "expressionType": "SQL92"}
                ],
            }
        ],
    }
    reply = await client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
    assert reply.code in (ResponseCode.SUCCESS, ResponseCode.SUBSCRIPTION_PARSE_FAILED)
    if reply.code == ResponseCode.SUCCESS:  # accepted as sent: the pull reports the error
        pull = await client.call(RequestCode.PULL_MESSAGE, _pull("sql-g-hb-bad", 0))
        assert pull.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED, (pull.code, pull.remark)
        assert pull.remark


async def test_responses_carry_a_broker_version_that_allows_sql92(
    client: Client, sent: list[dict[str, str]]
) -> None:
    """The Java 4.9 client records the ``version`` of its heartbeat's response as the broker's
    (MQClientInstance.sendHeartbeatToAllBroker) and pulls with a SQL92 subscription only from
    a broker at V4_1_0_SNAPSHOT (ordinal 232) or later: at version 0 its SQL92 push consumers
    received nothing (issue 66). Wharf answers as a 4.9.8 broker (409), on every response."""
    heartbeat = {"clientID": "127.0.0.1@sql-version", "consumerDataSet": [], "producerDataSet": []}
    reply = await client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
    assert reply.code == ResponseCode.SUCCESS and reply.version == 409
    fields = {"consumerGroup": "sql-g-version", "topic": TOPIC, "queueId": QUEUE,
              "queueOffset": 0, "maxMsgNums": 4, "sysFlag": 0, "commitOffset": 0,
              "suspendTimeoutMillis": 0, "subVersion": 1, "expressionType": "SQL92"}  # fmt: skip
    pulled = await client.call(RequestCode.PULL_MESSAGE, fields)
    assert pulled.version == 409
    missing = await client.call(RequestCode.GET_MAX_OFFSET, {"topic": "no-such-t", "queueId": 0})
    assert missing.version == 409  # errors too


async def test_check_client_config_accepts_sql92(client: Client) -> None:
    """CHECK_CLIENT_CONFIG (46), which a Java push consumer with MessageSelector.bySql sends at
    start() (checkClientInBroker fails start() on anything but SUCCESS)."""
    body = {
        "clientId": "127.0.0.1@sql-java",
        "group": "sql-g-check",
        "subscriptionData": {
            "topic": TOPIC,
            "subString": "a > 5 AND b = 'x'",
            "expressionType": "SQL92",
            "tagsSet": [],
            "codeSet": [],
            "subVersion": 1,
            "classFilterMode": False,
        },
    }
    reply = await client.call(RequestCode.CHECK_CLIENT_CONFIG, body=json.dumps(body).encode())
    assert reply.code == ResponseCode.SUCCESS, (reply.code, reply.remark)
    body["subscriptionData"]["subString"] = "a >"  # type: ignore[index]
    reply = await client.call(RequestCode.CHECK_CLIENT_CONFIG, body=json.dumps(body).encode())
    assert reply.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


async def test_property_filter_off_refuses_sql92(
    module_daemons: Daemons,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with module_daemons.broker(
        tmp_path_factory.mktemp("sql92-off"),
        settings={"enablePropertyFilter": False},
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    ) as broker:
        conn = await _connect(broker)
        try:
            sent = await conn.call(
                RequestCode.SEND_MESSAGE, _send_fields(TOPIC, QUEUE, _props({"a": "9"})), b"0"
            )
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            reply = await conn.call(
                RequestCode.PULL_MESSAGE, _pull("sql-g-off", 0, expression="a > 5")
            )
            off = "The broker does not support consumer to filter message by SQL92"
            assert reply.code == ResponseCode.SYSTEM_ERROR, reply.remark
            assert (reply.remark or "").startswith(off)
            assert "enablePropertyFilter" in (reply.remark or "")
            check = {"clientId": "c", "group": "sql-g-off",
                     "subscriptionData": {"topic": TOPIC, "subString": "a > 5",
                                          "expressionType": "SQL92"}}  # fmt: skip
            checked = await conn.call(
                RequestCode.CHECK_CLIENT_CONFIG, body=json.dumps(check).encode()
            )
            assert checked.code == ResponseCode.SYSTEM_ERROR
            assert (checked.remark or "").startswith(off)
            tags = await conn.call(
                RequestCode.PULL_MESSAGE,
                _pull("sql-g-off", 0, expression="*", expression_type="TAG"),
            )
            assert tags.code == ResponseCode.SUCCESS, tags.remark
        finally:
            conn.writer.close()


@pytest.mark.parametrize(
    ("expression", "expression_type"), [("a > 100", "SQL92"), ("NoSuchTag", "TAG")]
)
async def test_a_long_poll_over_a_range_nothing_matches_is_answered_at_once(
    client: Client, sent: list[dict[str, str]], expression: str, expression_type: str
) -> None:
    """A long-polling pull (suspend flag, 15 s: the Java push consumer's) over offsets 0..13,
    none of which the filter matches, is answered 20 PULL_RETRY_IMMEDIATELY at once with
    nextBeginOffset at the queue end, as Apache 4.9.8's PullMessageProcessor answers
    NO_MATCHED_MESSAGE (it suspends only PULL_NOT_FOUND): the client commits the end, so the
    group shows no lag on the queue. The pull at the end is then held (caught up)."""
    fields = _pull("sql-g-none", 0, expression=expression, expression_type=expression_type)
    fields |= {"sysFlag": 4 | 2, "suspendTimeoutMillis": 15_000}
    loop = asyncio.get_running_loop()
    start = loop.time()
    reply = await client.call(RequestCode.PULL_MESSAGE, fields)
    took = loop.time() - start
    assert reply.code == ResponseCode.PULL_RETRY_IMMEDIATELY, (reply.code, reply.remark)
    assert reply.ext_fields["nextBeginOffset"] == str(len(MESSAGES))
    assert took < 5, f"held {took:.1f} s: answered only when the long poll ran out"
    fields |= {"queueOffset": len(MESSAGES), "suspendTimeoutMillis": 1_000}
    start = loop.time()
    held = await client.call(RequestCode.PULL_MESSAGE, fields)
    assert held.code == ResponseCode.PULL_NOT_FOUND, (held.code, held.remark)
    assert held.ext_fields["nextBeginOffset"] == str(len(MESSAGES))
    assert loop.time() - start >= 0.9  # caught up: held for its suspend time
