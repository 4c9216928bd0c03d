"""The sans-IO codec: layouts, round trips, validation, corrupted bytes, ids and hashes."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.store import codec as fmt
from wharf.store.errors import CorruptRecordError, InvalidMessageError
from wharf.store.model import MessageInput

HOST = "10.1.2.3:10911"
MAX = 64 * 1024


def encode(
    messages, topic="TopicA", queue_id=3, first_queue_offset=7, start=1000, ts=1_700_000_000_000
):
    return fmt.encode_batch(topic, queue_id, first_queue_offset, messages, start, ts, HOST, MAX)


# --- layouts -------------------------------------------------------------------------------------


def test_layout_sizes_match_rocketmq():
    assert fmt.RECORD_HEADER.size == 88
    assert fmt.CQ_UNIT.size == 20
    assert fmt.INDEX_HEADER.size == 40
    assert fmt.INDEX_ENTRY.size == 20
    assert fmt.INDEX_SLOT.size == 4
    assert fmt.CHECKPOINT.size <= fmt.CHECKPOINT_FILE_SIZE == 4096


def test_record_bytes_follow_the_documented_layout():
    body = b"hello"
    batch = encode(
        [MessageInput(body, {"TAGS": "t"}, flag=9, born_timestamp=5, born_host="1.2.3.4:99")]
    )
    data = batch.data
    props = b"TAGS\x01t\x02"
    assert len(data) == 88 + len(body) + 1 + len(b"TopicA") + 2 + len(props) == batch.sizes[0]
    assert int.from_bytes(data[0:4], "big") == len(data)
    assert data[4:8] == bytes.fromhex("DAA320A7")
    assert int.from_bytes(data[8:12], "big") == zlib.crc32(body) & 0x7FFFFFFF
    assert int.from_bytes(data[12:16], "big") == 3  # queue id
    assert int.from_bytes(data[16:20], "big") == 9  # flag
    assert int.from_bytes(data[20:28], "big") == 7  # queue offset
    assert int.from_bytes(data[28:36], "big") == 1000  # physical offset
    assert data[48:56] == bytes([1, 2, 3, 4]) + (99).to_bytes(4, "big")  # born host
    assert data[64:72] == bytes([10, 1, 2, 3]) + (10911).to_bytes(4, "big")  # store host
    assert data[88 : 88 + len(body)] == body
    assert data[93] == 6 and data[94:100] == b"TopicA"
    assert int.from_bytes(data[100:102], "big") == len(props) and data[102:] == props


# --- round trips ---------------------------------------------------------------------------------

prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
messages_strategy = st.lists(
    st.builds(
        MessageInput,
        body=st.binary(min_size=1, max_size=300),
        properties=st.dictionaries(prop_text, prop_text, max_size=5),
        flag=st.integers(-(2**31), 2**31 - 1),
        sys_flag=st.integers(0, 0xFF),
        born_timestamp=st.integers(0, 2**62),
        born_host=st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 65535)).map(
            lambda t: f"192.{t[0]}.{t[1]}.7:{t[2]}"
        ),
        reconsume_times=st.integers(0, 100),
        prepared_transaction_offset=st.integers(0, 2**62),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(
    messages=messages_strategy,
    topic=st.from_regex(r"[%a-zA-Z0-9_-][%a-zA-Z0-9._-]{0,126}", fullmatch=True),
    queue_id=st.integers(0, 2**31 - 1),
    first_queue_offset=st.integers(0, 2**60),
    start=st.integers(0, 2**60),
)
def test_encode_then_decode_round_trips(messages, topic, queue_id, first_queue_offset, start):
    batch = fmt.encode_batch(topic, queue_id, first_queue_offset, messages, start, 42, HOST, MAX)
    assert len(batch.data) == sum(batch.sizes)
    pos = 0
    for i, (msg, offset, size) in enumerate(zip(messages, batch.offsets, batch.sizes, strict=True)):
        assert offset == start + pos
        assert fmt.check_record(batch.data, pos, True, offset) == size
        stored = fmt.decode_record(batch.data, pos)
        assert stored.body == msg.body
        assert stored.properties == msg.properties
        assert (stored.topic, stored.queue_id, stored.queue_offset) == (
            topic,
            queue_id,
            first_queue_offset + i,
        )
        assert (stored.commit_log_offset, stored.store_size) == (offset, size)
        assert stored.flag == msg.flag and stored.sys_flag == msg.sys_flag
        assert stored.born_timestamp == (msg.born_timestamp or 42) and stored.store_timestamp == 42
        assert stored.born_host == msg.born_host and stored.store_host == HOST
        assert stored.reconsume_times == msg.reconsume_times
        assert stored.prepared_transaction_offset == msg.prepared_transaction_offset
        assert stored.body_crc == zlib.crc32(msg.body) & 0x7FFFFFFF
        dispatch = fmt.decode_dispatch(batch.data, pos)
        assert (dispatch.commit_log_offset, dispatch.size, dispatch.queue_offset) == (
            offset,
            size,
            first_queue_offset + i,
        )
        assert dispatch.tags == msg.properties.get("TAGS", "")
        assert dispatch.uniq_key == msg.properties.get("UNIQ_KEY", "")
        assert dispatch.keys == [k for k in msg.properties.get("KEYS", "").split(" ") if k]
        pos += size


@given(st.dictionaries(prop_text, prop_text, max_size=8))
def test_properties_string_round_trips(props):
    assert fmt.string_to_properties(fmt.properties_to_string(props)) == props


def test_decode_with_base_offset_uses_buffer_position():
    batch = encode([MessageInput(b"a"), MessageInput(b"b")])
    assert (
        fmt.decode_record(batch.data, batch.sizes[0], base_offset=5000).commit_log_offset
        == 5000 + batch.sizes[0]
    )


def test_keys_and_tags_reach_the_dispatch_request():
    batch = encode(
        [MessageInput(b"x", {"KEYS": "order-1 order-2", "TAGS": "TagA", "UNIQ_KEY": "U1"})]
    )
    req = fmt.decode_dispatch(batch.data, 0)
    assert req.keys == ["order-1", "order-2"] and req.tags == "TagA" and req.uniq_key == "U1"
    assert req.topic == "TopicA" and req.queue_id == 3 and req.store_timestamp == 1_700_000_000_000


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "topic", "fragment"),
    [
        ([MessageInput(b"")], "T", "empty body"),
        ([MessageInput(b"x" * (MAX + 1))], "T", "maxMessageSize"),
        ([MessageInput(b"x")], "bad topic", "[%a-zA-Z0-9._-]"),
        ([MessageInput(b"x")], "t" * 250, "1-249"),
        ([MessageInput(b"x")], "", "1-249"),
        ([MessageInput(b"x")], "tópico", "[%a-zA-Z0-9._-]"),
        ([MessageInput(b"x", {"k": "v" * 40_000})], "T", "32767"),
        ([MessageInput(b"x", {"k\x01": "v"})], "T", "separator"),
        ([MessageInput(b"x", {"k": "v\x02w"})], "T", "separator"),
        ([], "T", "at least one"),
    ],
)
def test_invalid_batches_are_refused_with_an_actionable_message(messages, topic, fragment):
    with pytest.raises(InvalidMessageError, match=fragment.replace("[", r"\[").replace("%", "%")):
        encode(messages, topic=topic)


def test_one_bad_message_refuses_the_whole_batch():
    with pytest.raises(InvalidMessageError, match="#2"):
        encode([MessageInput(b"ok"), MessageInput(b"ok"), MessageInput(b"")])


def test_negative_queue_id_is_refused():
    with pytest.raises(InvalidMessageError, match="queue id"):
        encode([MessageInput(b"x")], queue_id=-1)


def test_non_ipv4_born_host_is_stored_as_zero_address_with_port():
    stored = fmt.decode_record(encode([MessageInput(b"x", born_host="[::1]:4242")]).data)
    assert stored.born_host == "0.0.0.0:4242"


# --- corrupted bytes -------------------------------------------------------------------------------


def two_records():
    return encode([MessageInput(b"first body"), MessageInput(b"second body", {"TAGS": "x"})])


def test_flipped_crc_byte_is_corrupt_only_when_crc_is_checked():
    batch = two_records()
    data = bytearray(batch.data)
    data[8] ^= 0x01
    assert fmt.check_record(data, 0, check_crc=True) == fmt.RECORD_CORRUPT
    assert fmt.check_record(data, 0, check_crc=False) == batch.sizes[0]


def test_flipped_body_byte_fails_the_crc():
    data = bytearray(two_records().data)
    data[90] ^= 0xFF
    assert fmt.check_record(data, 0) == fmt.RECORD_CORRUPT


def test_bad_magic_is_corrupt_and_refused_by_the_decoders():
    data = bytearray(two_records().data)
    data[4:8] = b"\x12\x34\x56\x78"
    assert fmt.check_record(data, 0) == fmt.RECORD_CORRUPT
    with pytest.raises(CorruptRecordError, match="magic"):
        fmt.decode_record(data, 0)
    with pytest.raises(CorruptRecordError):
        fmt.decode_dispatch(data, 0)


@pytest.mark.parametrize("cut", [5, 20, 88, 95, -1])
def test_truncated_record_is_corrupt(cut):
    batch = two_records()
    data = batch.data[: batch.sizes[0]][:cut]
    assert fmt.check_record(data, 0) == fmt.RECORD_CORRUPT
    with pytest.raises(CorruptRecordError):
        fmt.decode_record(data, 0)


def test_sizes_that_do_not_add_up_are_corrupt():
    data = bytearray(two_records().data)
    data[84:88] = (3).to_bytes(4, "big")  # BODYLENGTH shorter than the real body
    assert fmt.check_record(data, 0, check_crc=False) == fmt.RECORD_CORRUPT
    with pytest.raises(CorruptRecordError):
        fmt.decode_record(data, 0)


def test_wrong_physical_offset_is_corrupt_when_an_offset_is_expected():
    batch = two_records()
    assert fmt.check_record(batch.data, 0, True, expected_offset=1000) == batch.sizes[0]
    assert fmt.check_record(batch.data, 0, True, expected_offset=1008) == fmt.RECORD_CORRUPT


def test_zeros_are_end_and_blank_marker_is_blank():
    assert fmt.check_record(bytes(64), 0) == fmt.RECORD_END
    assert fmt.check_record(b"\0\0", 0) == fmt.RECORD_END
    tail = fmt.encode_blank(100) + bytes(92)
    assert fmt.check_record(tail, 0) == fmt.RECORD_BLANK
    assert (
        fmt.check_record(fmt.encode_blank(200) + bytes(92), 0) == fmt.RECORD_CORRUPT
    )  # past the end
    with pytest.raises(ValueError):
        fmt.encode_blank(7)


# --- hashes, ids, names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("TagA", 2598919),
        ("hello", 99162322),
        ("你好", 652829),
        ("polygenelubricants", -2147483648),
        ("😀", 0xD83D * 31 + 0xDE00),
    ],
)
def test_java_string_hash_matches_java(text, expected):
    assert fmt.java_string_hash(text) == expected


def test_index_key_hash_is_abs_and_zero_for_min_int():
    assert fmt.index_key_hash("polygenelubricants") == 0
    assert fmt.index_key_hash("TagA") == 2598919
    assert all(fmt.index_key_hash(f"T#key-{i}") >= 0 for i in range(500))


def test_offset_message_id_round_trips():
    msg_id = fmt.create_offset_msg_id("10.1.2.3:10911", 123456789)
    assert msg_id == "0A010203" + "00002A9F" + "00000000075BCD15"
    assert fmt.decode_offset_msg_id(msg_id) == ("10.1.2.3:10911", 123456789)
    assert fmt.decode_offset_msg_id(msg_id.lower()) == ("10.1.2.3:10911", 123456789)


@pytest.mark.parametrize(
    "garbage", ["", "XYZ", "0A010203", "Z" * 32, "0A01020300002A9FFFFFFFFFFFFFFFFF"]
)
def test_garbage_offset_message_ids_are_invalid(garbage):
    with pytest.raises(InvalidMessageError):
        fmt.decode_offset_msg_id(garbage)


@pytest.mark.parametrize(
    "host", ["localhost:1", "1.2.3.4", "1.2.3.4:99999", "1.2.3:4", "a.b.c.d:1"]
)
def test_bad_store_host_is_refused(host):
    with pytest.raises(InvalidMessageError, match="ipv4:port"):
        fmt.encode_host(host)


def test_host_round_trips():
    assert fmt.decode_host(fmt.encode_host("127.0.0.1:8081")) == "127.0.0.1:8081"


def test_segment_file_names_are_twenty_digit_offsets():
    assert fmt.segment_file_name(0) == "00000000000000000000"
    assert fmt.segment_file_name(1073741824) == "00000000001073741824"
    assert fmt.parse_segment_file_name("00000000001073741824") == 1073741824
    for bad in ["123", "0000000000000000000x", "000000000000000000000"]:
        with pytest.raises(ValueError):
            fmt.parse_segment_file_name(bad)


def test_zeroed_record_tail_is_caught_although_the_crc_covers_only_the_body():
    batch = encode([MessageInput(b"body", {"UNIQ_KEY": "ABC"})])
    for keep in range(batch.sizes[0] - 1, 88 + 4, -1):  # torn anywhere after the body
        data = batch.data[:keep] + bytes(batch.sizes[0] - keep)
        assert fmt.check_record(data, 0) == fmt.RECORD_CORRUPT, keep
    no_props = encode([MessageInput(b"body")])
    assert fmt.check_record(no_props.data, 0) == no_props.sizes[0]
    torn_topic = no_props.data[:-4] + bytes(4)  # last topic byte and the (empty) props length
    assert fmt.check_record(torn_topic, 0) == fmt.RECORD_CORRUPT
