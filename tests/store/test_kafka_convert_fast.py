"""The compiled Kafka record converter (store/fast/_kafka_convert.c, kafka_convert.py) against
the Python path it stands in for: the same bytes whenever it answers, and an answer whenever
the records are of the kind it handles (None otherwise: the Python path then gives the result
or the error).

- Produce: a batch's records section -> send-batch records, against the Kafka front end's
  ``ProduceHandler._records`` (kafka_records.record_body_properties +
  send_records.encode_record) on the decoded batch;
- Fetch: stored records (as the store's raw read returns them) -> one record batch v2,
  against decoding them and the front end's ``fetch.encode_messages``
  (kafka_records.to_record_fields).

The Python path's record batch codec is the Kafka front end's (broker/frontends/kafka/
records.py), so this test imports it; the store's modules never do.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import zlib
from types import SimpleNamespace
from unittest import mock

import crc32c
import pytest
import wharf.store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.broker.frontends.kafka import fetch as fetch_module
from wharf.broker.frontends.kafka import produce as produce_module
from wharf.broker.frontends.kafka.errors import KafkaError
from wharf.broker.frontends.kafka.fetch import encode_messages, encode_stored
from wharf.broker.frontends.kafka.produce import ProduceHandler
from wharf.broker.frontends.kafka.producers import producer_mark
from wharf.broker.frontends.kafka.records import HEADER_SIZE, Record, decode_batches, encode_batch
from wharf.store import fast as store_fast
from wharf.store.codec import bodies
from wharf.store.codec.kafka_records import KAFKA_HEADERS, record_body_properties
from wharf.store.codec.layout import MAX_PROPERTIES_LENGTH, SYSFLAG_COMPRESSED, TOTAL_SIZE
from wharf.store.codec.properties import SYSTEM_PROPERTY_NAMES
from wharf.store.codec.records import decode_records
from wharf.store.codec.records import encode_batch as store_encode_batch
from wharf.store.codec.send_records import topic_tail
from wharf.store.errors import InvalidMessageError
from wharf.store.fast import kafka_convert as fast
from wharf.store.model import MessageInput

from tests.broker.kafka.kafka_helpers import start_kafka
from tests.inproc import InProcFactory

NOW_MS = 1_790_000_000_123
# WHARF_NO_SPEEDUPS=1 runs the Python path only: nothing compiled to compare (the rest of
# tests/broker/kafka then covers that path). Otherwise a missing build fails here.
compiled_only = pytest.mark.skipif(
    bool(os.environ.get("WHARF_NO_SPEEDUPS")), reason="WHARF_NO_SPEEDUPS: the Python path only"
)
TAIL = topic_tail("orders")
LONG_TAIL = topic_tail("L" * 249)  # a topic over 127 bytes: V2 records (two-byte TOPICLENGTH)


@compiled_only
def test_the_compiled_converter_is_built_and_used() -> None:
    # `pip install -e .` compiles it (an optional ext-module): a silent fallback would show here.
    assert fast.compiled is not None
    assert fast.compiled.__name__ == "wharf.store.fast._kafka_convert"
    # What the Kafka front end's handlers call (broker/frontends/kafka/produce.py, fetch.py):
    # the store's exports of this module, so the handlers take the compiled path.
    assert wharf.store.kafka_compiled() is True
    assert wharf.store.kafka_send_records is fast.send_records
    assert wharf.store.kafka_fetch_batch is fast.fetch_batch
    assert produce_module.kafka_send_records is fast.send_records
    assert produce_module.kafka_compiled is fast.is_compiled
    assert fetch_module.kafka_fetch_batch is fast.fetch_batch


def test_no_speedups_means_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # The store's one loader decides, as for every accelerator.
    monkeypatch.setenv("WHARF_NO_SPEEDUPS", "1")
    assert store_fast.load("_kafka_convert") is None
    assert fast.configured() is None


# --- Produce ----------------------------------------------------------------------------------

# Texts that sit on the mapping's edges: spaces, Unicode whitespace only, separators, broker and
# __KAFKA_ names, non-ASCII.
_EDGE_TEXT = st.sampled_from(
    ["k", "order-7", "two words", " ", "\t\n", "\u3000", "\u00a0x", "a\x01b", "a\x02", "é✓",
     "KEYS", "TAGS", "UNIQ_KEY", "__KAFKA_KEY", "__KAFKA_X", "_KAFKA", ""]
)  # fmt: skip
_TEXT = st.one_of(_EDGE_TEXT, st.text(max_size=12))
_BYTES = st.one_of(
    _TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=24),
    st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xe2\x80"]),
)
_HEADER = st.tuples(
    st.one_of(_EDGE_TEXT, st.text(max_size=8)),
    st.one_of(st.none(), _BYTES),
)
_RECORD = st.tuples(
    st.one_of(st.none(), _BYTES),  # key
    st.one_of(st.none(), st.just(b""), _BYTES, st.binary(min_size=990, max_size=1010)),  # value
    st.lists(_HEADER, max_size=4),
    st.integers(-3, 3) | st.integers(1_600_000_000_000, 1_800_000_000_000),  # timestamp
)


def _encodable(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def _python_path(
    data: bytes, max_size: int, tail: bytes = TAIL
) -> tuple[bytes, list[int]] | Exception:
    """produce.py's Python path on ``data`` (one batch): its records and sizes, or its error."""
    ids = iter(range(1 << 30))
    handler = SimpleNamespace(
        env=SimpleNamespace(
            ctx=SimpleNamespace(
                unique_ids=SimpleNamespace(
                    next_ids=lambda n: [f"ID{next(ids):030X}" for _ in range(n)]
                )
            )
        )
    )
    try:
        (batch,) = decode_batches(data)
        with mock.patch.object(produce_module.time, "time", return_value=NOW_MS / 1000):
            return ProduceHandler._records(handler, batch, tail, max_size)  # type: ignore[arg-type]
    except (KafkaError, InvalidMessageError) as exc:
        return exc


