"""The columnar dispatch path (``decode_dispatch_columns`` + ``Dispatcher`` on columns) against
the per-record reference (``decode_dispatches`` + ``Dispatcher`` on DispatchRequests): same
columns on random raw records, byte-identical ConsumeQueue and IndexFile files, same errors;
and the compiled tail gather against its numpy twin."""

from __future__ import annotations

import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import wharf.store.index.index_file as index_file_module
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.store import codec as fmt
from wharf.store.codec.layout import record_magic, topic_length_bytes
from wharf.store.dispatch.dispatcher import QueueRuns
from wharf.store.dispatch.reput import Dispatcher
from wharf.store.errors import CorruptRecordError
from wharf.store.fast import dispatch_columns, record_tails
from wharf.store.fast.dispatch_columns import (
    DispatchColumns,
    columns_from_requests,
    decode_dispatch_columns,
)
from wharf.store.fast.index_hash import SegmentHashes
from wharf.store.index.index_files import IndexService
from wharf.store.queue.table import ConsumeQueueTable

BASE = 1 << 33  # commit log offset of the buffer's first byte
STAMP = 1_700_000_000_000

# Names that must match, and near misses that must not.
names = st.sampled_from(
    ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TAG", "TAGSX", "XKEYS", "UNIQ_KE", "UNIQ_KEYS", "A"]
)
_value_chars = st.sampled_from("ab Z09-_ é€\x01")  # \x01 may sit inside a value, never \x02
values = st.text(_value_chars, max_size=10) | st.from_regex(r"[0-9A-F]{32}", fullmatch=True)
# A pair is "name\x01value", or a bare "name" (which sets the name to "").
pairs = st.tuples(names, values, st.booleans()).map(
    lambda p: (p[0] + "\x01" + p[1] if p[2] else p[0]).encode()
)
properties = st.tuples(st.lists(pairs, max_size=6), st.booleans(), st.booleans()).map(
    lambda p: b"\x02".join(p[0]) + (b"\x02" if p[0] and p[1] else b"") + (b"\x02" if p[2] else b"")
)
records = st.tuples(
    # B, C: same length; the long ones are V2 records (two-byte TOPICLENGTH), 128 has its
    # low length byte 0x80, 258 would not fit one byte
    st.sampled_from(["T", "TopicB", "TopicC", fmt.SCHEDULE_TOPIC, "L" * 200, "M" * 200, "N" * 128]),
    st.integers(0, 3),  # queue id
    st.integers(0, 6),  # queue offset (gaps and overlaps happen)
    st.sampled_from([0, 2, 4, 8, 12]),  # sys flag: transaction bits included
    st.integers(0, 5000),  # store time after STAMP
    properties,
)


def raw_record(
    topic: str, queue_id: int, queue_offset: int, sys_flag: int, stamp: int, props: bytes
) -> bytes:
    """One CommitLog record with exactly these properties bytes (the encoder only writes
    dicts: no duplicate or bare names)."""
    body = b"body"
    raw_topic = topic.encode()
    topic_length = topic_length_bytes(len(raw_topic))  # V1 up to 127 bytes, else V2
    total = fmt.RECORD_HEADER_SIZE + len(body) + len(topic_length) + len(raw_topic) + 2 + len(props)
    header = fmt.RECORD_HEADER.pack(
        total,
        record_magic(len(raw_topic)),
        0,
        queue_id,
        0,
        queue_offset,
        0,
        sys_flag,
        STAMP,
        bytes(8),
        STAMP + stamp,
        bytes(8),
        0,
        0,
        len(body),
    )
    return header + body + topic_length + raw_topic + len(props).to_bytes(2, "big") + props


def chunk(batch: list[tuple], lead: int = 0) -> tuple[bytes, list[int]]:
    data = bytearray(lead)
    positions = []
    for record in batch:
        positions.append(len(data))
        data += raw_record(*record)
    return bytes(data), positions


def assert_same_columns(got: DispatchColumns, expected: DispatchColumns) -> None:
    assert got.topics == expected.topics
    assert got.delay_texts == expected.delay_texts
    for name in (
        "offsets",
        "sizes",
        "queue_ids",
        "queue_offsets",
        "sys_flags",
        "store_timestamps",
        "topic_ids",
        "tags_codes",
        "key_records",
        "key_hashes",
    ):
        assert getattr(got, name).tolist() == getattr(expected, name).tolist(), name


