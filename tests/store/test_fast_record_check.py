"""The compiled send-batch check and patch (store/fast/_record_check.c) against the numpy versions
they replace: same starts, same error for the same bad batch, same patched bytes."""

from __future__ import annotations

import numpy as np
import pytest
import wharf.store.fast.record_check as record_check
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.store.codec.hosts import born_host_bytes, encode_host
from wharf.store.errors import InvalidMessageError
from wharf.store.model import MessageInput

from tests.store.test_record_batch import client_batch, messages

TOPIC = "orders"


def outcome(data: bytes, topic: str = TOPIC, limit: int = 4096) -> list[int] | str:
    try:
        return record_check.check_records(data, topic, limit).tolist()
    except InvalidMessageError as exc:
        return str(exc)


def both(data: bytes, **kwargs: object) -> tuple[object, object]:
    compiled = outcome(data, **kwargs)  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as patch:  # hypothesis: no function-scoped fixture
        patch.setattr(record_check, "_compiled", None)
        numpy_result = outcome(data, **kwargs)  # type: ignore[arg-type]
    return compiled, numpy_result


def test_the_compiled_check_is_built_and_used() -> None:
    assert (
        record_check._compiled is not None
    )  # `pip install -e .` builds it (pyproject ext-modules)


@settings(max_examples=200, deadline=None)
@given(
    batch=messages,
    position=st.integers(0, 10**6),
    value=st.integers(0, 255),
    cut=st.integers(0, 10**6),
    mode=st.sampled_from(["valid", "flip", "truncate", "topic", "limit"]),
)
def test_compiled_check_agrees_with_numpy(
    batch: list[MessageInput],
    position: int,
    value: int,
    cut: int,
    mode: str,
) -> None:
    data = bytearray(client_batch(TOPIC, batch))
    kwargs: dict[str, object] = {}
    if mode == "flip":  # one byte anywhere: framing, header, body (CRC), topic or properties
        data[position % len(data)] = value
    elif mode == "truncate":
        del data[cut % len(data) :]
    elif mode == "topic":
        kwargs["topic"] = "other"
    elif mode == "limit":
        kwargs["limit"] = 1 + position % 300
    compiled, numpy_result = both(bytes(data), **kwargs)
    assert compiled == numpy_result
    if mode == "valid":
        assert isinstance(compiled, list) and len(compiled) == len(batch)


def test_several_bad_records_are_reported_alike() -> None:
    batch = [MessageInput(b"x" * 10, {}), MessageInput(b"y" * 10, {}), MessageInput(b"z", {})]
    data = bytearray(client_batch(TOPIC, batch))
    second = len(client_batch(TOPIC, batch[:1]))
    third = len(client_batch(TOPIC, batch[:2]))
    data[third + 4] ^= 0xFF  # record #2: MAGICCODE (a header check) ...
    data[second + 88] ^= 0xFF  # ... record #1: its body (a CRC check, reported after headers)
    compiled, numpy_result = both(bytes(data))
    assert compiled == numpy_result
    assert compiled == "record #2 of the batch is invalid: MAGICCODE is not a message's"