def _compiled_path(
    data: bytes, max_size: int, tail: bytes = TAIL
) -> tuple[bytes, list[int]] | None:
    (batch,) = decode_batches(data, lazy=True)
    assert batch.section is not None
    ids = [f"ID{i:030X}" for i in range(batch.count)]
    mark = producer_mark(batch) if batch.producer_id >= 0 else None
    return fast.send_records(
        batch.section, batch.count, batch.base_timestamp, tail, ids, NOW_MS, max_size, mark
    )


def _handled(records: list[Record], max_size: int) -> bool:
    """Whether the compiled path must answer: headers plain (no __KAFKA_HEADERS) and within
    the limits."""
    for rec in records:
        body, props = record_body_properties(rec, lambda: "I" * 32)
        size = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in props.items())
        if KAFKA_HEADERS in props or len(body) > max_size or size + 64 > MAX_PROPERTIES_LENGTH:
            return False
    return True


@compiled_only
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_RECORD, min_size=1, max_size=6),
    st.sampled_from([None, (7, 1, 40), (0, 0, 2**31 - 2)]),
    st.sampled_from([0, 1]),  # codec: none, gzip
    st.sampled_from([4 << 20, 1000]),  # maxMessageSize
    st.sampled_from([TAIL, LONG_TAIL]),  # V1 and V2 records
)
def test_produce_matches_the_python_path(
    raw: list[tuple],
    producer: tuple[int, int, int] | None,
    codec: int,
    max_size: int,
    tail: bytes,
) -> None:
    records = [
        Record(i, ts, key, value, [(n, v) for n, v in headers if _encodable(n)])
        for i, (key, value, headers, ts) in enumerate(raw)
    ]
    pid, epoch, sequence = producer or (-1, -1, -1)
    data = encode_batch(
        records, codec=codec, producer_id=pid, producer_epoch=epoch, base_sequence=sequence
    )
    expected = _python_path(data, max_size, tail)
    got = _compiled_path(data, max_size, tail)
    if got is not None:
        assert got == expected
    else:
        assert isinstance(expected, Exception) or not _handled(records, max_size)
    if not isinstance(expected, Exception) and _handled(records, max_size):
        assert got is not None