@settings(max_examples=100, deadline=None)
@given(st.lists(records, min_size=1, max_size=40), st.integers(0, 9))
def test_columns_equal_the_reference_decode_on_random_records(batch, lead):
    data, positions = chunk(batch, lead)
    expected = columns_from_requests(fmt.decode_dispatches(data, positions, BASE))
    # Well-formed records never fall back to the reference decoder.
    with mock.patch.object(dispatch_columns, "_reference", side_effect=AssertionError):
        for buf in (data, bytearray(data), memoryview(data)):
            assert_same_columns(decode_dispatch_columns(buf, positions, BASE), expected)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["T", "TopicB", "TopicC"]),  # no SCHEDULE_TOPIC: the compiled pass
            st.integers(0, 3),
            st.integers(0, 6),
            st.sampled_from([0, 4]),
            st.integers(0, 5000),
            properties,
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 9),
)
def test_the_compiled_properties_pass_and_its_numpy_twin_equal_the_reference(batch, lead):
    """``_log_scan.scan_properties`` (chunks without scheduled messages) and the numpy pairs of
    ``dispatch_properties``: the TAGS codes and index keys of the reference decode, non-ASCII
    values (hashed by the reference over UTF-16) and near-miss names included; and the topic
    ids of ``_log_scan.topic_ids`` and its twin (names of one length differing in a byte)."""
    assert dispatch_columns._compiled is not None  # built by `pip install -e .`
    data, positions = chunk(batch, lead)
    expected = columns_from_requests(fmt.decode_dispatches(data, positions, BASE))
    with mock.patch.object(dispatch_columns, "_reference", side_effect=AssertionError):
        assert_same_columns(decode_dispatch_columns(data, positions, BASE), expected)
        with mock.patch.object(dispatch_columns, "_compiled", None):
            assert_same_columns(decode_dispatch_columns(data, positions, BASE), expected)


def test_topics_found_in_a_full_cache_a_cleared_one_or_none_decode_alike():
    """A chunk's topics and their key hashes (the topic's prefix) are the reference's whether
    the topics' cache knows them, is full and emptied first, or holds a stale prefix for
    another topic's bytes: an entry is the text and prefix of exactly its own bytes."""
    batch = [(f"topic-{i % 5}", i % 3, i, 0, 0, b"UNIQ_KEY\x01U%d\x02" % i) for i in range(30)]
    data, positions = chunk(batch)
    expected = columns_from_requests(fmt.decode_dispatches(data, positions, BASE))
    saved = dict(dispatch_columns._TOPICS)
    try:
        dispatch_columns._TOPICS.clear()
        assert_same_columns(decode_dispatch_columns(data, positions, BASE), expected)  # misses
        assert_same_columns(decode_dispatch_columns(data, positions, BASE), expected)  # hits
        assert dispatch_columns._TOPICS[b"topic-3"] == (
            "topic-3",
            fmt.java_string_hash("topic-3#") % (1 << 32),
        )
        dispatch_columns._TOPICS.clear()
        dispatch_columns._TOPICS.update({b"x%d" % i: ("x", 0) for i in range(4096)})  # full
        assert_same_columns(decode_dispatch_columns(data, positions, BASE), expected)
        assert len(dispatch_columns._TOPICS) == 5  # emptied, then this chunk's five
    finally:
        dispatch_columns._TOPICS.clear()
        dispatch_columns._TOPICS.update(saved)


def test_last_pair_of_a_name_wins_and_a_bare_name_clears_it():
    props = b"TAGS\x01a\x02UNIQ_KEY\x01U1\x02TAGS\x01b c\x02KEYS\x01k1  k2\x02UNIQ_KEY\x02"
    data, positions = chunk([("T", 0, 0, 0, 0, props)] * 2)
    cols = decode_dispatch_columns(data, positions, BASE)
    assert cols.tags_codes.tolist() == [fmt.java_string_hash("b c")] * 2
    # UNIQ_KEY ends up empty (not indexed); KEYS splits on spaces, empty tokens dropped.
    assert cols.key_records.tolist() == [0, 0, 1, 1]
    assert cols.key_hashes.tolist() == [fmt.index_key_hash("T#k1"), fmt.index_key_hash("T#k2")] * 2


