"""Producer-encoded send batches: a checked and patched batch must be byte for byte what the
store's own encoder writes for the same messages (the oracle), and a bad record is named."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.store.codec.hosts import born_host_bytes, encode_host
from wharf.store.codec.layout import RECORD_HEADER_SIZE
from wharf.store.codec.properties import properties_to_string
from wharf.store.codec.records import encode_batch
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.store.errors import InvalidMessageError
from wharf.store.fast.record_check import check_records, patch_records
from wharf.store.model import MessageInput

BORN_HOST = "10.1.2.3:4567"
STORE_HOST = "127.0.0.1:10911"

names = st.text(
    st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=8,
)
messages = st.lists(
    st.builds(
        MessageInput,
        body=st.binary(min_size=1, max_size=300),
        properties=st.dictionaries(names, names, max_size=3),
        flag=st.integers(0, 2**31 - 1),
        sys_flag=st.sampled_from([0, 1]),
        born_timestamp=st.integers(1, 2**41),
        born_host=st.just(BORN_HOST),
    ),
    min_size=1,
    max_size=40,
)


def client_batch(topic: str, batch: list[MessageInput]) -> bytes:
    tail = topic_tail(topic)
    return b"".join(
        encode_record(
            tail,
            m.body,
            properties_to_string(m.properties).encode() if m.properties else b"",
            m.flag,
            m.sys_flag,
            m.born_timestamp,
        )
        for m in batch
    )


@settings(max_examples=150, deadline=None)
@given(
    batch=messages,
    queue_id=st.integers(0, 2**31 - 1),
    first=st.integers(0, 2**40),
    start=st.integers(0, 2**40),
)
def test_patched_batch_equals_the_store_encoding(
    batch: list[MessageInput], queue_id: int, first: int, start: int
) -> None:
    data = client_batch("orders", batch)
    starts = check_records(data, "orders", 4096)
    expected = encode_batch(
        "orders", queue_id, first, batch, start, 1_700_000_000_123, STORE_HOST, 4096
    )
    assert [start + int(s) for s in starts] == expected.offsets
    patched = bytearray(data)
    patch_records(
        patched,
        starts,
        queue_id,
        first,
        start,
        born_host_bytes(BORN_HOST),
        1_700_000_000_123,
        encode_host(STORE_HOST),
    )
    assert bytes(patched) == expected.data


def test_equal_size_and_mixed_size_batches_find_the_same_boundaries() -> None:
    tail = topic_tail("t")
    same = [encode_record(tail, b"x" * 100, b"K\x01v\x02") for _ in range(7)]
    mixed = [encode_record(tail, b"x" * (100 + i), b"K\x01v\x02") for i in range(7)]
    for records in (same, mixed):
        starts = check_records(b"".join(records), "t", 4096).tolist()
        sizes = [len(r) for r in records]
        assert starts == [sum(sizes[:i]) for i in range(7)]
    # Equal sizes except the last: the quick path must not be fooled.
    odd = [*same[:-1], encode_record(tail, b"y" * 99, b"K\x01v\x02\x00"[:-1] + b"\x02")]
    assert check_records(b"".join(odd), "t", 4096).tolist() == [len(same[0]) * i for i in range(7)]


def flip(record: bytes, at: int) -> bytes:
    return record[:at] + bytes((record[at] ^ 0xFF,)) + record[at + 1 :]


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda r: flip(r, RECORD_HEADER_SIZE), "BODYCRC"),
        (lambda r: flip(r, 4), "MAGICCODE"),
        (lambda r: b"\x7f\xff\xff\xff" + r[4:], "TOTALSIZE"),
        (lambda r: flip(r, 39), "SYSFLAG"),  # low byte of SYSFLAG
        (lambda r: flip(r, 75), "RECONSUMETIMES"),
        (lambda r: flip(r, RECORD_HEADER_SIZE + 3 + 1), "topic"),  # a byte of the topic name
    ],
)
def test_a_bad_record_is_named(mutate, reason: str) -> None:  # type: ignore[no-untyped-def]
    tail = topic_tail("abc")
    good = encode_record(tail, b"bod", b"UNIQ_KEY\x01U\x02")
    with pytest.raises(InvalidMessageError, match=rf"record #2 .*{reason}"):
        check_records(good + good + mutate(good) + good, "abc", 4096)


def test_empty_and_oversized_batches_are_refused() -> None:
    with pytest.raises(InvalidMessageError, match="empty"):
        check_records(b"", "t", 4096)
    big = encode_record(topic_tail("t"), b"z" * 5000, b"")
    with pytest.raises(InvalidMessageError, match="maxMessageSize"):
        check_records(big, "t", 4096)
    with pytest.raises(InvalidMessageError, match="needs at least"):
        check_records(b"\x00" * 10, "t", 4096)
