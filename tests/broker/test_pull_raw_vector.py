"""The vectorized raw pull read (store.get_raw, numpy) against the scalar loops it replaces for
big pulls: same units chosen, same scan length, same statuses, same bytes and body counts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from store import get_raw
from store.consume_queue import BLANK_UNIT_SIZE, UNIT
from store.filter import MATCH_ALL, tag_filter_for
from store.format import encode_batch, java_string_hash
from store.get_message import choose_units
from store.model import MessageInput

TAGS = ["a", "b", "c"]


@dataclass
class FakeQueue:
    """What the unit choosers read from a ConsumeQueue."""

    units: list[tuple[int, int, int]]

    def read_unit_bytes(self, offset: int, max_count: int) -> bytes:
        return b"".join(UNIT.pack(*u) for u in self.units[offset : offset + max_count])


@dataclass
class FakeLog:
    """A commit log over one in-memory buffer starting at offset ``base``."""

    data: bytes
    base: int = 0
    min_offset: int = 0

    def read_bytes(self, offset: int, size: int) -> bytes | None:
        start = offset - self.base
        if offset < self.min_offset or start < 0 or start + size > len(self.data):
            return None
        return self.data[start : start + size]


unit_lists = st.lists(
    st.tuples(
        st.integers(0, 5000),  # commit log offset
        st.one_of(st.integers(92, 3000), st.just(BLANK_UNIT_SIZE)),
        st.sampled_from([java_string_hash(t) for t in TAGS] + [0]),
    ),
    min_size=1,
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(
    units=unit_lists,
    log_min=st.integers(0, 3000),
    max_count=st.integers(1, 400),
    max_bytes=st.integers(1, 200_000),
    tags=st.sets(st.sampled_from(TAGS), max_size=2),
)
def test_vectorized_choice_equals_the_scalar_loop(
    units: list[tuple[int, int, int]], log_min: int, max_count: int, max_bytes: int, tags: set
) -> None:
    queue = FakeQueue(units)
    log = FakeLog(b"", min_offset=log_min)
    tag_filter = tag_filter_for(sorted(tags)) if tags else MATCH_ALL
    scalar = choose_units(queue, log, 0, max_count, tag_filter, max_bytes)  # type: ignore[arg-type]
    vector = get_raw._choose_vectorized(queue, log, 0, max_count, tag_filter, max_bytes)  # type: ignore[arg-type]
    assert scalar is not None and vector is not None
    chosen, scanned, removed_first = scalar
    phys, sizes, v_scanned, v_removed_first = vector
    assert list(zip(phys.tolist(), sizes.tolist(), strict=True)) == chosen
    assert (v_scanned, v_removed_first) == (scanned, removed_first)


def records(count: int, start: int = 4096) -> bytes:
    inputs = [
        MessageInput(b"x" * (10 + i % 50), {"UNIQ_KEY": f"U{i}", "TAGS": TAGS[i % 3]})
        for i in range(count)
    ]
    return encode_batch("t", 0, 0, inputs, start, 1_700_000_000_000, "10.0.0.1:1", 1 << 20).data


def units_of(data: bytes, start: int = 4096) -> list[tuple[int, int, int]]:
    units, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        units.append((start + pos, size, 0))
        pos += size
    return units


def test_big_raw_pull_returns_the_same_bytes_and_counts_as_the_scalar_path() -> None:
    data = records(200)
    log = FakeLog(data, base=4096)
    units = units_of(data)
    phys = np.array([u[0] for u in units], np.int64)
    sizes = np.array([u[1] for u in units], np.int64)
    vector = get_raw._read_runs_vectorized(log, phys, sizes)  # type: ignore[arg-type]
    scalar = get_raw._read_runs(log, [(u[0], u[1]) for u in units])  # type: ignore[arg-type]
    assert vector == scalar
    chunks, count, body_bytes, missing = vector
    assert b"".join(chunks) == data and count == 200 and missing == 0
    assert body_bytes == sum(10 + i % 50 for i in range(200))


def test_a_unit_that_disagrees_with_the_log_is_not_returned_unchecked() -> None:
    data = records(100)
    units = units_of(data)
    sizes = np.array([u[1] for u in units], np.int64)
    sizes[50] += 1  # the log says otherwise: the vectorized check must refuse the run
    assert get_raw._check_run_vectorized(data, sizes) is None
    damaged = data[: units[70][0] - 4096 + 4] + b"\0\0\0\0" + data[units[70][0] - 4096 + 8 :]
    assert get_raw._check_run_vectorized(damaged, np.array([u[1] for u in units])) is None
    assert get_raw._check_run_vectorized(data, np.array([u[1] for u in units])) is not None


def test_gaps_between_records_split_runs() -> None:
    first, second = records(60), records(60, start=50_000)
    log = FakeLog(first + b"\0" * (50_000 - 4096 - len(first)) + second, base=4096)
    units = units_of(first) + units_of(second, start=50_000)
    phys = np.array([u[0] for u in units], np.int64)
    sizes = np.array([u[1] for u in units], np.int64)
    chunks, count, _, missing = get_raw._read_runs_vectorized(log, phys, sizes)  # type: ignore[arg-type]
    assert chunks == [first, second] and count == 120 and missing == 0