@pytest.mark.parametrize("damage", ["magic", "short", "props_length"])
def test_corrupt_records_raise_the_reference_error(damage):
    data, positions = chunk([("T", 0, i, 0, 0, b"TAGS\x01t\x02") for i in range(40)])
    broken = bytearray(data)
    if damage == "magic":
        broken[positions[7] + 4] ^= 0xFF
    elif damage == "props_length":
        broken[positions[8] - 8] ^= 0x01  # PROPERTIESLENGTH low byte of record 7
    else:
        broken = broken[:-1]
    with pytest.raises(CorruptRecordError) as reference:
        fmt.decode_dispatches(bytes(broken), positions, BASE)
    with pytest.raises(CorruptRecordError) as columnar:
        decode_dispatch_columns(bytes(broken), positions, BASE)
    assert str(columnar.value) == str(reference.value)


def _store_files(root: Path) -> dict[str, bytes]:
    """Every queue file by path; index files by rank (they are named by creation time)."""
    files = {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted((root / "consumequeue").rglob("*"))
        if path.is_file()
    }
    for rank, path in enumerate(sorted((root / "index").iterdir())):
        files[f"index #{rank}"] = path.read_bytes()
    return files


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(records, min_size=1, max_size=30), min_size=1, max_size=4),
    st.booleans(),
)
def test_columnar_dispatch_writes_the_same_queue_and_index_files(chunks, vector_index):
    """Queue files with 4 units and index files of 7 entries force rolls; every chunk is
    dispatched twice (a re-dispatch after recovery must change nothing)."""
    saved = index_file_module.VECTORIZE_FROM
    index_file_module.VECTORIZE_FROM = 1 if vector_index else 10**9
    try:
        with tempfile.TemporaryDirectory() as tmp:
            roots = [Path(tmp, "reference"), Path(tmp, "columns")]
            dispatchers = []
            for root in roots:
                queues = ConsumeQueueTable(root / "consumequeue", 4 * fmt.CQ_STORE_UNIT_SIZE)
                index = IndexService.load_blocking(root / "index", 5, 8)
                dispatchers.append(Dispatcher(queues, index, [1000, 5000]))
            offset = 0
            for batch in chunks:
                data, positions = chunk(batch)
                base = BASE + offset
                offset += len(data)
                reference, columnar = dispatchers
                for _ in range(2):
                    requests = fmt.decode_dispatches(data, positions, base)
                    advanced, left = reference.dispatch(requests)
                    advanced_c, left_c = columnar.dispatch(
                        decode_dispatch_columns(data, positions, base)
                    )
                    assert advanced_c == advanced
                    for dispatcher, leftover in ((reference, left), (columnar, left_c)):
                        if len(leftover):
                            assert dispatcher.index is not None
                            dispatcher.index.put_entries_blocking(leftover)
            for dispatcher in dispatchers:
                assert dispatcher.index is not None
                dispatcher.index.close()
                dispatcher.queues.close()
            assert _store_files(roots[1]) == _store_files(roots[0])
    finally:
        index_file_module.VECTORIZE_FROM = saved


def test_plan_groups_each_queue_into_runs_of_consecutive_offsets():
    batch = [("T", 0, 5, 0, 0, b""), ("T", 1, 0, 0, 0, b""), ("T", 0, 6, 0, 0, b"")]
    batch += [("T", 0, 9, 0, 0, b""), ("T", 0, 10, 4, 0, b""), ("T", 0, 10, 0, 0, b"")]
    data, positions = chunk(batch)
    dispatcher = Dispatcher(None, None, [])  # type: ignore[arg-type]
    plan = dispatcher.plan(decode_dispatch_columns(data, positions, BASE))
    # The prepared half (sys flag 4) gets no unit: 9 and 10 stay one run.
    assert [(run.key, run.first, run.unit_count) for run in plan.runs] == [
        (("T", 0), 5, 2),
        (("T", 0), 9, 2),
        (("T", 1), 0, 1),
    ]
    units = np.frombuffer(plan.runs[1].units, ">i8,>i4,>i8")
    assert units["f0"].tolist() == [BASE + positions[3], BASE + positions[5]]
    reference = dispatcher.plan(fmt.decode_dispatches(data, positions, BASE))
    assert sorted(reference.runs) == sorted(plan.runs)