@compiled_only
def test_a_long_topic_s_records_are_v2_on_both_paths() -> None:
    """A 249-character topic's send records are V2 (RocketMQ 5's MessageVersion: magic
    0xDAA320AB, a two-byte TOPICLENGTH), a 127-character one's stay V1, byte for byte alike
    on both paths; and Fetch reads V2 stored records compiled, as the Python path does."""
    records = [
        Record(0, 1_700, b"k", b"body", [("trace", b"abc")]),
        Record(1, 1_701, None, b"", []),
    ]
    data = encode_batch(records)
    for topic, magic in (("L" * 249, 0xDAA320AB), ("S" * 127, 0xDAA320A7)):
        tail = topic_tail(topic)
        got = _compiled_path(data, 1 << 20, tail)
        assert got is not None and got == _python_path(data, 1 << 20, tail)
        stored = _stored(got[0])
        assert [m.topic for m in stored] == [topic, topic]
        assert struct.unpack_from(">I", got[0], 4)[0] == magic
        raw = _raw([(b"v", {"KEYS": "k"}, None, 5), (b"w", {}, None, 0)], 0, topic)
        assert raw is not None
        fetched = fast.fetch_batch(*raw)
        assert fetched is not None and fetched == encode_messages(_stored(raw[0]))


@compiled_only
def test_plain_records_take_the_compiled_path_with_the_mapping() -> None:
    records = [
        Record(0, 1_700, b"order-7", b"body", [("trace", b"abc"), ("region", b"eu")]),
        Record(1, 1_701, b"two words", None, []),
        Record(2, 0, None, b"", [("empty", b"")]),
    ]
    data = encode_batch(records, producer_id=9, producer_epoch=2, base_sequence=5)
    got = _compiled_path(data, 1 << 20)
    assert got is not None and got == _python_path(data, 1 << 20)
    (first, second, third), sizes = _stored(got[0]), got[1]
    assert sizes == [4, 1, 1]
    assert first.properties == {
        "UNIQ_KEY": "ID" + "0" * 30, "KEYS": "order-7", "trace": "abc", "region": "eu",
        "__KAFKA_PRODUCER": "9:2:5:3",
    }  # fmt: skip
    assert second.properties["__KAFKA_KEY"] == base64.b64encode(b"two words").decode()
    assert second.properties["__KAFKA_VALUE"] == "null" and second.body == b"\x00"
    assert third.properties["__KAFKA_VALUE"] == "empty" and third.born_timestamp == NOW_MS


@compiled_only
def test_binary_headers_and_broken_records_take_the_python_path() -> None:
    binary = encode_batch([Record(0, 1, None, b"v", [("h", b"\xff")])])
    assert _compiled_path(binary, 1 << 20) is None
    ok = _python_path(binary, 1 << 20)
    assert not isinstance(ok, Exception)
    assert json.loads(_stored(ok[0])[0].properties[KAFKA_HEADERS]) == [["h", "/w=="]]
    assert _compiled_path(encode_batch([Record(0, 1, None, b"v" * 10, [])]), 5) is None


@compiled_only
def test_a_record_of_many_headers_takes_the_python_path() -> None:
    """Over 64 headers the compiled path declines (its duplicate check is quadratic: 100,000
    tiny headers would hold the loop for seconds); the Python path stores them all."""
    headers = [(f"h{i}", b"v") for i in range(65)]
    data = encode_batch([Record(0, 1, None, b"v", headers)])
    assert _compiled_path(data, 1 << 20) is None
    ok = _python_path(data, 1 << 20)
    assert not isinstance(ok, Exception)
    assert _stored(ok[0])[0].properties["h64"] == "v"
    sixty_four = encode_batch([Record(0, 1, None, b"v", headers[:64])])
    assert _compiled_path(sixty_four, 1 << 20) == _python_path(sixty_four, 1 << 20)


def _stored(records: bytes) -> list:
    positions, pos = [], 0
    while pos < len(records):
        positions.append(pos)
        pos += TOTAL_SIZE.unpack_from(records, pos)[0]
    return decode_records(records, positions, 0)


# --- Fetch ------------------------------------------------------------------------------------

