"""client.consumer.pull_wire (PullMessage replies decoded without copying the records) and the
lazy RecordMessage fields read straight from that buffer, against the protobuf parser and the
full properties decode as oracles."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.client.consumer.pull_wire import PullReply, decode_pull_reply
from wharf.client.errors import BrokerInternalError
from wharf.client.records import RecordMessage, messages_from_reply, parse_records
from wharf.store.codec.records import encode_batch
from wharf.store.model import MessageInput
from wharf.v1 import common_pb2, messaging_pb2

FIELDS = (
    "topic", "queue_topic", "queue_id", "queue_offset", "commit_log_offset", "msg_id",
    "offset_msg_id", "body", "tags", "keys", "properties", "born_timestamp", "store_timestamp",
    "reconsume_times", "born_host", "store_host", "store_size", "flag",
)  # fmt: skip


def encoded(*inputs: MessageInput) -> bytes:
    return encode_batch(
        "orders", 2, 7, list(inputs), 8192, 1_700_000_000_000, "10.1.2.3:10911", 1 << 20
    ).data


def reply_bytes(records: bytes = b"", **fields: int) -> bytes:
    return messaging_pb2.PullMessageResponse(records=records, **fields).SerializeToString()


@settings(max_examples=200, deadline=None)
@given(
    status=st.integers(0, 4),
    next_begin=st.integers(0, 2**62),
    low=st.integers(0, 2**40),
    high=st.integers(0, 2**40),
    records=st.binary(max_size=300),
)
def test_fields_and_records_match_the_protobuf_parser(
    status: int, next_begin: int, low: int, high: int, records: bytes
) -> None:
    data = reply_bytes(
        records, status=status, next_begin_offset=next_begin, min_offset=low, max_offset=high
    )
    reply = decode_pull_reply(data)
    oracle = messaging_pb2.PullMessageResponse.FromString(data)
    assert (reply.status, reply.next_begin_offset, reply.min_offset, reply.max_offset) == (
        oracle.status, oracle.next_begin_offset, oracle.min_offset, oracle.max_offset,
    )  # fmt: skip
    assert reply.records == oracle.records
    if records:  # the records are a range of the received buffer, not a copy
        assert reply.buffer is data and data[reply.records_start : reply.records_end] == records


def test_negative_int64_and_unknown_fields_decode_like_protobuf() -> None:
    data = reply_bytes(b"", next_begin_offset=-5, max_offset=3)
    unknown = bytes([0x78, 0x2A, 0x81, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0x85, 0x01, 1, 2, 3, 4])
    reply = decode_pull_reply(data + unknown)  # fields 15 (varint), 16 (fixed64), 16 (fixed32)
    assert (reply.next_begin_offset, reply.max_offset) == (-5, 3)


def test_views_from_an_older_broker_go_through_the_protobuf_parser() -> None:
    view = common_pb2.MessageView(topic="orders", queue_offset=4, body=b"hello", msg_id="U")
    data = messaging_pb2.PullMessageResponse(
        status=messaging_pb2.FOUND, next_begin_offset=5, messages=[view]
    ).SerializeToString()
    reply = decode_pull_reply(data)
    assert reply.status == messaging_pb2.FOUND and reply.next_begin_offset == 5
    (message,) = messages_from_reply(reply, "*")
    assert (message.body, message.msg_id, message.queue_offset) == (b"hello", "U", 4)


def test_garbage_raises_like_the_generated_stub() -> None:
    with pytest.raises(DecodeError):
        decode_pull_reply(b"\x32\xff\xff\xff\xff\x0f")  # records longer than the reply


def test_messages_read_in_place_equal_the_copied_path_field_by_field() -> None:
    data = encoded(
        MessageInput(b"a" * 100, {"UNIQ_KEY": "U1", "TAGS": "paid", "KEYS": "k1 k2", "x": "1"}),
        MessageInput(b"b", {"TAGS": "t", "z": "9", "UNIQ_KEY": "U2"}),  # UNIQ_KEY not first
        MessageInput(b"c", {"RETRY_TOPIC": "orig", "UNIQ_KEY": "U3"}),
        MessageInput(b"d", {}),  # no properties at all
    )
    reply = decode_pull_reply(reply_bytes(data, status=messaging_pb2.FOUND, next_begin_offset=11))
    in_place = messages_from_reply(reply, "*")
    copied = parse_records(data)
    assert all(isinstance(m, RecordMessage) and m._buf is reply.buffer for m in in_place)
    for got, want in zip(in_place, copied, strict=True):
        assert {f: getattr(got, f) for f in FIELDS} == {f: getattr(want, f) for f in FIELDS}
    assert [m.msg_id for m in in_place] == ["U1", "U2", "U3", ""]
    assert [m.tags for m in in_place] == ["paid", "t", "", ""]
    assert in_place[2].topic == "orig" and in_place[2].queue_topic == "orders"
    assert [m.body for m in messages_from_reply(reply, "t || paid")] == [b"a" * 100, b"b"]


@settings(max_examples=200, deadline=None)
@given(
    props=st.dictionaries(
        st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "RETRY_TOPIC", "XUNIQ_KEY", "a", "TAGSX"]),
        st.text(st.characters(blacklist_characters="\x00\x01\x02", codec="utf-8"), max_size=12),
        max_size=6,
    )
)
def test_single_property_reads_agree_with_the_full_properties_decode(
    props: dict[str, str],
) -> None:
    (fast,) = parse_records(encoded(MessageInput(b"body", props)))
    (full,) = parse_records(encoded(MessageInput(b"body", props)))
    full._props()  # decode the dict first: reads then come from it
    for name in ("msg_id", "tags", "keys", "topic"):
        assert getattr(fast, name) == getattr(full, name)
    assert fast.msg_id == props.get("UNIQ_KEY", "")
    assert fast.tags == props.get("TAGS", "")


def test_pull_reply_records_property_copies_on_demand() -> None:
    data = encoded(MessageInput(b"x", {"UNIQ_KEY": "U"}))
    reply = decode_pull_reply(reply_bytes(data))
    assert isinstance(reply, PullReply) and reply.records == data


def test_msg_id_of_a_record_with_a_bad_properties_length_is_an_error_not_a_guess() -> None:
    data = encoded(MessageInput(b"body", {"UNIQ_KEY": "U", "TAGS": "t"}))
    props_length_pos = 88 + 4 + 1 + len("orders")  # header, body, topic length byte, topic
    for bad in (b"\0\0", b"\xff\xff"):
        damaged = data[:props_length_pos] + bad + data[props_length_pos + 2 :]
        (message,) = parse_records(damaged)
        with pytest.raises(BrokerInternalError, match="do not add up"):
            _ = message.msg_id


def test_a_batch_of_stream_replies_decodes_each_in_place_and_errors_too() -> None:
    records = encoded(MessageInput(body=b"one"), MessageInput(body=b"two"))
    message = messaging_pb2.PullMessageResponse(
        batch=[
            messaging_pb2.PullMessageResponse(
                request_id=7, status=messaging_pb2.FOUND, next_begin_offset=9, records=records
            ),
            messaging_pb2.PullMessageResponse(
                request_id=8, error=common_pb2.ErrorInfo(code=3, message="queue_id 5 is bad")
            ),
        ]
    )
    data = message.SerializeToString()
    reply = decode_pull_reply(data)
    first, second = reply.batch
    assert (first.request_id, first.status, first.next_begin_offset) == (7, 1, 9)
    assert first.buffer is data and first.records == records  # a range of the received bytes
    assert [m.body for m in messages_from_reply(first, "*")] == [b"one", b"two"]
    assert (second.request_id, second.error) == (8, (3, "queue_id 5 is bad"))
    assert second.records == b""
