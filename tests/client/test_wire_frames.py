"""wharf.wire's framing, sans IO: frames come out whole whatever the reads' boundaries, and a
peer that is not a wire peer (gRPC, TLS, garbage, a frame over the limit) is named at once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf import wire

frames_st = st.lists(
    st.tuples(
        st.sampled_from([wire.OPEN, wire.MESSAGE, wire.HALF_CLOSE, wire.CANCEL, wire.STATUS]),
        st.integers(0, 2**32 - 1),
        st.binary(max_size=300),
    ),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(frames=frames_st, cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_frames_come_out_whole_whatever_the_read_boundaries(
    frames: list[tuple[int, int, bytes]], cuts: list[int]
) -> None:
    data = wire.PREFACE + b"".join(wire.frame(k, i, p) for k, i, p in frames)
    reader = wire.FrameReader(max_payload=300)
    out: list[tuple[int, int, bytes]] = []
    start = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        out += reader.feed(data[start:cut])
        start = max(start, cut)
    assert out == frames


def test_header_and_frame_agree() -> None:
    payload = b"abc"
    assert wire.header(wire.MESSAGE, 7, 3) + payload == wire.frame(wire.MESSAGE, 7, payload)
    assert len(wire.header(wire.STATUS, 1, 0)) == wire.HEADER_SIZE == 9


@pytest.mark.parametrize(
    ("opening", "named"),
    [
        (wire.HTTP2_PREFACE, "speaks HTTP/2 (gRPC)"),
        (b"\x00\x00\x12\x04\x00\x00\x00\x00\x00", "speaks HTTP/2 (gRPC)"),  # a SETTINGS frame
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc", "speaks TLS"),  # a ClientHello
        (b"GET / HTTP/1.1\r\n", "did not open with the Wharf wire preface"),
        (b"W", None),  # a prefix of the preface: wait for more
    ],
)
def test_a_peer_that_is_not_a_wire_peer_is_named(opening: bytes, named: str | None) -> None:
    reader = wire.FrameReader(max_payload=100)
    if named is None:
        assert reader.feed(opening) == []
        return
    with pytest.raises(wire.ProtocolError, match=named.replace("(", r"\(").replace(")", r"\)")):
        reader.feed(opening)


def test_a_frame_over_the_limit_or_of_an_unknown_kind_is_refused_before_its_payload() -> None:
    reader = wire.FrameReader(max_payload=1024)
    with pytest.raises(wire.ProtocolError, match="over this side's limit of 1024"):
        reader.feed(wire.PREFACE + wire.header(wire.MESSAGE, 1, 1025))  # no payload sent
    reader = wire.FrameReader(max_payload=1024)
    with pytest.raises(wire.ProtocolError, match="unknown frame kind 9"):
        reader.feed(wire.PREFACE + wire.header(9, 1, 0))


def test_open_and_status_payloads_round_trip_and_bad_ones_are_protocol_errors() -> None:
    encoded = wire.encode_open("/wharf.v1.MessagingService/SendMessage", [("a", "b")], 2.5)
    assert wire.decode_open(encoded) == (
        "/wharf.v1.MessagingService/SendMessage",
        (("a", "b"),),
        2.5,
    )
    assert wire.decode_status(wire.encode_status(3, "bad topic")) == (3, "bad topic")
    for bad in (b"", b"{", b'{"method": 5}', b'{"method": "/a/b", "timeout": "soon"}'):
        with pytest.raises(wire.ProtocolError):
            wire.decode_open(bad)
    with pytest.raises(wire.ProtocolError):
        wire.decode_status(b'{"details": "no code"}')