_PROP_TEXT = st.one_of(
    st.sampled_from(["", "v", "a b", "é✓", "null", "empty", "a\x01b"]),
    st.text(alphabet=st.characters(blacklist_characters="\x01\x02", codec="utf-8"), max_size=10),
)
_NAME = st.one_of(
    st.sampled_from(
        ["KEYS", "TAGS", "UNIQ_KEY", "__KAFKA_KEY", "__KAFKA_VALUE", "__KAFKA_HEADERS",
         "__KAFKA_PRODUCER", "trace", "region", "DELAY", "_x"]
    ),
    st.text(alphabet=st.characters(blacklist_characters="\x01\x02", codec="utf-8"), max_size=6),
)  # fmt: skip
_KEY_VALUE = st.one_of(
    st.binary(max_size=10).map(lambda b: base64.b64encode(b).decode()),  # canonical
    st.sampled_from(["Zg", "Zh==", "Zg=a", "!!!!", "Zm9v\n", ""]),  # what b64decode bends
)
_MESSAGE = st.tuples(
    st.binary(min_size=1, max_size=40),
    st.dictionaries(_NAME, _PROP_TEXT, max_size=5),
    st.one_of(st.none(), _KEY_VALUE),  # __KAFKA_KEY
    st.one_of(st.just(0), st.integers(1, 2**40)),  # born timestamp
)


def _raw(messages: list[tuple], gap: int, topic: str = "orders") -> tuple[bytes, int] | None:
    inputs = []
    for body, props, kafka_key, born in messages:
        props = dict(props)
        if kafka_key is not None:
            props["__KAFKA_KEY"] = kafka_key
        inputs.append(MessageInput(body, props, born_timestamp=born))
    half = len(inputs) // 2  # two runs, ``gap`` queue offsets apart (one when a message)
    runs = [(0, inputs[:half], 99), (half + gap, inputs[half:], 120)]
    data = b""
    try:
        for start, run, store_ts in runs:
            if run:
                data += store_encode_batch(
                    topic, 1, 40 + start, run, len(data), store_ts, "10.0.0.1:5", 1 << 20
                ).data
    except InvalidMessageError:
        return None
    return data, len(inputs)


def _canonical(text: str) -> bool:
    try:
        return base64.b64encode(base64.b64decode(text, validate=True)).decode() == text
    except ValueError:  # binascii.Error
        return False


def _fetch_handled(messages: list[tuple]) -> bool:
    for _, props, kafka_key, _ in messages:
        key = kafka_key if kafka_key is not None else props.get("__KAFKA_KEY")
        if "__KAFKA_HEADERS" in props or (key is not None and not _canonical(key)):
            return False
    return True


@compiled_only
@settings(max_examples=400, deadline=None)
@given(
    st.lists(_MESSAGE, min_size=1, max_size=6),
    st.sampled_from([0, 3]),
    st.sampled_from(["orders", "L" * 249]),  # V1 and V2 records
)
def test_fetch_matches_the_python_path(messages: list[tuple], gap: int, topic: str) -> None:
    raw = _raw(messages, gap, topic)
    if raw is None:
        return
    records, count = raw
    expected = encode_messages(_stored(records))
    got = fast.fetch_batch(records, count)
    if got is not None:
        assert got == expected
    if _fetch_handled(messages):
        assert got is not None
    assert encode_stored(records, count) == expected


@compiled_only
def test_fetch_of_a_rocketmq_message_and_a_json_header_fallback() -> None:
    raw = _raw(
        [
            (b"hello", {"KEYS": "k1 k2", "TAGS": "tagA", "color": "red", "UNIQ_KEY": "U"}, None, 5),
            (b"\x00", {"__KAFKA_VALUE": "null", "__KAFKA_KEY": "/w=="}, None, 0),
        ],
        0,
    )
    assert raw is not None
    got = fast.fetch_batch(*raw)
    assert got is not None and got == encode_messages(_stored(raw[0]))
    (rec1, rec2) = decode_batches(got)[0].records
    assert (rec1.key, rec1.value, rec1.headers) == (
        b"k1 k2",
        b"hello",
        [("color", b"red"), ("TAGS", b"tagA")],
    )
    assert (rec2.key, rec2.value, rec2.timestamp, rec2.offset_delta) == (b"\xff", None, 120, 1)
    packed = _raw([(b"v", {KAFKA_HEADERS: json.dumps([["h", None]])}, None, 1)], 0)
    assert packed is not None and fast.fetch_batch(*packed) is None
    assert decode_batches(encode_stored(*packed))[0].records[0].headers == [("h", None)]