def test_empty_and_transaction_only_chunks_plan_no_units():
    dispatcher = Dispatcher(None, None, [])  # type: ignore[arg-type]
    empty = dispatcher.plan(columns_from_requests([]))
    assert (empty.runs, empty.record_count, empty.last_timestamp) == ([], 0, 0)
    data, positions = chunk([("T", 0, i, 4, 7, b"") for i in range(3)])  # prepared halves
    plan = dispatcher.plan(decode_dispatch_columns(data, positions, BASE))
    assert (plan.runs, plan.record_count, plan.last_timestamp) == ([], 3, STAMP + 7)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300), st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300))))
def test_prefix_sum_hashes_equal_java_hash_code_of_ascii_segments(data, segments):
    segments = [(min(a, b, len(data)), min(max(a, b), len(data))) for a, b in segments]
    starts = np.array([a for a, _ in segments], dtype=np.int64)
    ends = np.array([b for _, b in segments], dtype=np.int64)
    hashes = SegmentHashes(np.frombuffer(data, np.uint8))
    ascii_mask = hashes.ascii(starts, ends).tolist()
    assert ascii_mask == [data[a:b].isascii() for a, b in segments]
    got = hashes(starts, ends).view(np.int32).tolist()
    for (a, b), value, is_ascii in zip(segments, got, ascii_mask, strict=True):
        if is_ascii:
            assert value == fmt.java_string_hash(data[a:b].decode("ascii"))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(records, min_size=1, max_size=30),
    st.integers(0, 9),
    st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 255))),
    st.integers(0, 3),
)
def test_the_compiled_tail_gather_agrees_with_its_numpy_twin(batch, lead, damage, cut):
    """``_log_scan.gather_tails`` against record_tails.py's numpy checks and join: the same
    refusals (damaged bytes anywhere, a buffer cut short) and the same tails and columns."""
    assert record_tails._compiled is not None  # built by `pip install -e .`
    data, positions = chunk(batch, lead)
    broken = bytearray(data)
    if damage is not None:
        broken[damage[0] % len(broken)] = damage[1]
    buf = bytes(broken[: len(broken) - cut])
    pos = np.array(positions, dtype=np.int64)
    header, header_bytes = dispatch_columns._HEADER, dispatch_columns._HEADER_BYTES
    compiled = record_tails.gather_record_tails(buf, pos, header, header_bytes)
    with mock.patch.object(record_tails, "_compiled", None):
        twin = record_tails.gather_record_tails(buf, pos, header, header_bytes)
    assert (compiled is None) == (twin is None)
    if damage is None and cut == 0:
        assert compiled is not None
    if compiled is not None and twin is not None:
        assert compiled.tail == twin.tail
        assert compiled.data.tobytes() == twin.data.tobytes()
        for name in ("total", "body_start", "body_len", "starts", "ends", "props"):
            assert getattr(compiled, name).tolist() == getattr(twin, name).tolist(), name
        assert compiled.header.tobytes() == twin.header.tobytes()


def test_a_columns_plan_s_runs_read_like_a_list_of_runs():
    """``QueueRuns`` (a columns chunk's runs, no object a run until one is read): indexing,
    negative and sliced, iteration and length agree with the runs made one by one, and
    ``QueueRuns.of`` makes the same columns back."""
    batch = [("T", 0, 5, 0, 0, b""), ("U", 1, 0, 0, 0, b""), ("T", 0, 6, 0, 0, b"")]
    batch += [("T", 0, 9, 0, 0, b""), ("U", 1, 1, 0, 0, b"")]
    data, positions = chunk(batch)
    dispatcher = Dispatcher(None, None, [])  # type: ignore[arg-type]
    runs = dispatcher.plan(decode_dispatch_columns(data, positions, BASE)).runs
    assert isinstance(runs, QueueRuns)
    listed = list(runs)
    assert len(runs) == len(listed) == 3
    assert [(run.key, run.first, run.unit_count) for run in listed] == [
        (("T", 0), 5, 2),
        (("T", 0), 9, 1),
        (("U", 1), 0, 2),
    ]
    assert runs[-1] == listed[2] and runs[1:] == listed[1:] and runs[::-1] == listed[::-1]
    with pytest.raises(IndexError):
        runs[3]
    again = QueueRuns.of(listed)
    assert list(again) == listed
    assert (again.keys, again.firsts, again.bounds, again.ends, again.data) == (
        runs.keys, runs.firsts, runs.bounds, runs.ends, runs.data,
    )  # fmt: skip
