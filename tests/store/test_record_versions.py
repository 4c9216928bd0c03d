"""RocketMQ 5's two record versions (store/codec/layout.py): V1 (magic 0xDAA320A7, a one-byte
TOPICLENGTH) for topics of up to 127 bytes, V2 (0xDAA320AB, two bytes) for longer ones up to
Kafka's 249. Every codec writes the version the topic's length calls for, reads both, and the
compiled twins agree with the Python ones on both (the hypothesis differential tests of each
twin also draw long topics: test_dispatch_columns, test_fast_log_scan, test_fast_pull_runs,
test_fast_record_decoder, test_kafka_convert_fast)."""

from __future__ import annotations

import struct
from unittest import mock

import numpy as np
import pytest
from wharf.store.codec import layout
from wharf.store.codec.dispatch import decode_dispatch, decode_dispatches
from wharf.store.codec.records import (
    RECORD_CORRUPT,
    check_record,
    decode_record,
    decode_records,
    encode_batch,
    record_properties,
)
from wharf.store.codec.send_records import encode_record, tail_magic, topic_tail
from wharf.store.errors import InvalidMessageError
from wharf.store.fast import load, record_check
from wharf.store.model import MessageInput
from wharf.store.retention.compactor import key_of

LONG, SHORT, EDGE = "L" * 249, "S" * 127, "E" * 128
PROPS = {"UNIQ_KEY": "U1", "TAGS": "t", "KEYS": "k1 k2"}


def _batch(topic: str, start: int = 0, count: int = 2) -> bytes:
    messages = [MessageInput(b"body%d" % i, dict(PROPS)) for i in range(count)]
    return encode_batch(topic, 3, 7, messages, start, 99, "10.0.0.1:5", 1 << 20).data


def _magic(record: bytes, pos: int = 0) -> int:
    return int(layout.MAGIC.unpack_from(record, pos + layout.OFFSET_MAGIC)[0])


@pytest.mark.parametrize(
    ("topic", "magic", "length_bytes"),
    [
        (SHORT, layout.MESSAGE_MAGIC_CODE, bytes([127])),
        (EDGE, layout.MESSAGE_MAGIC_CODE_V2, b"\x00\x80"),
        (LONG, layout.MESSAGE_MAGIC_CODE_V2, b"\x00\xf9"),
    ],
)
def test_the_topic_s_length_picks_the_version(topic: str, magic: int, length_bytes: bytes) -> None:
    data = _batch(topic, count=1)
    assert _magic(data) == magic
    body_end = layout.RECORD_HEADER_SIZE + len(b"body0")
    assert data[body_end : body_end + len(length_bytes)] == length_bytes
    assert data[body_end + len(length_bytes) :].startswith(topic.encode())
    fixed = (
        layout.RECORD_FIXED_SIZE
        if magic == layout.MESSAGE_MAGIC_CODE
        else layout.RECORD_FIXED_SIZE_V2
    )
    props = b"".join(f"{k}\x01{v}\x02".encode() for k, v in PROPS.items())
    assert len(data) == fixed + len(b"body0") + len(topic) + len(props)
    # the SDK's send records: the same version, the same tail
    tail = topic_tail(topic)
    assert tail == length_bytes + topic.encode() and tail_magic(tail) == magic
    assert _magic(encode_record(tail, b"x", b"")) == magic


def test_a_v1_record_is_byte_identical_to_rocketmq_4() -> None:
    """127 bytes of topic stay V1, laid out by hand as RocketMQ 4.x's MessageDecoder reads it."""
    data = _batch(SHORT, count=1)
    body, topic = b"body0", SHORT.encode()
    props = b"".join(f"{k}\x01{v}\x02".encode() for k, v in PROPS.items())
    tail = body + bytes([len(topic)]) + topic + struct.pack(">h", len(props)) + props
    assert struct.unpack_from(">iI", data) == (len(data), 0xDAA320A7)
    assert data[layout.RECORD_HEADER_SIZE :] == tail


def test_one_log_of_both_versions_checks_and_decodes() -> None:
    log, positions = b"", []
    for topic in (SHORT, LONG, EDGE, "T", LONG):
        positions.append(len(log))
        log += _batch(topic, len(log), 1)
    assert [_magic(log, p) for p in positions] == [
        layout.MESSAGE_MAGIC_CODE,
        layout.MESSAGE_MAGIC_CODE_V2,
        layout.MESSAGE_MAGIC_CODE_V2,
        layout.MESSAGE_MAGIC_CODE,
        layout.MESSAGE_MAGIC_CODE_V2,
    ]
    sizes = [check_record(log, p, True, p) for p in positions]
    assert sizes == [b - a for a, b in zip(positions, [*positions[1:], len(log)], strict=True)]
    one = [decode_record(log, p) for p in positions]
    assert decode_records(log, positions, 0) == one
    assert [m.topic for m in one] == [SHORT, LONG, EDGE, "T", LONG]
    assert all(m.properties == PROPS and m.body == b"body0" for m in one)
    assert record_properties(log, positions[1]) == PROPS
    requests = decode_dispatches(log, positions, 0)
    assert [r.topic for r in requests] == [SHORT, LONG, EDGE, "T", LONG]
    assert [repr(r) for r in requests] == [repr(decode_dispatch(log, p, 0)) for p in positions]
    assert all(r.keys == ["k1", "k2"] and r.uniq_key == "U1" for r in requests)


