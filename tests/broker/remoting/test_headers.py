"""Remoting custom headers (wharf.broker.frontends.remoting.headers): the V1/V2 send header mapping, the
pull and offset headers as the C++ client and ali-ons send them (remoting.md section 3), missing
and invalid fields, string-only responses and the properties string."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.broker.frontends.remoting.headers import (
    SEND_V2_FIELD_NAMES,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    GetRouteInfoRequestHeader,
    HeaderError,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    parse_send_message_request_header,
    properties_to_string,
    string_to_properties,
)
from wharf.broker.kit.remoting.codes import RequestCode, SerializeType
from wharf.broker.kit.remoting.frame import FrameDecoder, RemotingCommand, encode

# remoting.md 3.1: the C++ client's SEND_MESSAGE fields, as the frame decoder hands them over
# (JSON numbers already turned into strings).
CPP_SEND_FIELDS = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "",
    "batch": "0",
    "bornTimestamp": "1795498742046",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "flag": "0",
    "producerGroup": "PG_CPP",
    "queueId": "0",
    "properties": "KEYS\x01k1\x02TAGS\x01TagA\x02WAIT\x01true\x02myprop\x01v1\x02",
    "reconsumeTimes": "0",
    "sysFlag": "0",
    "topic": "TopicTest",
    "unitMode": "0",
}

# remoting.md 3.2: ali-ons' SEND_MESSAGE_V2 fields.
ALI_ONS_SEND_FIELDS = {
    "a": "PG_NODE",
    "b": "TopicN",
    "c": "TBW102",
    "d": "4",
    "e": "2",
    "f": "0",
    "g": "1795498830064",
    "h": "0",
    "i": "TAGS\x01TagA\x02KEYS\x01nk0\x02myprop\x01nv0\x02",
    "j": "0",
    "k": "false",
}


def test_cpp_send_header_v1() -> None:
    header = SendMessageRequestHeader.from_ext_fields(CPP_SEND_FIELDS)
    assert header == SendMessageRequestHeader(
        producer_group="PG_CPP",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=1795498742046,
        flag=0,
        properties=CPP_SEND_FIELDS["properties"],
        reconsume_times=0,
        unit_mode=False,
        batch=False,
    )
    assert header.properties_map() == {"KEYS": "k1", "TAGS": "TagA", "WAIT": "true", "myprop": "v1"}


def test_ali_ons_send_header_v2_maps_to_the_same_fields() -> None:
    header = SendMessageRequestHeader.from_v2_ext_fields(ALI_ONS_SEND_FIELDS)
    assert (header.producer_group, header.topic, header.default_topic) == (
        "PG_NODE",
        "TopicN",
        "TBW102",
    )
    assert (header.default_topic_queue_nums, header.queue_id, header.born_timestamp) == (
        4,
        2,
        1795498830064,
    )
    assert header.unit_mode is False and header.batch is False
    assert header.max_reconsume_times is None and header.broker_name is None
    assert header.properties_map()["myprop"] == "nv0"
    # the long form of the same header parses to the same value
    long_fields = {
        long: ALI_ONS_SEND_FIELDS[short]
        for long, short in SEND_V2_FIELD_NAMES.items()
        if short in ALI_ONS_SEND_FIELDS
    }
    assert SendMessageRequestHeader.from_ext_fields(long_fields) == header


def test_v2_names_are_rocketmqs_a_to_n() -> None:
    assert list(SEND_V2_FIELD_NAMES.values()) == list("abcdefghijklmn")
    wire_names = {f.metadata["wire"] for f in dataclasses.fields(SendMessageRequestHeader)}
    assert wire_names == set(SEND_V2_FIELD_NAMES)
    assert SEND_V2_FIELD_NAMES["maxReconsumeTimes"] == "l" and SEND_V2_FIELD_NAMES["batch"] == "m"


def test_send_header_v1_v2_round_trip() -> None:
    header = SendMessageRequestHeader(
        producer_group="G",
        topic="T",
        default_topic="TBW102",
        default_topic_queue_nums=8,
        queue_id=3,
        sys_flag=1,
        born_timestamp=2**40,
        flag=-7,
        properties="TAGS\x01x\x02",
        reconsume_times=2,
        unit_mode=True,
        batch=True,
        max_reconsume_times=16,
        broker_name="broker-a",
    )
    v2 = header.to_v2_ext_fields()
    assert v2 == {
        "a": "G",
        "b": "T",
        "c": "TBW102",
        "d": "8",
        "e": "3",
        "f": "1",
        "g": str(2**40),
        "h": "-7",
        "i": "TAGS\x01x\x02",
        "j": "2",
        "k": "true",
        "l": "16",
        "m": "true",
        "n": "broker-a",
    }
    assert SendMessageRequestHeader.from_v2_ext_fields(v2) == header
    v1 = header.to_ext_fields()
    assert v1["producerGroup"] == "G" and v1["bname"] == "broker-a" and v1["batch"] == "true"
    assert SendMessageRequestHeader.from_ext_fields(v1) == header


def test_parse_send_header_by_code_and_batch_flag() -> None:
    assert parse_send_message_request_header(10, CPP_SEND_FIELDS).topic == "TopicTest"
    assert parse_send_message_request_header(310, ALI_ONS_SEND_FIELDS).topic == "TopicN"
    # 320 is a batch whatever its m says; 10 with the C++ client's batch:"1" is a batch too
    assert parse_send_message_request_header(320, ALI_ONS_SEND_FIELDS).batch is True
    cpp_batch = {**CPP_SEND_FIELDS, "batch": "1"}
    assert parse_send_message_request_header(RequestCode.SEND_MESSAGE, cpp_batch).batch is True
    with pytest.raises(ValueError, match="not a send"):
        parse_send_message_request_header(11, CPP_SEND_FIELDS)
    # code 10 wants long names, 310 short ones
    with pytest.raises(HeaderError, match="'producerGroup' is missing"):
        parse_send_message_request_header(10, ALI_ONS_SEND_FIELDS)
    with pytest.raises(HeaderError, match="'a' is missing"):
        parse_send_message_request_header(310, CPP_SEND_FIELDS)


@pytest.mark.parametrize(
    "name",
    [
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
    ],
)
def test_send_header_required_fields(name: str) -> None:
    fields = {k: v for k, v in CPP_SEND_FIELDS.items() if k != name}
    with pytest.raises(HeaderError, match=f"SendMessageRequestHeader: field '{name}' is missing"):
        SendMessageRequestHeader.from_ext_fields(fields)
    short = SEND_V2_FIELD_NAMES[name]
    v2 = {k: v for k, v in ALI_ONS_SEND_FIELDS.items() if k != short}
    with pytest.raises(HeaderError, match=f"field '{short}' is missing") as info:
        SendMessageRequestHeader.from_v2_ext_fields(v2)
    assert info.value.field_name == short


def test_send_header_optional_fields_default_like_java() -> None:
    required = ["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId"]
    required += ["sysFlag", "bornTimestamp", "flag"]
    header = SendMessageRequestHeader.from_ext_fields({k: CPP_SEND_FIELDS[k] for k in required})
    assert header.properties is None and header.properties_map() == {}
    assert (header.reconsume_times, header.unit_mode, header.batch) == (0, False, False)


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("queueId", "abc", "is not an integer"),
        ("queueId", "1.5", "is not an integer"),
        ("queueId", " 1", "is not an integer"),
        ("queueId", "", "is not an integer"),
        ("queueId", "1_000", "is not an integer"),
        ("queueId", "+-1", "is not an integer"),
        ("queueId", "\u0661", "is not an integer"),
        ("queueId", "2147483648", "is out of the i32 range"),
        ("sysFlag", "-2147483649", "is out of the i32 range"),
        ("bornTimestamp", "9223372036854775808", "is out of the i64 range"),
        ("bornTimestamp", "1" * 30, "is not an integer"),
        ("batch", "yes", "is not a boolean"),
        ("unitMode", "", "is not a boolean"),
    ],
)
def test_send_header_invalid_values(name: str, value: str, problem: str) -> None:
    with pytest.raises(HeaderError, match=f"field '{name}' {problem}"):
        SendMessageRequestHeader.from_ext_fields({**CPP_SEND_FIELDS, name: value})


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("TRUE", True), ("1", True), ("false", False), ("False", False), ("0", False)],
)
def test_booleans(value: str, expected: bool) -> None:
    header = SendMessageRequestHeader.from_ext_fields({**CPP_SEND_FIELDS, "batch": value})
    assert header.batch is expected


def test_integers_accept_java_forms() -> None:
    header = SendMessageRequestHeader.from_ext_fields(
        {**CPP_SEND_FIELDS, "queueId": "+3", "flag": "-2147483648", "bornTimestamp": "007"}
    )
    assert (header.queue_id, header.flag, header.born_timestamp) == (3, -(2**31), 7)


def test_send_response_header_is_all_strings() -> None:
    fields = SendMessageResponseHeader(
        msg_id="7F000001000051AF0000000000000524", queue_id=2, queue_offset=0
    ).to_ext_fields()
    assert fields == {
        "msgId": "7F000001000051AF0000000000000524",
        "queueId": "2",
        "queueOffset": "0",
    }
    assert SendMessageResponseHeader.from_ext_fields(fields).queue_id == 2


@pytest.mark.parametrize(
    ("fields", "flags"),
    [
        (  # C++ push consumer, with the commit bit (remoting.md 3.3)
            {
                "commitOffset": "2",
                "consumerGroup": "CG_CPP",
                "maxMsgNums": "32",
                "queueId": "0",
                "queueOffset": "2",
                "subVersion": "1795498769827",
                "subscription": "*",
                "suspendTimeoutMillis": "15000",
                "sysFlag": "7",
                "topic": "TopicTest",
            },
            (True, True, True),
        ),
        (  # C++ pull consumer (3.5)
            {
                "commitOffset": "0",
                "consumerGroup": "CG_PULL",
                "maxMsgNums": "2",
                "queueId": "1",
                "queueOffset": "0",
                "subVersion": "0",
                "subscription": "*",
                "suspendTimeoutMillis": "20000",
                "sysFlag": "4",
                "topic": "TopicB",
            },
            (False, False, True),
        ),
    ],
)
def test_pull_request_header(fields: dict[str, str], flags: tuple[bool, bool, bool]) -> None:
    header = PullMessageRequestHeader.from_ext_fields(fields)
    assert (header.has_commit_offset, header.has_suspend, header.has_subscription) == flags
    assert header.subscription == "*" and header.expression_type is None
    assert not header.has_class_filter
    assert PullMessageRequestHeader.from_ext_fields(header.to_ext_fields()) == header


def test_ali_ons_pull_request_through_the_frame_decoder() -> None:
    """ali-ons sends numbers (remoting.md 3.4): frame decoder + header view end to end."""
    header = (
        b'{"code":11,"language":"JAVA","opaque":7,"flag":0,"version":121,"extFields":'
        b'{"consumerGroup":"CG_NODE","topic":"TopicN","queueId":0,"queueOffset":0,'
        b'"maxMsgNums":32,"sysFlag":6,"commitOffset":0,"suspendTimeoutMillis":15000,'
        b'"subscription":"*","subVersion":1795498834785}}'
    )
    (cmd,) = FrameDecoder().feed(struct.pack(">ii", 4 + len(header), len(header)) + header)
    pull = PullMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    assert (pull.consumer_group, pull.queue_offset, pull.max_msg_nums) == ("CG_NODE", 0, 32)
    assert pull.suspend_timeout_millis == 15000 and pull.sub_version == 1795498834785
    assert pull.has_suspend and pull.has_subscription and not pull.has_commit_offset


def test_pull_request_requires_sub_version() -> None:
    fields = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "1",
        "sysFlag": "0",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
    }
    with pytest.raises(HeaderError, match="'subVersion' is missing"):
        PullMessageRequestHeader.from_ext_fields(fields)


def test_pull_response_header_strings_for_the_cpp_client() -> None:
    fields = PullMessageResponseHeader(
        next_begin_offset=12, min_offset=0, max_offset=40
    ).to_ext_fields()
    assert fields == {
        "nextBeginOffset": "12",
        "minOffset": "0",
        "maxOffset": "40",
        "suggestWhichBrokerId": "0",
    }
    response = RemotingCommand(code=0, flag=1, ext_fields=fields)
    assert b'"nextBeginOffset":"12"' in encode(response)  # a JSON string, not a number


def test_offset_headers() -> None:
    query = QueryConsumerOffsetRequestHeader.from_ext_fields(
        {"consumerGroup": "G", "queueId": "0", "topic": "%RETRY%G"}
    )
    assert query.set_zero_if_not_found is None and query.topic == "%RETRY%G"
    assert OffsetResponseHeader(offset=5).to_ext_fields() == {"offset": "5"}
    update = UpdateConsumerOffsetRequestHeader.from_ext_fields(
        {"consumerGroup": "CG_NODE", "topic": "T", "queueId": "0", "commitOffset": "-1"}
    )
    assert update.commit_offset == -1  # ali-ons' untouched retry queue: the caller ignores it
    with pytest.raises(
        HeaderError, match="UpdateConsumerOffsetRequestHeader: field 'commitOffset'"
    ):
        UpdateConsumerOffsetRequestHeader.from_ext_fields(
            {"consumerGroup": "G", "topic": "T", "queueId": "0"}
        )


def test_route_unregister_send_back_headers() -> None:
    assert (
        GetRouteInfoRequestHeader.from_ext_fields({"topic": "T"}).accept_standard_json_only is None
    )
    unregister = UnregisterClientRequestHeader.from_ext_fields(
        {"clientID": "2457-127.0.0.1@DEFAULT", "producerGroup": "PG_CPP", "consumerGroup": ""}
    )
    assert unregister.client_id == "2457-127.0.0.1@DEFAULT" and unregister.consumer_group == ""
    cpp = ConsumerSendMsgBackRequestHeader.from_ext_fields(
        {"delayLevel": "0", "group": "CG_CPP", "offset": "1738"}
    )
    assert (cpp.offset, cpp.delay_level, cpp.origin_msg_id, cpp.unit_mode) == (1738, 0, None, False)
    ons = ConsumerSendMsgBackRequestHeader.from_ext_fields(
        {
            "offset": "2244",
            "group": "CG_NODE",
            "delayLevel": "0",
            "originMsgId": "ID",
            "originTopic": "TopicN",
            "unitMode": "false",
            "maxReconsumeTimes": "16",
        }
    )
    assert (ons.origin_topic, ons.max_reconsume_times) == ("TopicN", 16)


def test_end_transaction_header() -> None:
    fields = {
        "producerGroup": "PG",
        "tranStateTableOffset": "3",
        "commitLogOffset": "1024",
        "commitOrRollback": "8",
        "msgId": "ID",
        "fromTransactionCheck": "true",
    }
    header = EndTransactionRequestHeader.from_ext_fields(fields)
    assert header.commit_or_rollback == 8 and header.from_transaction_check is True
    for value in ("0", "12"):
        EndTransactionRequestHeader.from_ext_fields({**fields, "commitOrRollback": value})
    with pytest.raises(HeaderError, match="commitOrRollback' is 4"):
        EndTransactionRequestHeader.from_ext_fields({**fields, "commitOrRollback": "4"})


def test_unknown_fields_are_ignored_and_values_must_be_strings() -> None:
    header = GetRouteInfoRequestHeader.from_ext_fields({"topic": "T", "AccessKey": "", "x": "1"})
    assert header.to_ext_fields() == {"topic": "T"}
    # a raw JSON number (not through the frame decoder) is tolerated as Java text
    assert OffsetResponseHeader.from_ext_fields({"offset": 5}).offset == 5  # type: ignore[dict-item]
    with pytest.raises(HeaderError, match="'offset' is a list"):
        OffsetResponseHeader.from_ext_fields({"offset": [5]})  # type: ignore[dict-item]


def test_headers_survive_both_serializations() -> None:
    header = SendMessageRequestHeader.from_v2_ext_fields(ALI_ONS_SEND_FIELDS)
    for kind in SerializeType:
        cmd = RemotingCommand(
            code=310, ext_fields=header.to_v2_ext_fields(), body=b"hi", serialize_type=kind
        )
        (decoded,) = FrameDecoder().feed(encode(cmd))
        assert SendMessageRequestHeader.from_v2_ext_fields(decoded.ext_fields) == header


# --- the properties string ---------------------------------------------------------------------


def test_properties_string_rocketmq_form() -> None:
    props = {"KEYS": "k1 k2", "TAGS": "TagA", "UNIQ_KEY": "0100007F0000316700009EF3057D0100"}
    text = properties_to_string(props)
    assert (
        text == "KEYS\x01k1 k2\x02TAGS\x01TagA\x02UNIQ_KEY\x010100007F0000316700009EF3057D0100\x02"
    )
    assert string_to_properties(text) == props
    assert properties_to_string({}) == "" and string_to_properties("") == {}
    assert string_to_properties("A\x011\x02B\x012") == {"A": "1", "B": "2"}  # no final separator


PROPERTY_TEXT = st.text(
    st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(PROPERTY_TEXT, PROPERTY_TEXT, max_size=8))
def test_properties_string_round_trip(props: dict[str, str]) -> None:
    assert string_to_properties(properties_to_string(props)) == props


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "consumerGroup",
                "topic",
                "queueId",
                "queueOffset",
                "maxMsgNums",
                "sysFlag",
                "commitOffset",
                "suspendTimeoutMillis",
                "subVersion",
                "subscription",
                "maxMsgBytes",
            ]
        ),
        st.text(max_size=12) | st.from_regex(r"[ +\-0-9]{0,22}", fullmatch=True),
    )
)
def test_random_fields_raise_only_header_error(fields: dict[str, str]) -> None:
    try:
        header = PullMessageRequestHeader.from_ext_fields(fields)
    except HeaderError:
        return
    assert PullMessageRequestHeader.from_ext_fields(header.to_ext_fields()) == header
