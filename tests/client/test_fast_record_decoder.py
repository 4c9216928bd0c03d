"""The compiled raw-record walk (store/fast/_record_decoder.c) against the pure-Python walk it
replaces in wharf.client.records.parse_records: same messages field for field, same errors."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import pytest
import wharf.client.records as records
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.client.errors import BrokerInternalError
from wharf.client.records import RecordMessage, parse_records, walk_records_python
from wharf.store.codec.layout import SYSFLAG_COMPRESSED
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.store.fast import load

_compiled = load("_record_decoder")

# Everything a consumer can read of a message (``view`` covers the raw, possibly compressed,
# body and the MessageView every field goes into).
_FIELDS = (
    "body", "msg_id", "tags", "keys", "properties", "topic", "queue_topic", "queue_id",
    "queue_offset", "commit_log_offset", "offset_msg_id", "born_timestamp", "store_timestamp",
    "reconsume_times", "born_host", "store_host", "store_size", "flag", "view",
)  # fmt: skip


_SLOTS = ("_buf", "_pos", "_end", "_body_len", "_all_properties", "_body", "_msg_id")


def test_the_compiled_walk_is_built_and_used() -> None:
    # `pip install -e .` compiles it (an optional ext-module); parse_records only takes it when
    # the import worked, so a silent fallback would show here.
    assert _compiled is not None and records._compiled is _compiled


def _read(message: RecordMessage, field: str) -> Any:
    try:
        return ("ok", getattr(message, field))
    except Exception as exc:  # a damaged compressed body fails to inflate: alike, too
        return ("error", type(exc).__name__, str(exc))


def _outcome(walk: Callable[[], list[Any]]) -> tuple[str, Any]:
    """('error', text) or ('ok', every message's every field: values or their error)."""
    try:
        messages = walk()
    except BrokerInternalError as exc:
        return ("error", str(exc))
    return ("ok", [[_read(m, field) for field in _FIELDS] for m in messages])


def _both(buf: bytes, start: int, end: int) -> tuple[tuple[str, Any], tuple[str, Any]]:
    return (
        _outcome(lambda: parse_records(buf, None, start, end)),
        _outcome(lambda: walk_records_python(buf, start, end)),
    )


_names = st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "RETRY_TOPIC", "color", "x", "é"])
_values = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=40
)


@st.composite
def _properties(draw: st.DrawFn) -> bytes:
    """Properties text as a record carries it: UNIQ_KEY first or later or absent, duplicates,
    odd bytes (invalid UTF-8, a missing last separator) now and then."""
    pairs = draw(st.lists(st.tuples(_names, _values), max_size=6))
    text = b"".join(f"{name}\x01{value}\x02".encode() for name, value in pairs)
    variant = draw(st.integers(0, 5))
    if variant == 1 and text:
        text = text[:-1]  # no separator after the last value
    elif variant == 2:
        text = b"UNIQ_KEY\x01\xff\xfeid\x02" + text  # not UTF-8: the Python fallback decodes
    elif variant == 3:
        text = b"UNIQ_KEY\x01" + draw(st.binary(max_size=12))  # anything at all
    return text


@st.composite
def _record(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(min_size=0, max_size=3000))
    sys_flag = 0
    if draw(st.booleans()):
        body, sys_flag = zlib.compress(body or b"z"), SYSFLAG_COMPRESSED
    topic = draw(st.sampled_from(["orders", "%RETRY%g", "t", "L" * 249]))  # L...: V2
    data = bytearray(
        encode_record(topic_tail(topic), body, draw(_properties()), draw(st.integers(0, 99)),
                      sys_flag, draw(st.integers(0, 1 << 40)))
    )  # fmt: skip
    data[12:16] = draw(st.integers(0, 255)).to_bytes(4, "big")  # queue id
    data[20:28] = draw(st.integers(0, 1 << 40)).to_bytes(8, "big")  # queue offset
    data[48:56] = bytes([127, 0, 0, 1, 0, 0, 0x15, 0xB3])  # born host 127.0.0.1:5555
    data[64:72] = bytes([10, 1, 2, 3, 0, 0, 0x2A, 0x9F])  # store host 10.1.2.3:10911
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(
    recs=st.lists(_record(), max_size=6),
    prefix=st.binary(max_size=9),
    suffix=st.binary(max_size=9),
    damage=st.one_of(
        st.none(),
        st.tuples(st.integers(0, 10_000), st.integers(0, 255)),  # one byte changed
        st.integers(1, 200),  # cut short
    ),
)
def test_compiled_walk_equals_the_python_walk(
    recs: list[bytes],
    prefix: bytes,
    suffix: bytes,
    damage: tuple[int, int] | int | None,
) -> None:
    payload = bytearray(b"".join(recs))
    if isinstance(damage, tuple) and payload:
        payload[damage[0] % len(payload)] = damage[1]
    elif isinstance(damage, int):
        del payload[max(0, len(payload) - damage) :]
    buf = prefix + bytes(payload) + suffix
    compiled, python = _both(buf, len(prefix), len(prefix) + len(payload))
    assert compiled == python