def test_a_torn_or_mismatched_v2_record_is_corrupt() -> None:
    data = bytearray(_batch(LONG, count=1))
    assert check_record(bytes(data), 0) == len(data)
    torn = bytes(data[:-40]) + bytes(40)  # the tail zeroed: properties and part of the topic
    assert check_record(torn, 0) == RECORD_CORRUPT
    as_v1 = bytearray(data)
    as_v1[4:8] = layout.MESSAGE_MAGIC_CODE.to_bytes(4, "big")  # a V2 body read as V1
    assert check_record(bytes(as_v1), 0) == RECORD_CORRUPT


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_send_batches_of_a_long_topic_are_checked_alike(compiled: bool) -> None:
    records = b"".join(
        encode_record(topic_tail(LONG), b"v%d" % i, b"UNIQ_KEY\x01U\x02") for i in range(3)
    )
    module = record_check._compiled if compiled else None
    if compiled:
        assert module is not None  # built by `pip install -e .`
    with mock.patch.object(record_check, "_compiled", module):
        starts = record_check.check_records(records, LONG, 1 << 20)
        assert starts.tolist() == [0, len(records) // 3, 2 * len(records) // 3]
        # a V1 magic on a long topic's record (a two-byte TOPICLENGTH) is refused
        wrong = bytearray(records)
        wrong[4:8] = layout.MESSAGE_MAGIC_CODE.to_bytes(4, "big")
        with pytest.raises(InvalidMessageError, match="MAGICCODE is not a message's"):
            record_check.check_records(bytes(wrong), LONG, 1 << 20)
        # and a V2 magic on a short topic's
        short = bytearray(encode_record(topic_tail(SHORT), b"v", b""))
        short[4:8] = layout.MESSAGE_MAGIC_CODE_V2.to_bytes(4, "big")
        with pytest.raises(InvalidMessageError, match="MAGICCODE is not a message's"):
            record_check.check_records(bytes(short), SHORT, 1 << 20)


def test_check_many_takes_batches_of_both_versions() -> None:
    long = encode_record(topic_tail(LONG), b"v2", b"")
    short = encode_record(topic_tail("T"), b"v1", b"")
    found = record_check.check_records_many(
        long + short + long, [len(long), len(short), len(long)], [LONG, "T", LONG], 1 << 20
    )
    assert found is not None
    starts, counts = found
    assert starts.tolist() == [0, len(long), len(long) + len(short)] and list(counts) == [1, 1, 1]


def test_the_compiled_bare_encoder_writes_v2_as_the_python_one() -> None:
    encoder = load("_record_encoder")
    assert encoder is not None
    from wharf.store.codec.records import _crc32

    for topic in (LONG, SHORT):
        tail = topic_tail(topic)
        got = encoder.encode_bare_records(tail, [b"a", b"bb" * 300], ["ID1", "ID2"], 5, _crc32)
        assert got == [
            encode_record(tail, b"a", b"UNIQ_KEY\x01ID1\x02", 0, 0, 5),
            encode_record(tail, b"bb" * 300, b"UNIQ_KEY\x01ID2\x02", 0, 0, 5),
        ]
        assert _magic(got[0]) == tail_magic(tail)


def test_compaction_reads_the_key_of_a_v2_record() -> None:
    data = _batch(LONG, count=1)
    assert key_of(data) == (b"k1 k2", False)
    assert key_of(b"pad" + data, 3) == (b"k1 k2", False)


def test_patching_a_v2_batch_leaves_its_tail() -> None:
    records = bytearray(encode_record(topic_tail(LONG), b"v", b"UNIQ_KEY\x01U\x02"))
    before = bytes(records[layout.RECORD_HEADER_SIZE :])
    record_check.patch_records(records, np.array([0]), 2, 40, 1000, bytes(8), 77, bytes(8))
    assert bytes(records[layout.RECORD_HEADER_SIZE :]) == before
    message = decode_record(bytes(records))
    assert (message.topic, message.queue_id, message.queue_offset) == (LONG, 2, 40)
    assert check_record(bytes(records), 0, True, 1000) == len(records)
