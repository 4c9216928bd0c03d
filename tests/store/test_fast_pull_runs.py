"""The compiled unit choice and run check of the raw pull (store/fast/_log_scan.c
``choose_runs`` / ``check_run``) against their Python references in store/read/get_raw.py:
the same runs, sizes, units scanned and removed-first flag for any units (blank ones, units
below the log's minimum, tag codes in and out of the filter), count and byte limits; the same
verdict on any run over valid and damaged records."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.store.codec.layout import CQ_UNIT
from wharf.store.codec.records import encode_batch
from wharf.store.model import MessageInput
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE
from wharf.store.read import get_raw

compiled = get_raw._COMPILED


def test_the_compiled_choice_is_built_and_used() -> None:
    assert compiled is not None  # `pip install -e .` builds it (pyproject ext-modules)
    assert get_raw._choose_runs is compiled.choose_runs
    assert get_raw._check_run is compiled.check_run


# A unit: (gap before its record: 0 = adjacent to the previous, size, tag code, blank?).
UNITS = st.lists(
    st.tuples(st.sampled_from([0, 0, 0, 8, 500]), st.integers(91, 3000),
              st.integers(-3, 3), st.integers(0, 9)),
    max_size=60,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    units=UNITS,
    first_offset=st.integers(0, 10_000),
    log_min=st.integers(0, 20_000),
    max_count=st.integers(0, 70),
    max_bytes=st.integers(0, 200_000),
    codes=st.one_of(st.none(), st.frozensets(st.integers(-3, 3), max_size=4)),
)
def test_compiled_choice_agrees_with_python(
    units: list[tuple[int, int, int, int]],
    first_offset: int,
    log_min: int,
    max_count: int,
    max_bytes: int,
    codes: frozenset[int] | None,
) -> None:
    packed = []
    offset = first_offset
    for gap, size, code, blank in units:
        offset += gap
        if blank == 0:  # one in ten: a blank unit (no record behind it)
            packed.append(CQ_UNIT.pack(0, BLANK_UNIT_SIZE, 0))
            continue
        packed.append(CQ_UNIT.pack(offset, size, code))
        offset += size
    data = b"".join(packed)
    args = (data, max_count, max_bytes, log_min, codes)
    assert compiled is not None
    assert compiled.choose_runs(*args) == get_raw.choose_runs_python(*args)


def test_runs_split_at_gaps_and_stop_at_the_limits() -> None:
    units = b"".join(
        CQ_UNIT.pack(*u)
        for u in [(1000, 100, 1), (1100, 100, 2), (1300, 100, 1), (1400, 100, 1), (1500, 100, 1)]
    )
    assert compiled is not None
    runs, sizes, scanned, removed = compiled.choose_runs(units, 4, 10_000, 0, None)
    assert runs == [(1000, 200, 0, 2), (1300, 200, 2, 2)]
    assert array("i", sizes).tolist() == [100] * 4 and scanned == 4 and not removed
    # code 2 filtered out: 1000 and 1300 are no longer adjacent; the byte limit stops at 3.
    runs, _, scanned, _ = compiled.choose_runs(units, 10, 300, 0, frozenset({1}))
    assert runs == [(1000, 100, 0, 1), (1300, 200, 1, 2)] and scanned == 4
    # The first units below the log's minimum: skipped, and said.
    runs, _, _, removed = compiled.choose_runs(units, 10, 10_000, 1200, None)
    assert runs == [(1300, 300, 0, 3)] and removed


def _records(count: int) -> bytes:
    inputs = [MessageInput(b"x" * (10 + i % 50), {"UNIQ_KEY": f"U{i}"}) for i in range(count)]
    half = (count + 1) // 2  # V1 records, then V2 ones (a 200-byte topic)
    v1 = encode_batch("t", 0, 0, inputs[:half], 0, 1_700_000_000_000, "10.0.0.1:1", 1 << 20).data
    if half == count:
        return v1
    v2 = encode_batch("L" * 200, 0, 0, inputs[half:], len(v1), 1, "10.0.0.1:1", 1 << 20).data
    return v1 + v2


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 12),
    first=st.integers(0, 3),
    damage=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 255))),
    resize=st.one_of(st.none(), st.tuples(st.integers(0, 11), st.integers(-100, 100))),
    cut=st.integers(0, 200),
)
def test_compiled_check_agrees_with_python(
    count: int,
    first: int,
    damage: tuple[int, int] | None,
    resize: tuple[int, int] | None,
    cut: int,
) -> None:
    data = bytearray(_records(count + first))
    sizes, pos = [], 0
    while pos < len(data):
        sizes.append(int.from_bytes(data[pos : pos + 4], "big"))
        pos += sizes[-1]
    chunk = data[sum(sizes[:first]) :]
    if damage is not None:
        chunk[damage[0] % len(chunk)] = damage[1]
    if resize is not None:  # a unit that disagrees with its record
        sizes[first + resize[0] % count] += resize[1]
    chunk = chunk[: len(chunk) - cut % len(chunk)] if cut % 3 == 0 else chunk
    packed = array("i", sizes).tobytes()
    assert compiled is not None
    got = compiled.check_run(bytes(chunk), packed, first, count)
    assert got == get_raw.check_run_python(bytes(chunk), packed, first, count)
    if damage is None and resize is None and cut % 3:
        assert got == sum(10 + i % 50 for i in range(first, first + count))


def test_a_run_outside_its_sizes_is_refused() -> None:
    assert compiled is not None
    with pytest.raises(ValueError, match="outside sizes"):
        compiled.check_run(b"", array("i", [100]).tobytes(), 1, 1)
