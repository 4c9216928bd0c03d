"""ConsumeQueue against a list oracle (Kafka's OffsetIndexTest.randomLookupTest idea), with tiny
files so every operation crosses file boundaries, plus reopen, truncation and retention."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.store.errors import DamagedQueueError
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue

UNITS_PER_FILE = 7
FILE_SIZE = UNITS_PER_FILE * 20


def _units(start_phy: int, sizes: list[int], tags: list[int]) -> list[tuple[int, int, int]]:
    units = []
    phy = start_phy
    for size, tag in zip(sizes, tags, strict=True):
        units.append((phy, size, tag))
        phy += size
    return units


def _open(directory: Path) -> ConsumeQueue:
    return ConsumeQueue.load_blocking("T", 0, directory, FILE_SIZE)


batches = st.lists(
    st.lists(
        st.tuples(st.integers(1, 500), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=20
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=batches, probes=st.lists(st.tuples(st.integers(0, 300), st.integers(1, 40))))
def test_random_appends_read_back_like_a_list_across_files_and_reopen(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[list[tuple[int, int]]],
    probes: list[tuple[int, int]],
) -> None:
    directory = tmp_path_factory.mktemp("cq")
    queue = _open(directory)
    oracle: list[tuple[int, int, int]] = []
    phy = 0
    for batch in batches:
        units = _units(phy, [s for s, _ in batch], [t for _, t in batch])
        phy = units[-1][0] + units[-1][1]
        assert queue.append_units(len(oracle), units) == len(units)
        oracle.extend(units)
    assert queue.max_offset == len(oracle)
    assert queue.max_physical_offset == phy
    for offset, count in probes:  # the newest units may be in the queue's tail, in memory
        assert list(queue.read_units(offset, count)) == oracle[offset : offset + count]
        assert queue.get_unit(offset) == (oracle[offset] if offset < len(oracle) else None)
    queue.spill()  # what the queue flush service does before it syncs
    queue.flush_blocking()
    queue.close()

    reopened = _open(directory)
    try:
        assert reopened.min_offset == 0
        assert reopened.max_offset == len(oracle)
        assert reopened.max_physical_offset == phy
        assert len(reopened.files) == -(-len(oracle) // UNITS_PER_FILE)
        for offset, count in probes:
            assert list(reopened.read_units(offset, count)) == oracle[offset : offset + count]
            expected = oracle[offset] if offset < len(oracle) else None
            assert reopened.get_unit(offset) == expected
    finally:
        reopened.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(count=st.integers(1, 40), cut=st.integers(0, 45))
def test_truncate_from_physical_drops_exactly_the_units_beyond_the_log_end(
    tmp_path_factory: pytest.TempPathFactory, count: int, cut: int
) -> None:
    directory = tmp_path_factory.mktemp("cq")
    queue = _open(directory)
    units = _units(0, [10] * count, [7] * count)
    queue.append_units(0, units)
    log_end = cut * 10  # a record boundary, as recovery returns
    dropped = queue.truncate_from_physical(log_end)
    kept = [u for u in units if u[0] < log_end]
    assert dropped == count - len(kept)
    assert queue.max_offset == len(kept)
    assert queue.max_physical_offset == (kept[-1][0] + 10 if kept else 0)
    queue.close()

    # Truncated units must not come back on reopen, and appends continue at the cut.
    reopened = _open(directory)
    try:
        assert reopened.max_offset == len(kept)
        assert list(reopened.read_units(0, 100)) == kept
        more = _units(len(kept) * 10, [10, 10], [1, 2])
        reopened.append_units(len(kept), more)
        assert list(reopened.read_units(0, 100)) == kept + more
    finally:
        reopened.close()


def test_redispatched_units_are_skipped_and_gaps_become_blank_units(tmp_path: Path) -> None:
    queue = _open(tmp_path)
    queue.append_units(0, _units(0, [10, 10, 10], [0, 0, 0]))
    # A re-dispatch after recovery repeats offsets 1..2 and adds 3.
    assert queue.append_units(1, _units(10, [10, 10, 10], [0, 0, 0])) == 1
    assert queue.max_offset == 4
    # Offset 6 arrives while 4 and 5 are missing: blanks keep logical offsets aligned.
    queue.append_units(6, [(100, 10, 5)])
    assert queue.max_offset == 7
    assert queue.get_unit(4) == (0, BLANK_UNIT_SIZE, 0)
    assert queue.get_unit(6) == (100, 10, 5)
    queue.close()


def test_queue_recreated_above_zero_starts_at_the_file_holding_its_offset(tmp_path: Path) -> None:
    queue = _open(tmp_path)
    queue.append_units(20, [(5000, 10, 1)])
    assert [f.start for f in queue.files] == [14 * 20]  # file of units 14..20
    assert queue.min_offset == 20
    assert queue.max_offset == 21
    assert list(queue.read_units(20, 5)) == [(5000, 10, 1)]
    queue.close()
    reopened = _open(tmp_path)
    reopened.correct_min_offset(0)  # blanks before offset 20 are skipped
    assert reopened.min_offset == 20
    reopened.close()


def test_expired_files_are_those_wholly_below_the_commit_log_min_offset(tmp_path: Path) -> None:
    queue = _open(tmp_path)
    units = _units(0, [10] * 30, [0] * 30)  # 5 files: 7+7+7+7+2 units
    queue.append_units(0, units)
    expired = queue.expired_files(commit_log_min=150)  # units 0..14 are below 150
    assert [f.start // 20 for f in expired] == [0, 7]
    queue.detach_files(expired)
    for file in expired:
        os.unlink(file.path)
    queue.correct_min_offset(150)
    assert queue.min_offset == 15
    assert list(queue.read_units(15, 2)) == units[15:17]
    # The newest file is never expired, even when everything is below the minimum.
    assert queue.files[-1] not in queue.expired_files(commit_log_min=10**9)
    queue.close()
    reopened = _open(tmp_path)
    reopened.correct_min_offset(150)
    assert (reopened.min_offset, reopened.max_offset) == (15, 30)
    reopened.close()


def test_offset_by_time_finds_the_first_unit_stored_at_or_after(tmp_path: Path) -> None:
    queue = _open(tmp_path)
    units = _units(0, [10] * 20, [0] * 20)
    queue.append_units(0, units)
    stamps = {u[0]: 1000 + (i // 2) * 10 for i, u in enumerate(units)}  # pairs share a ms

    def store_time(offset: int, size: int) -> int | None:
        return stamps[offset]

    assert queue.offset_by_time(0, store_time) == 0
    assert queue.offset_by_time(1000, store_time) == 0
    assert queue.offset_by_time(1001, store_time) == 2
    assert queue.offset_by_time(1010, store_time) == 2
    assert queue.offset_by_time(1095, store_time) == 20  # after everything: max offset
    queue.close()


def test_file_size_must_be_a_multiple_of_the_unit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple of 20"):
        ConsumeQueue("T", 0, tmp_path, 30)


def test_file_of_another_size_is_refused_on_load(tmp_path: Path) -> None:
    (tmp_path / f"{0:020d}").write_bytes(b"\1" * 40)
    with pytest.raises(DamagedQueueError, match="expected 140"):
        _open(tmp_path)


def test_empty_newest_file_left_by_a_crash_is_removed(tmp_path: Path) -> None:
    queue = _open(tmp_path)
    queue.append_units(0, _units(0, [10] * 7, [0] * 7))  # exactly one full file
    queue.close()
    (tmp_path / f"{140:020d}").write_bytes(b"")
    reopened = _open(tmp_path)
    assert reopened.max_offset == 7 and len(reopened.files) == 1
    reopened.append_units(7, [(70, 10, 0)])
    assert reopened.get_unit(7) == (70, 10, 0)
    reopened.close()


def test_files_created_ahead_but_never_written_are_dropped_on_load(tmp_path: Path) -> None:
    queue = _open(tmp_path)
    queue.append_units(0, _units(0, [10] * 3, [0] * 3))
    starts = queue.missing_files(3, 20)  # 23 units of 7 per file: three more files
    assert starts == [140, 280, 420]
    queue.adopt_files(queue.create_files_blocking(starts))
    queue.close()  # crash before any unit reached them
    reopened = _open(tmp_path)
    assert (reopened.max_offset, len(reopened.files)) == (3, 1)
    reopened.append_units(3, _units(30, [10] * 10, [0] * 10))
    assert [u[0] for u in reopened.read_units(0, 20)] == [i * 10 for i in range(13)]
    reopened.close()
