"""Every request code of the remoting listener, fuzzed against a real broker daemon.

One daemon (``--remoting-listen 127.0.0.1:0``, real store, 4 queues per topic) takes
hypothesis-built requests on one connection: every ``RequestCode`` (the codes the handler table
serves and the ones it does not) and random int16 codes, in JSON or ROCKETMQ serialization,
with the code's own header fields (``headers.py``: valid values, then some dropped, some
replaced by garbage: text, huge or negative numbers, empty strings) plus random extra keys, and
a body that is nothing, random bytes, random or deeply nested JSON, or the code's own body
shape (HeartbeatData, a lock body, a SubscriptionGroupConfig, an ``encodeMessages`` batch)
with hostile values. 5 examples per served code (12 for the sends, the pull and the heartbeat)
and 20 for the rest: 205 in all (4-10 s), bounded by a 60 s assertion. It found deeply nested
JSON bodies (HEART_BEAT, LOCK/UNLOCK_BATCH_MQ, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and the ACL
check's body parse) raising RecursionError: answered 1 with a Traceback logged, now 1 "body is
not JSON".

Each request must get a response (flag response, its opaque) within 10 s, with a code that
is a ``ResponseCode`` (never a dropped connection, never a hang); an unknown code is 3
REQUEST_CODE_NOT_SUPPORTED; each served code answers something else at least once (it reached
its handler). After each example a GET_MAX_OFFSET on the same connection still answers 0
SUCCESS. Afterwards the daemon is alive, its log has no Traceback (a handler exception that
``error_response`` did not expect logs one), and a normal SEND_MESSAGE_V2 + PULL_MESSAGE on a
fresh connection round-trips a message. The NameServer's own remoting table
(``broker/namesrv/remoting.py``) is not fuzzed here.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.broker.frontends.remoting import headers as h
from wharf.broker.frontends.remoting.batch import BatchMessage, encode_messages
from wharf.broker.kit.remoting.codes import (
    RequestCode,
    ResponseCode,
    SerializeType,
)
from wharf.broker.kit.remoting.frame import FrameDecoder, RemotingCommand, encode
from wharf.store.codec.properties import properties_to_string

from tests.harness import Daemons

pytestmark = pytest.mark.slow

TIMEOUT = 10.0
PER_CODE = 5  # examples per served code (30 codes) ...
DEEP_CODES = {10: 12, 310: 12, 320: 12, 11: 12, 34: 12}  # ... but these, the busiest paths
OTHERS = 20  # the RequestCodes not served and random int16 codes
RANDOM_CODES = st.integers(min_value=-(2**15), max_value=2**15 - 1)
QUEUES = 4
CHECK_TOPIC = "fzr-check"  # never in the fuzz's pools: the final send + pull use it
GOOD_TOPICS = ("fzr-a", "fzr-b", "%RETRY%fzr-g")
TOPICS = (
    "fzr-a",
    "fzr-b",
    "%RETRY%fzr-g",
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
)
GROUPS = ("fzr-g", "fzr-h", "CID_ONSAPI_OWNER")
RESPONSE_CODES = frozenset(int(c) for c in ResponseCode)

# The codes the broker's handler table serves (handlers.RemotingHandlers.table).
SERVED = frozenset(
    int(c)
    for c in (
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.GET_KV_CONFIG,
        RequestCode.HEART_BEAT,
        RequestCode.UNREGISTER_CLIENT,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.PULL_MESSAGE,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.GET_MAX_OFFSET,
        RequestCode.GET_MIN_OFFSET,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.END_TRANSACTION,
        RequestCode.LOCK_BATCH_MQ,
        RequestCode.UNLOCK_BATCH_MQ,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.GET_ALL_TOPIC_CONFIG,
        RequestCode.GET_TOPIC_STATS_INFO,
        RequestCode.GET_CONSUME_STATS,
        RequestCode.GET_CONSUMER_CONNECTION_LIST,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.GET_BROKER_RUNTIME_INFO,
        RequestCode.VIEW_MESSAGE_BY_ID,
        RequestCode.QUERY_MESSAGE,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
        RequestCode.GET_CONSUMER_RUNNING_INFO,
        RequestCode.CONSUME_MESSAGE_DIRECTLY,
        RequestCode.GET_PRODUCER_CONNECTION_LIST,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        RequestCode.GET_BROKER_CONFIG,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.GET_EARLIEST_MSG_STORETIME,
        RequestCode.GET_ALL_CONSUMER_OFFSET,
        RequestCode.GET_TOPIC_CONFIG,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
    )
)
KNOWN = frozenset(int(c) for c in RequestCode)

# Each code's header (the wire names and kinds of headers.py); 310/320 use the short names.
HEADERS: dict[int, type] = {
    RequestCode.SEND_MESSAGE: h.SendMessageRequestHeader,
    RequestCode.SEND_MESSAGE_V2: h.SendMessageRequestHeader,
    RequestCode.SEND_BATCH_MESSAGE: h.SendMessageRequestHeader,
    RequestCode.PULL_MESSAGE: h.PullMessageRequestHeader,
    RequestCode.QUERY_MESSAGE: h.QueryMessageRequestHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: h.QueryConsumerOffsetRequestHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: h.UpdateConsumerOffsetRequestHeader,
    RequestCode.UPDATE_AND_CREATE_TOPIC: h.CreateTopicRequestHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: h.SearchOffsetRequestHeader,
    RequestCode.GET_MAX_OFFSET: h.TopicQueueRequestHeader,
    RequestCode.GET_MIN_OFFSET: h.TopicQueueRequestHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: h.TopicQueueRequestHeader,
    RequestCode.GET_TOPIC_CONFIG: h.TopicRequestHeader,
    RequestCode.VIEW_MESSAGE_BY_ID: h.ViewMessageRequestHeader,
    RequestCode.UNREGISTER_CLIENT: h.UnregisterClientRequestHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: h.ConsumerSendMsgBackRequestHeader,
    RequestCode.END_TRANSACTION: h.EndTransactionRequestHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: h.GetConsumerListByGroupRequestHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: h.GetRouteInfoRequestHeader,
    RequestCode.DELETE_TOPIC_IN_BROKER: h.TopicRequestHeader,
    RequestCode.GET_TOPIC_STATS_INFO: h.TopicRequestHeader,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: h.TopicRequestHeader,
    RequestCode.GET_CONSUME_STATS: h.GetConsumeStatsRequestHeader,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: h.GetConsumerConnectionListRequestHeader,
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: h.NotifyConsumerIdsChangedRequestHeader,
    RequestCode.CHECK_TRANSACTION_STATE: h.CheckTransactionStateRequestHeader,
}
_CLIENT_IDS = itertools.count()


# --- values -----------------------------------------------------------------------------------

garbage = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "-1", "0x10", "1e9", "NaN", "true", "null", "\x00", "\u202e%"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(min_size=200, max_size=3000),
)
small_int = st.integers(min_value=-2, max_value=40)
any_int = st.one_of(
    small_int,
    st.sampled_from([2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 0, 1024, 65536]),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
any_i32 = st.one_of(
    small_int,
    st.sampled_from([2**31 - 1, -(2**31), 0, 1024, 65536]),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
)
topic_value = st.one_of(
    st.sampled_from(GOOD_TOPICS),
    st.sampled_from(GOOD_TOPICS),
    st.sampled_from(GOOD_TOPICS),
    st.sampled_from(TOPICS),
    st.text(min_size=0, max_size=300),
)
group_value = st.one_of(
    st.sampled_from(GROUPS), st.sampled_from(GROUPS), st.text(min_size=0, max_size=300)
)


def sane_value(wire: str, kind: str) -> st.SearchStrategy[str]:
    """A plausible value of one header field (by its wire name and kind)."""
    if wire in ("topic", "defaultTopic", "originTopic"):
        return topic_value
    if "roup" in wire or wire == "group":
        return group_value
    if wire == "properties":  # user keys, and some of the system ones with odd values
        names = st.one_of(
            st.text(alphabet="abcdXYZ_-.", min_size=1, max_size=10),
            st.sampled_from(["TAGS", "KEYS", "DELAY", "UNIQ_KEY", "TRAN_MSG", "PGROUP", "WAIT"]),
        )
        values = st.one_of(
            st.text(
                alphabet=st.characters(exclude_characters="\x01\x02", codec="utf-8"), max_size=30
            ),
            st.sampled_from(["true", "3", "-1", "99999"]),
        )
        return st.dictionaries(names, values, max_size=4).map(properties_to_string)
    if wire == "batch":
        return st.sampled_from(["false", "false", "true", "1"])
    if wire == "subscription":
        return st.one_of(
            st.sampled_from(["*", "TagA || TagB", "a > 5 AND b = 'x'", "a >"]), st.text(max_size=60)
        )
    if wire == "expressionType":
        return st.sampled_from(["TAG", "SQL92", "sql92", "", "XPATH"])
    if wire == "commitOrRollback":
        return st.sampled_from(["0", "8", "12", "4", "99"])
    if wire == "queueId":
        return st.one_of(st.integers(0, QUEUES - 1), st.integers(-1, QUEUES)).map(str)
    if wire in ("readQueueNums", "writeQueueNums", "maxMsgNums", "maxNum"):
        return st.integers(0, 40).map(str)
    if wire == "perm":
        return st.sampled_from(["6", "6", "6", "2", "4", "7", "0"])
    if wire == "sysFlag":
        return st.sampled_from(["0", "0", "0", "1", "2", "4", "5", "8", "12", "-1"])
    if wire in ("queueOffset", "commitOffset", "offset", "tranStateTableOffset", "commitLogOffset"):
        return st.one_of(st.integers(-1, 64), any_int).map(str)
    if kind == "bool":
        return st.sampled_from(["true", "false", "1", "0", "TRUE"])
    if kind == "i32":
        return any_i32.map(str)
    if kind == "i64":
        return any_int.map(str)
    return st.text(max_size=60)


@st.composite
def header_fields(draw: st.DrawFn, header: type, rename: dict[str, str]) -> dict[str, str]:
    """The header's fields with sane values, then none, one or many of them dropped or
    replaced by garbage (a clean request reaches deep into its handler)."""
    specs = [(f.metadata["wire"], f.metadata["kind"]) for f in dataclasses.fields(header)]
    mode = draw(st.sampled_from(["clean", "clean", "one", "one", "many"]))
    victim = draw(st.integers(0, len(specs) - 1))
    fields: dict[str, str] = {}
    for index, (wire, kind) in enumerate(specs):
        hit = (mode == "one" and index == victim) or (mode == "many" and draw(st.booleans()))
        value = draw(st.one_of(st.none(), garbage) if hit else sane_value(wire, kind))
        if value is not None:
            fields[rename.get(wire, wire)] = value
    return fields


# --- bodies -----------------------------------------------------------------------------------

json_value = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


def jsonish(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return st.one_of(shape, json_value).map(lambda v: json.dumps(v).encode())


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(value, value, value, json_value)


subscription_data = st.fixed_dictionaries(
    {
        "topic": maybe(topic_value),
        "subString": maybe(st.sampled_from(["*", "TagA", "a > 5", "((", "a BETWEEN 1 AND"])),
        "expressionType": maybe(st.sampled_from(["TAG", "SQL92"])),
        "tagsSet": maybe(st.lists(st.text(max_size=8), max_size=3)),
        "codeSet": maybe(st.lists(st.integers(), max_size=3)),
        "subVersion": maybe(any_int),
        "classFilterMode": maybe(st.booleans()),
    }
)
heartbeat_body = jsonish(
    st.fixed_dictionaries(
        {
            "clientID": maybe(st.builds(lambda: f"fz-client-{next(_CLIENT_IDS)}")),
            "consumerDataSet": maybe(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "groupName": maybe(group_value),
                            "consumeType": maybe(st.sampled_from(["CONSUME_PASSIVELY", 0, 1, "x"])),
                            "messageModel": maybe(
                                st.sampled_from(["CLUSTERING", "BROADCASTING", 0, 1, 7])
                            ),
                            "consumeFromWhere": maybe(any_int),
                            "subscriptionDataSet": maybe(
                                st.lists(maybe(subscription_data), max_size=3)
                            ),
                            "unitMode": maybe(st.booleans()),
                        }
                    ),
                    max_size=3,
                )
            ),
            "producerDataSet": maybe(
                st.lists(st.fixed_dictionaries({"groupName": maybe(group_value)}), max_size=2)
            ),
        }
    )
)
lock_body = jsonish(
    st.fixed_dictionaries(
        {
            "consumerGroup": maybe(group_value),
            "clientId": maybe(st.text(max_size=20)),
            "mqSet": maybe(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "topic": maybe(topic_value),
                            "brokerName": maybe(st.text(max_size=10)),
                            "queueId": maybe(any_int),
                        }
                    ),
                    max_size=40,
                )
            ),
        }
    )
)
subscription_group_body = jsonish(
    st.fixed_dictionaries(
        {
            "groupName": maybe(group_value),
            "consumeEnable": maybe(st.booleans()),
            "consumeBroadcastEnable": maybe(st.booleans()),
            "retryMaxTimes": maybe(any_int),
            "retryQueueNums": maybe(any_int),
            "consumeMessageOrderly": maybe(st.booleans()),
        }
    )
)
batch_body = st.lists(
    st.builds(
        BatchMessage,
        st.integers(min_value=-(2**31), max_value=2**31 - 1),
        st.binary(max_size=200),
        st.dictionaries(st.text(max_size=10), st.text(max_size=30), max_size=4),
    ),
    min_size=0,
    max_size=5,
).map(lambda messages: encode_messages(messages) if messages else b"")


@st.composite
def mutated(draw: st.DrawFn, body: st.SearchStrategy[bytes]) -> bytes:
    """A body cut short, with bytes flipped, or as is."""
    data = draw(body)
    how = draw(st.sampled_from(["as is", "as is", "cut", "flip"]))
    if how == "cut" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    return data


generic_body = st.one_of(
    st.just(b""),
    st.binary(max_size=300),
    jsonish(json_value),
    st.sampled_from([b"[" * 50_000, b'{"a":' * 50_000, b"\xff\xfe", b"null", b"{}\n", b"[]"]),
)
BODIES: dict[int, st.SearchStrategy[bytes]] = {
    RequestCode.HEART_BEAT: mutated(heartbeat_body),
    RequestCode.LOCK_BATCH_MQ: mutated(lock_body),
    RequestCode.UNLOCK_BATCH_MQ: mutated(lock_body),
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: mutated(subscription_group_body),
    RequestCode.SEND_MESSAGE: st.one_of(mutated(batch_body), st.binary(min_size=1, max_size=300)),
    RequestCode.SEND_MESSAGE_V2: st.one_of(
        mutated(batch_body), st.binary(min_size=1, max_size=300)
    ),
    RequestCode.SEND_BATCH_MESSAGE: mutated(batch_body),
}


# --- cases ------------------------------------------------------------------------------------


@dataclass
class Case:
    code: int
    fields: dict[str, str]
    body: bytes
    serialize_type: SerializeType


@st.composite
def cases(draw: st.DrawFn, codes: st.SearchStrategy[int]) -> Case:
    code = draw(codes)
    header = HEADERS.get(code)
    rename = h.SEND_V2_FIELD_NAMES if code in (310, 320) else {}
    fields = draw(header_fields(header, rename)) if header else {}
    extra = draw(st.dictionaries(st.text(max_size=15), garbage, max_size=3))
    fields.update(extra if draw(st.booleans()) else {})
    if code == RequestCode.PULL_MESSAGE:
        # A long poll waits as long as it is told (up to 60 s): keep those short here.
        wait = fields.get("suspendTimeoutMillis", "")
        if wait.lstrip("-").isdigit() and int(wait) > 300:
            fields["suspendTimeoutMillis"] = "300"
    own = BODIES.get(code, generic_body)
    body = draw(st.one_of(own, own, own, generic_body))
    kind = draw(st.sampled_from([SerializeType.JSON, SerializeType.JSON, SerializeType.ROCKETMQ]))
    return Case(code, fields, body, kind)


# --- the connection ---------------------------------------------------------------------------


class BlockingClient:
    """A plain socket: ``call`` writes one request and reads until its response (requests the
    broker sends to the client, NOTIFY_CONSUMER_IDS_CHANGED after a fuzzed heartbeat, are
    skipped)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []
        self.opaque = 0

    def call(
        self,
        code: int,
        fields: dict[str, str],
        body: bytes = b"",
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        self.opaque += 1
        cmd = RemotingCommand(code=code, opaque=self.opaque, ext_fields=fields, body=body)
        self.sock.sendall(encode(cmd, serialize_type))
        deadline = time.monotonic() + TIMEOUT
        while True:
            while self.pending:
                reply = self.pending.pop(0)
                if reply.is_response:
                    assert reply.opaque == self.opaque, (reply, self.opaque)
                    return reply
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply to code {code} in {TIMEOUT} s")
            self.sock.settimeout(left)
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError(f"the broker closed the connection after code {code}")
            self.pending.extend(self.decoder.feed(data))

    def close(self) -> None:
        self.sock.close()


def send_fields(topic: str, queue_id: int) -> dict[str, str]:
    names = {
        "producerGroup": "fzr-pg",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": properties_to_string({"UNIQ_KEY": "FZ" + "0" * 30, "TAGS": "t"}),
    }
    return {h.SEND_V2_FIELD_NAMES[k]: v for k, v in names.items()}


def pull_fields(topic: str, queue_id: int, offset: int) -> dict[str, str]:
    return {
        "consumerGroup": "fzr-check-g",
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
    }


def test_every_request_code_fuzzed_gets_an_answer(
    daemons: Daemons,
) -> None:
    broker = daemons.broker(
        settings={"defaultTopicQueueNums": QUEUES},
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    )
    client = BlockingClient(broker.remoting_endpoint)
    probe = {"topic": CHECK_TOPIC, "queueId": "0"}
    # Something to pull, view and send back: a few messages in the pool topics.
    for topic in TOPICS[:2]:
        for queue_id in range(QUEUES):
            reply = client.call(RequestCode.SEND_MESSAGE_V2, send_fields(topic, queue_id), b"seed")
            assert reply.code == ResponseCode.SUCCESS, reply.remark
    answered: dict[int, set[int]] = {}
    started = time.monotonic()
    # Each served code on its own (so that each gets its share), then everything else.
    runs = [(st.just(code), DEEP_CODES.get(code, PER_CODE)) for code in sorted(SERVED)]
    runs.append((st.one_of(st.sampled_from(sorted(KNOWN - SERVED)), RANDOM_CODES), OTHERS))

    for codes, examples in runs:

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=cases(codes))
        def fuzz(case: Case) -> None:
            reply = client.call(case.code, case.fields, case.body, case.serialize_type)
            assert reply.code in RESPONSE_CODES, (case, reply)
            if case.code not in KNOWN:
                assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, (case, reply)
                assert str(case.code) in (reply.remark or "")
            answered.setdefault(case.code, set()).add(reply.code)
            after = client.call(RequestCode.GET_MAX_OFFSET, probe)
            assert after.code == ResponseCode.SUCCESS, (case, after)

        fuzz()

    elapsed = time.monotonic() - started
    client.close()
    assert elapsed < 60, f"the fuzz took {elapsed:.0f} s"
    assert broker.proc is not None and broker.proc.poll() is None, broker.log()[-4000:]
    # Every served code reached its handler: answered something else than "not supported".
    not_served = {
        RequestCode(c).name
        for c in SERVED
        if answered.get(c, set()) <= {ResponseCode.REQUEST_CODE_NOT_SUPPORTED}
    }
    assert not not_served, not_served
    assert "Traceback" not in broker.log(), broker.log()[-6000:]

    # The broker still serves a normal send + pull, on a fresh connection.
    fresh = BlockingClient(broker.remoting_endpoint)
    try:
        sent = fresh.call(RequestCode.SEND_MESSAGE_V2, send_fields(CHECK_TOPIC, 1), b"after")
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        offset = int(sent.ext_fields["queueOffset"])
        pulled = fresh.call(RequestCode.PULL_MESSAGE, pull_fields(CHECK_TOPIC, 1, offset))
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark
        assert b"after" in pulled.body
    finally:
        fresh.close()
