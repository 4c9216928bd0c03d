"""The compiled batch encoder (store/fast/_record_encoder.c) against the Python encoder it replaces."""

from __future__ import annotations

import pytest
import wharf.client.ids as ids_module
import wharf.client.record_encoder as record_encoder
import wharf.client.send_stream as send_stream
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.client.ids import new_unique_ids
from wharf.client.message import SendResult
from wharf.client.record_encoder import RecordEncoder
from wharf.store.codec.ids import _counter_ids_python, create_offset_msg_id
from wharf.store.codec.records import _crc32
from wharf.store.codec.send_records import encode_record
from wharf.store.fast.record_check import check_records
from wharf.v1 import messaging_pb2


def test_the_compiled_encoder_is_built_and_used() -> None:
    # `pip install -e .` compiles it (an optional ext-module); the producer's bulk path
    # only takes it when the import worked, so a silent fallback would show here.
    assert record_encoder._encode_bare_records is not None


@settings(max_examples=60, deadline=None)
@given(
    topic=st.from_regex(r"[A-Za-z0-9_-]{1,60}", fullmatch=True),
    bodies=st.lists(st.binary(min_size=1, max_size=6000), min_size=1, max_size=20),
)
def test_compiled_records_equal_the_python_encoder(topic: str, bodies: list[bytes]) -> None:
    encoder = RecordEncoder()
    tail = encoder.tail(topic)
    ids = new_unique_ids(len(bodies))
    compiled = encoder.encode_bare_many(tail, bodies, ids)
    born = int.from_bytes(compiled[0][40:48], "big")
    expected = [
        encode_record(tail, body, f"UNIQ_KEY\x01{uid}\x02".encode(), 0, 0, born)
        for body, uid in zip(bodies, ids, strict=True)
    ]
    assert compiled == expected
    # and the broker accepts them as one send batch
    assert len(check_records(b"".join(compiled), topic, 8 * 1024 * 1024)) == len(bodies)


def test_python_fallback_gives_the_same_records(monkeypatch: pytest.MonkeyPatch) -> None:
    encoder = RecordEncoder()
    tail = encoder.tail("t")
    bodies, ids = [b"a" * 100, b"b" * 5000], new_unique_ids(2)
    compiled = encoder.encode_bare_many(tail, bodies, ids)
    monkeypatch.setattr(record_encoder, "_encode_bare_records", None)
    fallback = encoder.encode_bare_many(tail, bodies, ids)
    # one born timestamp per batch: equal unless the millisecond turned in between
    assert [r[:40] + r[48:] for r in fallback] == [r[:40] + r[48:] for r in compiled]


