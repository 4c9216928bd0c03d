"""The batch send body (wharf.broker.frontends.remoting.batch): RocketMQ's MessageDecoder.encodeMessages
bytes written by hand, round trips, and every malformed body refused with BatchError."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wharf.broker.frontends.remoting.batch import (
    BatchError,
    BatchMessage,
    decode_messages,
    encode_messages,
)


def _record(body: bytes, props: bytes, flag: int = 0) -> bytes:
    total = 20 + len(body) + 2 + len(props)
    return (
        struct.pack(">iiiii", total, 0, 0, flag, len(body))
        + body
        + struct.pack(">h", len(props))
        + props
    )


def test_decodes_what_the_cpp_client_sends() -> None:
    body = _record(b"m4", b"KEYS\x01k4\x02TAGS\x01TagA\x02UNIQ_KEY\x01U4\x02", flag=3) + _record(
        b"m5", b"TAGS\x01TagB\x02"
    )
    messages = decode_messages(body)
    assert messages == [
        BatchMessage(3, b"m4", {"KEYS": "k4", "TAGS": "TagA", "UNIQ_KEY": "U4"}),
        BatchMessage(0, b"m5", {"TAGS": "TagB"}),
    ]
    assert encode_messages(messages) == body


def test_properties_may_be_empty() -> None:
    assert decode_messages(_record(b"x", b"")) == [BatchMessage(0, b"x", {})]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00" * 19,
        _record(b"abc", b"")[:-1],  # truncated
        struct.pack(">iiiii", 10, 0, 0, 0, 0) + b"\x00\x00",  # totalSize too small
        struct.pack(">iiiii", 30, 0, 0, 0, 100) + b"\x00" * 10,  # body past the record
        struct.pack(">iiiii", 27, 0, 0, 0, 3) + b"abc" + struct.pack(">h", 5) + b"xx",
        struct.pack(">iiiii", 25, 0, 0, 0, 3) + b"abc" + struct.pack(">h", -1),
        _record(b"ok", b"") + b"\x00\x00",  # trailing bytes
    ],
)
def test_malformed_bodies_raise_batch_error(body: bytes) -> None:
    with pytest.raises(BatchError):
        decode_messages(body)


_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)))


@given(
    st.lists(
        st.builds(
            BatchMessage,
            st.integers(-(2**31), 2**31 - 1),
            st.binary(max_size=64),
            st.dictionaries(_text.filter(bool), _text, max_size=4),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_round_trip(messages: list[BatchMessage]) -> None:
    assert decode_messages(encode_messages(messages)) == messages


@given(st.binary(max_size=80))
def test_fuzz_only_batch_error(data: bytes) -> None:
    with contextlib.suppress(BatchError):
        decode_messages(data)
