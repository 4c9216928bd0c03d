"""decode_records (the read path's batch decoder) against decode_record, its reference."""

from __future__ import annotations

import mmap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.store import codec as fmt
from wharf.store.errors import CorruptRecordError
from wharf.store.model import MessageInput

BASE = 1 << 40  # commit log offset of the buffer's first byte

_chars = st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",))
properties = st.dictionaries(
    st.text(_chars, min_size=1, max_size=8), st.text(_chars, max_size=12), max_size=4
)
messages = st.lists(
    st.builds(
        MessageInput,
        body=st.binary(min_size=1, max_size=64),
        properties=properties,
        flag=st.integers(-(2**31), 2**31 - 1),
        sys_flag=st.sampled_from([0, 2, 4, 8]),
        born_timestamp=st.integers(0, 2**40),
        born_host=st.sampled_from(["10.1.2.3:4567", "127.0.0.1:0", "[::1]:99"]),
        reconsume_times=st.integers(0, 16),
        prepared_transaction_offset=st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=8,
)


def encode(topic: str, batch: list[MessageInput], lead: int = 0) -> tuple[bytes, list[int]]:
    encoded = fmt.encode_batch(topic, 3, 77, batch, BASE + lead, 1234, "10.0.0.9:8081", 1 << 20)
    return bytes(lead) + bytes(encoded.data), [o - BASE for o in encoded.offsets]


@settings(max_examples=60, deadline=None)
@given(messages, st.sampled_from(["T", "TopicA", "%RETRY%g"]), st.integers(0, 16))
def test_batch_decode_equals_one_by_one_decode(batch, topic, lead):
    data, positions = encode(topic, batch, lead)
    expected = [fmt.decode_record(data, pos, BASE) for pos in positions]
    assert fmt.decode_records(data, positions, BASE) == expected
    assert fmt.decode_records(bytearray(data), positions, BASE) == expected
    assert fmt.decode_records(memoryview(data), positions, BASE) == expected


def test_batch_decode_reads_an_mmap_in_place():
    batch = [MessageInput(b"a" * 10, {"TAGS": "x", "KEYS": "k1 k2"}), MessageInput(b"b")]
    data, positions = encode("T", batch)
    with mmap.mmap(-1, 4096) as mm:
        mm[: len(data)] = data
        decoded = fmt.decode_records(mm, positions, BASE)
    assert [m.body for m in decoded] == [b"a" * 10, b"b"]
    assert decoded[0].properties == {"TAGS": "x", "KEYS": "k1 k2"}
    assert [m.commit_log_offset for m in decoded] == [BASE + p for p in positions]


def test_batch_decode_keeps_decode_records_errors_for_bad_records():
    data, positions = encode("T", [MessageInput(b"abc", {"TAGS": "t"})] * 2)
    broken = bytearray(data)
    broken[positions[1] + 4] ^= 0xFF  # magic of the second record
    with pytest.raises(CorruptRecordError, match="magic"):
        fmt.decode_records(bytes(broken), positions, BASE)
    with pytest.raises(CorruptRecordError, match="add up"):
        fmt.decode_records(data[:-1], positions, BASE)  # the last record runs past the buffer
    with pytest.raises(CorruptRecordError, match="truncated"):
        fmt.decode_records(data, [len(data) - 10], BASE)
    not_ascii = bytearray(data)
    topic_pos = positions[0] + fmt.RECORD_HEADER_SIZE + 3 + 1
    not_ascii[topic_pos] = 0xE9
    with pytest.raises(CorruptRecordError, match="ascii"):
        fmt.decode_records(bytes(not_ascii), positions[:1], BASE)


def test_batch_decode_tolerates_properties_written_by_others():
    # An empty pair and no final separator (same length): parsed as decode_record does.
    data, positions = encode("T", [MessageInput(b"abc", {"A": "1", "B": "2"})])
    assert data.endswith(b"A\x011\x02B\x012\x02")
    record = data[:-8] + b"A\x011\x02\x02B\x012"
    expected = fmt.decode_record(record, 0, BASE)
    assert expected.properties == {"A": "1", "B": "2"}
    assert fmt.decode_records(record, positions, BASE) == [expected]
