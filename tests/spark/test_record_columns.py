"""The per-reply column decoder (client/spark/record_columns.py) against the per-row path
(``wharf.client.records`` messages, one attribute per column) on the same raw records: the
same Arrow batch and the same tuples, for every schema variant, tag filter and range end.
No JVM: the decoders run in the test process."""

from __future__ import annotations

import random
import zlib

import pytest
from wharf.client.consumer.pull_wire import PullReply
from wharf.client.errors import BrokerInternalError
from wharf.client.spark import record_columns
from wharf.client.spark.columns import ColumnBuffer, topic_schema
from wharf.client.spark.offsets import QueueRange
from wharf.client.spark.pull_reader import _RangeColumns
from wharf.client.spark.record_columns import decode_reply_columns
from wharf.store.codec.layout import RECORD_FIELD, SYSFLAG_COMPRESSED
from wharf.store.codec.records import encode_batch
from wharf.store.model import MessageInput

FIRST_OFFSET = 500


@pytest.fixture(params=["compiled walk", "python walk"], autouse=True)
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test with the store's compiled record walk (when built) and the Python loop."""
    if request.param == "python walk":
        monkeypatch.setattr(record_columns, "_log_scan", None)
    elif record_columns._log_scan is None:
        pytest.skip("the compiled walk is not built here")


def _records(inputs: list[MessageInput]) -> bytes:
    return encode_batch(
        "orders", 2, FIRST_OFFSET, inputs, 8192, 1_700_000_000_123, "10.0.0.1:10911", 1 << 22
    ).data


def _empty_bodies(records: bytes, rows: set[int]) -> bytes:
    """The batch with the (1-byte) bodies of records ``rows`` cut out: the store refuses empty
    bodies on send, but a raw record with BODYLENGTH 0 is well-formed and must decode to b""."""
    total, length = RECORD_FIELD["TOTAL_SIZE"], RECORD_FIELD["BODY_LENGTH"]
    header_end = length.offset + length.size
    out, pos, row = [], 0, 0
    while pos < len(records):
        size = int.from_bytes(records[pos : pos + 4], "big")
        record = records[pos : pos + size]
        if row in rows:
            assert int.from_bytes(record[length.offset : header_end], "big") == 1
            cut = bytearray(record[:header_end] + record[header_end + 1 :])
            cut[total.offset : total.offset + total.size] = (size - 1).to_bytes(4, "big")
            cut[length.offset : header_end] = bytes(4)
            record = bytes(cut)
        out.append(record)
        pos, row = pos + size, row + 1
    return b"".join(out)


def _reply(records: bytes, prefix: bytes = b"\x07" * 13) -> PullReply:
    """The records inside a larger received buffer, as pull_wire hands them over."""
    reply = PullReply(prefix + records + b"\x00\x01")
    reply.records_start = len(prefix)
    reply.records_end = len(prefix) + len(records)
    return reply


def _mixed_inputs(rng: random.Random, count: int, ascii_only: bool) -> list[MessageInput]:
    """Records with and without each property; non-ASCII text unless ``ascii_only`` (the
    Arrow strings are then built from the bytes without decoding)."""
    inputs = []
    for i in range(count):
        props: dict[str, str] = {}
        if rng.random() < 0.9:
            props["UNIQ_KEY"] = f"U{i:08X}"
        if rng.random() < 0.8:
            props["TAGS"] = rng.choice(["paid", "BB", "Aa", "x"] + ([] if ascii_only else ["ünï"]))
        if rng.random() < 0.5:
            words = ["k1", "k2", "z", ""] + ([] if ascii_only else ["ключ"])  # "": extra spaces
            props["KEYS"] = " ".join(rng.choice(words) for _ in range(3))
        if rng.random() < 0.4:
            props["color"] = rng.choice(["red", "blue"] + ([] if ascii_only else ["é"]))
        if rng.random() < 0.2:
            props["RETRY_TOPIC"] = "orig"
        body = rng.randbytes(rng.choice([1, 17, 1024, 5000]))
        if rng.random() < 0.15:
            inputs.append(MessageInput(b"-", props))  # its body is cut out: empty
        elif rng.random() < 0.2:
            inputs.append(MessageInput(zlib.compress(body), props, sys_flag=SYSFLAG_COMPRESSED))
        else:
            inputs.append(MessageInput(body, props, born_timestamp=1_600_000_000_000 + i))
    return inputs