def _compressed(body: bytes, props: dict[str, str], compressed: bytes | None = None) -> bytes:
    """One stored record whose body has the COMPRESSED sysflag (``compressed``: the stored
    bytes, else ``body`` deflated as the SDK and the 4.x clients do)."""
    stored = zlib.compress(body, 5) if compressed is None else compressed
    message = MessageInput(stored, props, sys_flag=SYSFLAG_COMPRESSED, born_timestamp=7)
    return store_encode_batch("orders", 1, 40, [message], 0, 99, "10.0.0.1:5", 1 << 20).data


def _values(records: bytes, count: int) -> list[bytes | None]:
    return [r.value for r in decode_batches(encode_stored(records, count))[0].records]


def test_compressed_bodies_are_inflated_on_both_paths() -> None:
    # The SDK, `wharf send` and the 4.x clients store bodies over 4 KiB deflated (sysflag
    # 0x1): a Kafka reader gets the body, as a RocketMQ reader does (5,000 bytes, not ~45).
    body = b"compressible " * 400
    plain = _raw([(b"plain", {"k": "v"}, None, 1)], 0)
    assert plain is not None
    first = _compressed(body, {"KEYS": "k1", "TAGS": "t"})
    records = first + _compressed(b"x" * 5000, {})
    assert _values(records, 2) == [body, b"x" * 5000]
    expected = encode_messages(_stored(records))
    assert encode_stored(records, 2) == expected
    if fast.compiled is not None:  # inflated in C's call, not by falling back
        assert fast.fetch_batch(records, 2) == expected
        mixed = plain[0] + records
        assert fast.fetch_batch(mixed, 3) == encode_messages(_stored(mixed))
    (record,) = decode_batches(encode_stored(first, 1))[0].records
    assert (record.key, record.headers) == (b"k1", [("TAGS", b"t")])