def test_compiled_encoder_refuses_what_it_cannot_encode() -> None:
    encode = record_encoder._encode_bare_records
    assert encode is not None
    tail = RecordEncoder().tail("t")
    with pytest.raises(TypeError, match="body #1 is str"):
        encode(tail, [b"x", "y"], ["a", "b"], 0, _crc32)
    with pytest.raises(ValueError, match="differ in length"):
        encode(tail, [b"x"], ["a", "b"], 0, _crc32)
    # the system zlib CRC (None) and zlib-ng's agree
    assert encode(tail, [b"body"], ["id"], 7, None) == encode(tail, [b"body"], ["id"], 7, _crc32)


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(91, 5000), min_size=1, max_size=30),
    status=st.integers(0, 5),
    queue_id=st.integers(0, 2**31 - 1),
    first_queue_offset=st.integers(0, 2**60),
    first_offset=st.integers(0, 2**60),
    store_host=st.sampled_from(["127.0.0.1:10911", "10.1.2.3:8081", "", "not-a-host"]),
)
def test_compiled_send_results_equal_the_python_ones(
    sizes: list[int],
    status: int,
    queue_id: int,
    first_queue_offset: int,
    first_offset: int,
    store_host: str,
) -> None:
    records = [bytes(size) for size in sizes]
    ids = new_unique_ids(len(records))
    response = messaging_pb2.SendMessageResponse(
        status=status,
        queue_id=queue_id,
        first_queue_offset=first_queue_offset,
        first_commit_log_offset=first_offset,
        store_host=store_host,
        count=len(records),
    )
    compiled = record_encoder.results_of(response, "t", records, ids)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(record_encoder, "_send_results", None)
        python = record_encoder.results_of(response, "t", records, ids)
    assert compiled == python
    assert all(type(result) is SendResult for result in compiled)
    # record i's offset id names where it starts: after records 0..i-1
    assert int(compiled[-1].offset_msg_id[16:], 16) == first_offset + sum(sizes[:-1])
    # and it is the codec's offset message id (the one Python implementation)
    if store_host in ("127.0.0.1:10911", "10.1.2.3:8081"):
        starts = [first_offset + sum(sizes[:i]) for i in range(len(sizes))]
        assert [r.offset_msg_id for r in compiled] == [
            create_offset_msg_id(store_host, start) for start in starts
        ]


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.lists(st.integers(91, 3000), min_size=1, max_size=12),  # record sizes
            st.integers(0, 2**31 - 1),  # queue id
            st.integers(0, 2**60),  # first queue offset
            st.integers(0, 2**60),  # first commit log offset
        ),
        min_size=1,
        max_size=8,
    ),
    status=st.integers(0, 5),
    store_host=st.sampled_from(["127.0.0.1:10911", "", "not-a-host"]),
)
def test_compiled_column_results_equal_results_at_batch_by_batch(
    batches: list[tuple[list[int], int, int, int]], status: int, store_host: str
) -> None:
    """A reply in columns answered in one compiled call: each batch's results are those of
    ``results_at`` for that batch alone, and the Python twin agrees."""
    topics = [f"t{i}" for i in range(len(batches))]
    item_lists = []
    for sizes, *_ in batches:
        ids = new_unique_ids(len(sizes))
        item_lists.append([(bytes(size), uid) for size, uid in zip(sizes, ids, strict=True)])
    columns = [list(column) for column in zip(*(batch[1:] for batch in batches), strict=True)]
    queue_ids, firsts, offsets = columns
    compiled = record_encoder.column_results(
        status, store_host, queue_ids, firsts, offsets, topics, item_lists
    )
    expected = [
        record_encoder.results_at(
            status,
            store_host,
            queue_id,
            first,
            offset,
            topic,
            [item[0] for item in items],
            [item[1] for item in items],
        )
        for queue_id, first, offset, topic, items in zip(
            queue_ids, firsts, offsets, topics, item_lists, strict=True
        )
    ]
    assert compiled == expected
    assert all(type(result) is SendResult for results in compiled for result in results)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(record_encoder, "_column_results", None)
        patch.setattr(record_encoder, "_send_results", None)
        python = record_encoder.column_results(
            status, store_host, queue_ids, firsts, offsets, topics, item_lists
        )
    assert python == expected


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(
        st.lists(st.integers(0, 20_000), min_size=0, max_size=6), min_size=0, max_size=40
    )
)
def test_compiled_columns_payload_equals_the_python_twin(sizes: list[list[int]]) -> None:
    """The batch sizes as a packed varint field (sizes past 127 and 16,383 take 2 and 3
    bytes), their sum and the records in order; what the broker reads back as batch_sizes."""
    batches = [[(bytes([i % 256]) * size, "id") for i, size in enumerate(batch)] for batch in sizes]
    compiled = send_stream.columns_payload(batches)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(send_stream, "_columns_payload", None)
        python = send_stream.columns_payload(batches)
    assert compiled == python
    _, total, records = compiled
    assert records == [item[0] for batch in batches for item in batch]
    assert total == sum(map(sum, sizes))
    request = messaging_pb2.SendMessageRequest.FromString(
        send_stream.encode_columns_request(
            7, b"", [send_stream.topic_field("t")] * len(batches), batches
        )
    )
    assert list(request.batch_sizes) == [sum(batch) for batch in sizes]
    assert request.records == b"".join(records) and request.request_id == 7


def test_compiled_columns_helpers_refuse_what_they_cannot_read() -> None:
    with pytest.raises(TypeError, match="item #0 of batch #1"):
        send_stream.columns_payload([[(b"a", "id")], [("not bytes", "id")]])
    with pytest.raises(TypeError, match="batch #0 is not a list"):
        send_stream.columns_payload([((b"a", "id"),)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="differ in length"):
        record_encoder.column_results(0, "", [1, 2], [0], [0], ["t"], [[(b"a", "id")]])
    with pytest.raises(TypeError, match="not a \\(record, unique id"):
        record_encoder.column_results(0, "", [1], [0], [0], ["t"], [[b"bare record"]])


def test_the_default_id_generator_uses_the_compiled_counter_ids() -> None:
    assert ids_module._DEFAULT._counter_ids is ids_module._counter_ids is not None


@given(
    head=st.text("0123456789ABCDEF", max_size=28),
    start=st.integers(0, 2**40),
    count=st.integers(0, 300),
)
def test_compiled_counter_ids_equal_the_python_ones(head: str, start: int, count: int) -> None:
    assert ids_module._counter_ids is not None
    expected = ["%s%04X" % (head, (start + i) & 0xFFFF) for i in range(count)]  # noqa: UP031
    assert _counter_ids_python(head, start, count) == expected  # the codec's reference
    assert ids_module._counter_ids(head, start, count) == expected


@pytest.mark.parametrize("start", [2**63 - 1, 2**63 - 3, -(2**63), -1])
def test_counter_ids_at_the_ends_of_int64_wrap_as_python(start: int) -> None:
    # The fuzzer's finding (tests/fuzz/regressions/record_encoder): start + i passed
    # LLONG_MAX in signed arithmetic, undefined behaviour; the C now counts unsigned.
    assert ids_module._counter_ids is not None
    expected = ["AB%04X" % ((start + i) & 0xFFFF) for i in range(5)]
    assert ids_module._counter_ids("AB", start, 5) == expected