def _both(
    reply: PullReply, include_properties: bool, tag_expression: str, end: int, arrow: bool
) -> tuple[object, object, int, int]:
    r = QueueRange("orders", 2, FIRST_OFFSET, end)
    schema = topic_schema(include_properties)
    fast_buf, slow_buf = ColumnBuffer(schema), ColumnBuffer(schema)
    fast_first = _RangeColumns(fast_buf, r, include_properties, arrow).add_reply(
        reply, tag_expression, -1
    )
    slow = _RangeColumns(slow_buf, r, include_properties, arrow)
    from wharf.client.records import messages_from_reply

    messages = messages_from_reply(reply, tag_expression)
    slow_first = messages[0].queue_offset if messages else -1
    slow.add(messages)
    if arrow:
        return fast_buf.to_arrow(), slow_buf.to_arrow(), fast_first, slow_first
    return list(fast_buf.to_tuples()), list(slow_buf.to_tuples()), fast_first, slow_first


@pytest.mark.parametrize(
    ("seed", "count", "ascii_only"),
    [(1, 300, False), (2, 40, False), (3, 1, False), (4, 200, True)],
)
@pytest.mark.parametrize("include_properties", [False, True])
@pytest.mark.parametrize("tag_expression", ["*", "BB", "paid || ünï || nothing"])
@pytest.mark.parametrize("arrow", [True, False])
def test_reply_columns_equal_the_per_row_path(
    seed: int,
    count: int,
    ascii_only: bool,
    include_properties: bool,
    tag_expression: str,
    arrow: bool,
) -> None:
    rng = random.Random(seed)
    inputs = _mixed_inputs(rng, count, ascii_only)
    empty = {i for i, m in enumerate(inputs) if m.body == b"-"}
    assert count < 40 or (empty and any(m.sys_flag for m in inputs))
    reply = _reply(_empty_bodies(_records(inputs), empty))
    for end in (FIRST_OFFSET + count, FIRST_OFFSET + count // 2 + 1):
        fast, slow, fast_first, slow_first = _both(
            reply, include_properties, tag_expression, end, arrow
        )
        assert fast == slow
        assert fast_first == slow_first


def test_reply_columns_values() -> None:
    """A hand-written reply: the columns hold what the records say (not just what the
    per-row path says)."""
    inputs = [
        MessageInput(b"a", {"UNIQ_KEY": "U1", "TAGS": "BB", "KEYS": "k1 k2", "p": "v"}),
        MessageInput(b"-", {"TAGS": "Aa"}),  # the body is cut out below; no UNIQ_KEY / KEYS
        MessageInput(zlib.compress(b"z" * 9000), {"UNIQ_KEY": "U3"}, sys_flag=SYSFLAG_COMPRESSED),
        MessageInput(b"\xff\xfe", {"UNIQ_KEY": "U4", "TAGS": "BB"}),
    ]
    reply = _reply(_empty_bodies(_records(inputs), {1}))
    names = ["offset", "body", "tags", "keys", "msgId", "properties", "storeTimestamp"]
    got = decode_reply_columns(
        reply.buffer, reply.records_start, reply.records_end, names, None, 10_000
    )
    assert got is not None and got.rows == 4 and got.first_offset == FIRST_OFFSET
    c = got.columns
    assert c["offset"] == [500, 501, 502, 503]
    assert c["body"] == [b"a", b"", b"z" * 9000, b"\xff\xfe"]
    assert c["tags"] == ["BB", "Aa", "", "BB"]
    assert c["keys"] == [("k1", "k2"), (), (), ()]
    assert c["msgId"] == ["U1", "", "U3", "U4"]
    assert c["properties"] == [{"p": "v"}, {}, {}, {}]
    assert c["storeTimestamp"] == [1_700_000_000_123_000] * 4
    # Exact tags: "Aa" and "BB" share a hash, only "BB" is kept; the range end drops 503.
    got = decode_reply_columns(
        reply.buffer, reply.records_start, reply.records_end, ["offset"], frozenset(["BB"]), 503
    )
    assert got is not None and got.columns == {"offset": [500]} and got.first_offset == 500
    got = decode_reply_columns(
        reply.buffer, reply.records_start, reply.records_end, ["offset"], frozenset(["no"]), 503
    )
    assert got is not None and got.rows == 0 and got.first_offset is None


def test_malformed_records_take_the_per_row_path_and_fail() -> None:
    records = bytearray(_records([MessageInput(b"abc", {"UNIQ_KEY": "U"})] * 3))
    size = len(records) // 3
    body_length = RECORD_FIELD["BODY_LENGTH"].offset
    # The second record's BODYLENGTH no longer adds up to its TOTALSIZE.
    records[size + body_length + 3] = 200
    reply = _reply(bytes(records))
    assert decode_reply_columns(reply.buffer, 13, 13 + len(records), ["body"], None, 10**9) is None
    buffer = ColumnBuffer(topic_schema(False))
    with pytest.raises(BrokerInternalError, match="malformed raw record"):
        _RangeColumns(buffer, QueueRange("orders", 2, 0, 10**9), False).add_reply(reply, "*", 0)
    # A truncated reply: the record sizes do not chain to the end.
    short = _reply(bytes(records[: size + 40]))
    assert decode_reply_columns(short.buffer, 13, 13 + size + 40, ["body"], None, 10**9) is None