def test_a_compressed_body_that_does_not_inflate_is_delivered_as_stored() -> None:
    # Damaged (not zlib, cut short): answered as stored, on both paths alike, so a consumer
    # moves past it instead of failing at every fetch.
    deflated = zlib.compress(b"y" * 6000)
    for stored in (b"not zlib at all", deflated[: len(deflated) // 2]):
        records = _compressed(b"", {}, compressed=stored)
        assert _values(records, 1) == [stored]
        if fast.compiled is not None:
            assert fast.fetch_batch(records, 1) == encode_stored(records, 1)
    # A placeholder body (an empty Kafka value) is never inflated.
    records = _compressed(b"", {"__KAFKA_VALUE": "empty"}, compressed=b"\x00")
    assert _values(records, 1) == [b""]


def test_bodies_inflate_to_at_most_64_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bodies, "MAX_INFLATED", 1000)
    big = zlib.compress(b"z" * 5000)
    assert bodies.plain_body(big, SYSFLAG_COMPRESSED) == big  # over the bound: as stored
    assert bodies.plain_body(zlib.compress(b"z" * 1000), SYSFLAG_COMPRESSED) == b"z" * 1000
    assert bodies.plain_body(big, 0) is big


@compiled_only
def test_the_c_module_knows_the_broker_property_names() -> None:
    # configure() is given SYSTEM_PROPERTY_NAMES: one of them is never a header.
    name = sorted(SYSTEM_PROPERTY_NAMES)[0]
    raw = _raw([(b"v", {name: "x", "user": "y"}, None, 1)], 0)
    assert raw is not None
    (record,) = decode_batches(fast.fetch_batch(*raw) or b"")[0].records
    assert (name, b"x") not in record.headers and ("user", b"y") in record.headers


# --- Through the broker -----------------------------------------------------------------------


def _with_crc(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


async def test_a_request_of_several_batches_fails_as_the_python_path(
    inproc_broker: InProcFactory,
) -> None:
    # Batch 1's records do not decode, batch 2 is magic 1: the batches are read one at a time,
    # so batch 1's error is the answer, as decode_batches (the Python path) gives it.
    first = bytearray(encode_batch([Record(0, 1, None, b"v", [])]))
    first[HEADER_SIZE] = 0x7E  # the record's length: 63 bytes, beyond the batch
    second = bytearray(encode_batch([Record(0, 1, None, b"w", [])]))
    second[16] = 1
    data = _with_crc(first) + bytes(second)
    with pytest.raises(KafkaError) as expected:
        decode_batches(data)
    kafka = await start_kafka(inproc_broker)
    client = await kafka.client()
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": data}]}],
    }
    response = await client.call(0, 8, body)
    part = response["responses"][0]["partition_responses"][0]
    assert (part["error_code"], part["error_message"]) == (
        expected.value.code,
        str(expected.value),
    )


async def test_headers_too_large_are_invalid_record_at_the_kafka_edge(
    inproc_broker: InProcFactory,
) -> None:
    # Binary headers go to __KAFKA_HEADERS (the Python path: the C code answers None); over
    # 32 KiB packed the codec raises InvalidMessageError, which the front end answers
    # INVALID_RECORD (87) with the codec's message, as before the mapping moved to the store.
    data = encode_batch([Record(0, 1, None, b"v", [("bin", b"\xff" * 30_000)])])
    kafka = await start_kafka(inproc_broker)
    client = await kafka.client()
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": data}]}],
    }
    response = await client.call(0, 8, body)
    part = response["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 87
    assert (
        part["error_message"].startswith("headers take 40")
        and "limit is 32768" in (part["error_message"])
    )


# --- Damaged input: the C code answers what Python answers, or None (never crashes) -----------


def _mutated(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    raw = bytearray(data)
    for at, value in edits:
        if raw:
            raw[at % len(raw)] = value
    return bytes(raw)


# Small records: the edits land in every field (and hypothesis keeps its draws small).
_SMALL_RECORD = st.tuples(
    st.one_of(st.none(), st.binary(max_size=8), st.sampled_from([b"k", b"a b"])),
    st.one_of(st.none(), st.just(b""), st.binary(max_size=16)),
    st.lists(st.tuples(st.sampled_from(["h", "x", "KEYS"]), st.binary(max_size=6)), max_size=3),
    st.integers(-3, 3) | st.integers(1_600_000_000_000, 1_800_000_000_000),
)


@compiled_only
@settings(max_examples=300, deadline=None)
@given(
    st.lists(_SMALL_RECORD, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 1 << 10), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(-2, 2),
)
def test_a_damaged_records_section_is_never_misread(
    raw: list[tuple], edits: list[tuple[int, int]], count_change: int
) -> None:
    records = [
        Record(i, ts, key, value, [(n, v) for n, v in headers if _encodable(n)])
        for i, (key, value, headers, ts) in enumerate(raw)
    ]
    (batch,) = decode_batches(encode_batch(records), lazy=True)
    assert batch.section is not None
    section = _mutated(bytes(batch.section), edits)
    count = max(batch.count + count_change, 1)
    ids = [f"ID{i:030X}" for i in range(count)]
    got = fast.send_records(section, count, batch.base_timestamp, TAIL, ids, NOW_MS, 1 << 20, None)
    if got is None:
        return
    batch.section, batch.count = section, count
    batch.decode_records()  # the C path answered: so must the Python path, the same
    handler = SimpleNamespace(
        env=SimpleNamespace(ctx=SimpleNamespace(unique_ids=SimpleNamespace(next_ids=lambda n: ids)))
    )
    with mock.patch.object(produce_module.time, "time", return_value=NOW_MS / 1000):
        assert ProduceHandler._records(handler, batch, TAIL, 1 << 20) == got  # type: ignore[arg-type]


@compiled_only
@settings(max_examples=300, deadline=None)
@given(
    st.lists(_MESSAGE, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_damaged_stored_records_are_never_misread(
    messages: list[tuple], edits: list[tuple[int, int]]
) -> None:
    raw = _raw(messages, 0)
    if raw is None:
        return
    records = _mutated(raw[0], edits)
    got = fast.fetch_batch(records, raw[1])
    if got is not None:
        assert got == encode_messages(_stored(records))