@settings(max_examples=50, deadline=None)
@given(
    batch=messages,
    queue_id=st.integers(0, 2**31 - 1),
    first=st.integers(0, 2**40),
    start=st.integers(0, 2**40),
    store_ts=st.integers(0, 2**41),
)
def test_compiled_patch_writes_the_same_bytes(
    batch: list[MessageInput],
    queue_id: int,
    first: int,
    start: int,
    store_ts: int,
) -> None:
    data = client_batch(TOPIC, batch)
    starts = record_check.check_records(data, TOPIC, 4096)
    args = (queue_id, first, start, born_host_bytes("10.1.2.3:4567"), store_ts)
    store_host = encode_host("127.0.0.1:10911")
    compiled = bytearray(data)
    record_check.patch_records(compiled, starts, *args, store_host)
    numpy_patched = bytearray(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(record_check, "_compiled", None)
        record_check.patch_records(numpy_patched, np.array(starts), *args, store_host)
    assert compiled == numpy_patched


def test_compiled_patch_refuses_starts_outside_the_buffer() -> None:
    compiled = record_check._compiled
    assert compiled is not None
    with pytest.raises(ValueError, match="outside the buffer"):
        compiled.patch(
            bytearray(100), np.array([50], dtype=np.int64), 0, 0, 0, b"\0" * 8, 0, b"\0" * 8
        )
    with pytest.raises(ValueError, match="8 bytes"):
        compiled.patch(bytearray(100), np.array([0], dtype=np.int64), 0, 0, 0, b"\0", 0, b"\0" * 8)


@given(
    batches=st.lists(
        st.tuples(messages, st.integers(0, 2**31 - 1), st.integers(0, 2**40)),
        min_size=1,
        max_size=5,
    ),
    start=st.integers(0, 2**40),
    store_ts=st.integers(0, 2**41),
)
def test_patching_many_batches_at_once_writes_what_one_call_per_batch_writes(
    batches: list[tuple[list[MessageInput], int, int]], start: int, store_ts: int
) -> None:
    """A request's batches patched in one call (compiled, and its numpy fallback) are byte for
    byte the batches patched one by one on their slices."""
    born, store_host = born_host_bytes("10.1.2.3:4567"), encode_host("127.0.0.1:10911")
    datas = [client_batch(TOPIC, batch) for batch, _, _ in batches]
    data = b"".join(datas)
    starts, described, one_by_one = [], [], bytearray(data)
    base = 0
    for part, (_, queue_id, first) in zip(datas, batches, strict=True):
        local = record_check.check_records(part, TOPIC, 4096) + base
        record_check.patch_records(one_by_one, local, queue_id, first, start, born, store_ts, store_host)  # fmt: skip
        starts.append(local)
        described.append((len(local), queue_id, first))
        base += len(part)
    at = np.concatenate(starts)
    compiled = bytearray(data)
    columns = [list(column) for column in zip(*described, strict=True)]
    record_check.patch_columns(compiled, at, *columns, start, born, store_ts, store_host)
    numpy_patched = bytearray(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(record_check, "_compiled", None)
        record_check.patch_columns(numpy_patched, at, *columns, start, born, store_ts, store_host)
    assert compiled == one_by_one
    assert numpy_patched == one_by_one


@given(
    batches=st.lists(
        st.tuples(messages, st.sampled_from(["T", "Other-topic"])), min_size=1, max_size=5
    ),
    bad=st.none() | st.integers(0, 4),
)
def test_checking_many_batches_at_once_finds_what_one_check_per_batch_finds(
    batches: list[tuple[list[MessageInput], str]], bad: int | None
) -> None:
    """A request's batches checked in one compiled call: every record's start in the whole
    blob and each batch's count, as ``check_records`` per batch gives them; a bad batch (here
    one whose records name another topic) makes it answer None, nothing half-checked."""
    datas = [client_batch(topic, batch) for batch, topic in batches]
    topics = [topic for _, topic in batches]
    if bad is not None and bad < len(batches):
        topics[bad] = "Third" if topics[bad] != "Third" else "T"
    found = record_check.check_records_many(b"".join(datas), [len(d) for d in datas], topics, 4096)
    if bad is not None and bad < len(batches):
        assert found is None
        return
    assert found is not None
    starts, counts = found
    expected, base = [], 0
    for data, topic in zip(datas, topics, strict=True):
        expected.extend((record_check.check_records(data, topic, 4096) + base).tolist())
        base += len(data)
    assert starts.tolist() == expected
    assert counts == [len(batch) for batch, _ in batches]


def test_an_empty_batch_among_many_is_a_bad_batch_as_alone() -> None:
    """Found by tests/fuzz: ``check_many`` took a batch of 0 bytes as a good batch of no
    records (the per-batch check refuses empty records), and then offset a NULL array (UBSan).
    It is now the first bad batch, with 0 bytes left, wherever it stands; the caller then
    checks batch by batch and names it. An empty buffer is refused alike by ``check``."""
    compiled = record_check._compiled
    assert compiled is not None
    data = client_batch(TOPIC, [MessageInput(b"x", {})])
    tail = record_check._tail_of(TOPIC)
    crc32 = record_check._crc32
    for sizes, bad in (([0, len(data)], 0), ([len(data), 0], 1)):
        found = compiled.check_many(data, sizes, [tail, tail], 4096, 0xFFFF, crc32)
        assert found == (bad, (0, 1, 0))
        assert record_check.check_records_many(data, sizes, [TOPIC, TOPIC], 4096) is None
    assert compiled.check(b"", tail, 4096, 0xFFFF, crc32) == (0, 1, 0)
    assert compiled.check(memoryview(bytearray()), tail, 4096, 0xFFFF, crc32) == (0, 1, 0)


def test_patching_many_refuses_counts_that_do_not_add_up() -> None:
    compiled = record_check._compiled
    assert compiled is not None
    words = lambda *values: np.array(values, dtype=np.int64)  # noqa: E731
    with pytest.raises(ValueError, match="count 3 records, starts holds 2"):
        compiled.patch_many(
            bytearray(400), words(0, 200), [1, 2], [0, 1], [0, 0], 0, b"\0" * 8, 0, b"\0" * 8,
        )  # fmt: skip
    with pytest.raises(ValueError, match="outside the buffer"):
        compiled.patch_many(bytearray(100), words(50), [1], [0], [0], 0, b"\0" * 8, 0, b"\0" * 8)