def test_every_kind_of_record_decodes_alike() -> None:
    """The fixed cases: tags, keys, user properties, a delayed (timer) and a transactional
    record's properties, a retried message, a compressed body, an empty body, no UNIQ_KEY."""
    tail = topic_tail("orders")
    recs = [
        encode_record(tail, b"a" * 1024, b"UNIQ_KEY\x01U1\x02TAGS\x01paid\x02KEYS\x01k1 k2\x02c\x01r\x02"),
        encode_record(tail, b"later", b"UNIQ_KEY\x01U2\x02TIMER_DELIVER_MS\x011700000000000\x02"),
        encode_record(tail, b"tx", b"UNIQ_KEY\x01U3\x02TRAN_MSG\x01true\x02PGROUP\x01pg\x02", 0, 4),
        encode_record(tail, b"again", b"TAGS\x01t\x02UNIQ_KEY\x01U4\x02RETRY_TOPIC\x01orig\x02"),
        encode_record(tail, zlib.compress(b"z" * 9000), b"UNIQ_KEY\x01U5\x02", 0, SYSFLAG_COMPRESSED),
        encode_record(tail, b"", b"color\x01red\x02"),
    ]  # fmt: skip
    buf = b"".join(recs)
    compiled, python = _both(buf, 0, len(buf))
    assert compiled == python and compiled[0] == "ok"
    messages = parse_records(buf)
    assert [m.msg_id for m in messages] == ["U1", "U2", "U3", "U4", "U5", ""]
    assert messages[0].body == b"a" * 1024 and messages[4].body == b"z" * 9000
    assert (messages[0].tags, messages[0].keys, messages[3].topic) == ("paid", ("k1", "k2"), "orig")
    assert messages[1].properties == {"TIMER_DELIVER_MS": "1700000000000"}


def test_v1_and_v2_records_decode_alike() -> None:
    """The SDK reads RocketMQ 5's second record version (a topic over 127 bytes: magic
    0xDAA320AB, a two-byte TOPICLENGTH) next to V1 records, on both walks."""
    long, short = "L" * 249, "S" * 127
    recs = [
        encode_record(topic_tail(long), b"v2", b"UNIQ_KEY\x01U1\x02TAGS\x01a\x02KEYS\x01k\x02"),
        encode_record(topic_tail(short), b"v1", b"UNIQ_KEY\x01U2\x02"),
        encode_record(topic_tail(long), b"again", b"TAGS\x01t\x02UNIQ_KEY\x01U3\x02"),
    ]
    assert [int.from_bytes(r[4:8], "big") for r in recs] == [0xDAA320AB, 0xDAA320A7, 0xDAA320AB]
    buf = b"".join(recs)
    compiled, python = _both(buf, 0, len(buf))
    assert compiled == python and compiled[0] == "ok"
    messages = parse_records(buf)
    assert [m.queue_topic for m in messages] == [long, short, long]
    assert [m.msg_id for m in messages] == ["U1", "U2", "U3"]
    assert [m.body for m in messages] == [b"v2", b"v1", b"again"]
    assert (messages[0].tags, messages[0].keys, messages[2].tags) == ("a", ("k",), "t")


@pytest.mark.parametrize("start,end", [(-1, 10), (5, 4), (0, 10_000)])
def test_ranges_outside_the_buffer_are_refused(start: int, end: int) -> None:
    """The compiled walk never reads past the bytes (parse_records gives such ranges to the
    Python walk, which behaves as before)."""
    assert _compiled is not None
    buf = encode_record(topic_tail("t"), b"body", b"UNIQ_KEY\x01U\x02")
    with pytest.raises(ValueError, match="outside the buffer"):
        _compiled.walk(RecordMessage, buf, start, end)
    assert parse_records(buf, None, 5, 4) == []


def test_a_class_without_the_slots_is_refused() -> None:
    assert _compiled is not None

    class Plain:
        pass

    # another class's slot descriptors: their offsets are not this class's layout
    borrowed = type("Borrowed", (), {name: getattr(RecordMessage, name) for name in _SLOTS})

    buf = encode_record(topic_tail("t"), b"body", b"UNIQ_KEY\x01U\x02")
    with pytest.raises(AttributeError):
        _compiled.walk(Plain, buf, 0, len(buf))
    with pytest.raises(TypeError, match="not a __slots__ member"):
        _compiled.walk(borrowed, buf, 0, len(buf))
