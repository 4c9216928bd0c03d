"""The sans-IO codec: primitives, the schema tables, headers, ApiVersions' fallback bytes."""

from __future__ import annotations

import struct

import pytest
from wharf.broker.frontends.kafka.apis import APIS
from wharf.broker.frontends.kafka.codec import (
    FrameError,
    FrameReader,
    api_versions_body,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_header,
    unsupported_version,
)
from wharf.broker.frontends.kafka.errors import Code
from wharf.broker.frontends.kafka.wire import DecodeError, Reader, Writer


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -(2**31), 2**31 - 1, 2**62])
def test_varint_round_trip(value: int) -> None:
    w = Writer()
    w.varint(value)
    assert Reader(bytes(w.buf)).varint() == value


def test_zigzag_bytes_match_kafka() -> None:
    w = Writer()
    for value in (0, -1, 1, -2, 150):
        w.varint(value)
    assert bytes(w.buf) == bytes([0, 1, 2, 3, 0xAC, 0x02])


def test_short_and_lying_input_raise_decode_error() -> None:
    with pytest.raises(DecodeError):
        Reader(b"\x00").int32()
    with pytest.raises(DecodeError):
        Reader(b"\x00\x10abc").string()  # says 16 bytes, has 3
    with pytest.raises(DecodeError):
        Reader(b"\xff" * 11).uvarint()


def _request(key: int, version: int, body: dict) -> tuple:
    frame = encode_request(APIS[key], version, 7, body)
    header, reader = parse_header(frame[4:])
    return header, decode_request(APIS[key], header, reader)


def test_request_round_trip_uses_each_versions_fields() -> None:
    body = {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "member_id": "",
        "group_instance_id": "static-1",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
    }
    header, v5 = _request(11, 5, body)
    assert (header.api_key, header.api_version, header.correlation_id) == (11, 5, 7)
    assert header.client_id == "wharf-test"
    assert v5 == body
    _, v0 = _request(11, 0, body)  # v0: no rebalance timeout nor instance id on the wire
    assert v0["rebalance_timeout_ms"] == -1 and v0["group_instance_id"] is None
    assert v0["protocols"] == body["protocols"]


def test_nullable_array_round_trips_null() -> None:
    _, body = _request(3, 1, {"topics": None})
    assert body["topics"] is None
    _, body = _request(3, 1, {"topics": [{"name": "a"}]})
    assert body["topics"] == [{"name": "a"}]


def test_flexible_version_uses_compact_forms_and_tags() -> None:
    """InitProducerId v2 is flexible: header v2 (tag section), compact string, tags closing
    the body; the response header v1 carries a tag section too."""
    frame = encode_request(APIS[22], 2, 9, {"transactional_id": None, "transaction_timeout_ms": 5})
    assert frame[4:] == (
        struct.pack(">hhih", 22, 2, 9, 10)
        + b"wharf-test"
        + b"\x00"
        + b"\x00"
        + b"\x00\x00\x00\x05\x00"
    )
    reply = encode_response(
        APIS[22], 2, 9, {"error_code": 0, "producer_id": 42, "producer_epoch": 0}
    )
    assert reply[4:] == struct.pack(">ib", 9, 0) + struct.pack(">ihqh", 0, 0, 42, 0) + b"\x00"
    assert decode_response(APIS[22], 2, reply[4:])[1]["producer_id"] == 42


def test_api_versions_v4_is_answered_in_v0_with_error_35_and_no_tags() -> None:
    """A client sends its highest ApiVersions first (kafka-python 3: v4); the answer is v0's
    layout (header v0, no tag section anywhere) with UNSUPPORTED_VERSION and the full list,
    so it retries with a version listed."""
    frame = struct.pack(">hhih", 18, 4, 1, 3) + b"cli" + b"\x00" + b"\x04kcat\x041.7\x00"
    header, _ = parse_header(frame)
    reply = unsupported_version(header)
    assert reply is not None
    (size,) = struct.unpack_from(">i", reply)
    assert size == len(reply) - 4
    correlation, error, count = struct.unpack_from(">ihi", reply, 4)
    assert (correlation, error) == (1, Code.UNSUPPORTED_VERSION)
    assert count == len(APIS)
    assert len(reply) == 4 + 4 + 2 + 4 + 6 * count  # v0: nothing after the list
    listed = {}
    for i in range(count):
        key, low, high = struct.unpack_from(">hhh", reply, 14 + 6 * i)
        listed[key] = (low, high)
    assert listed[18] == (0, 3)
    assert listed[0] == (3, 8) and listed[1] == (4, 11) and listed[3] == (0, 8)


def test_api_versions_v3_answer_has_empty_tag_sections_and_a_v0_header() -> None:
    """Debian's kcat (librdkafka 2.0.2) cannot read tagged fields in this answer: the header
    is v0 (no tag byte) and every tag section is empty (one 0 byte)."""
    reply = encode_response(APIS[18], 3, 5, api_versions_body())
    count = len(APIS)
    expected = struct.pack(">ih", 5, 0) + bytes([count + 1])
    for api in sorted(APIS.values(), key=lambda a: a.key):
        expected += struct.pack(">hhh", api.key, api.min_version, api.max_version) + b"\x00"
    expected += struct.pack(">i", 0) + b"\x00"
    assert reply[4:] == expected


def test_unsupported_version_of_an_api_without_top_level_error_is_none() -> None:
    header, _ = parse_header(struct.pack(">hhih", 0, 2, 5, -1))  # Produce v2: magic 1 only
    assert unsupported_version(header) is None
    header, _ = parse_header(struct.pack(">hhih", 12, 9, 5, -1))  # Heartbeat v9
    reply = unsupported_version(header)
    assert reply is not None and struct.unpack_from(">ih", reply, 4) == (5, 35)


def test_frame_reader_cuts_and_refuses_oversized() -> None:
    frames = FrameReader(100)
    data = struct.pack(">i", 3) + b"abc" + struct.pack(">i", 2) + b"x"
    assert frames.feed(data) == [b"abc"]
    assert frames.feed(b"y") == [b"xy"]
    with pytest.raises(FrameError):
        FrameReader(100).feed(struct.pack(">i", 101))
    with pytest.raises(FrameError):
        FrameReader(100).feed(struct.pack(">i", -5))


def test_every_api_round_trips_its_default_response_in_every_version() -> None:
    for api in APIS.values():
        for version in range(api.min_version, api.max_version + 1):
            reply = encode_response(api, version, 3, {})
            correlation, _ = decode_response(api, version, reply[4:])
            assert correlation == 3
