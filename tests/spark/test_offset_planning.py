"""Offset planning is pure: check it against hand-computed answers and simple invariants."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wharf.client.spark.offsets import (
    DataLossError,
    QueueRange,
    cap_by_max_rows,
    check_retention,
    decode_offsets,
    encode_offsets,
    plan_ranges,
    resolve_offsets,
    split_ranges,
)
from wharf.client.spark.options import EARLIEST, LATEST, OffsetSpec, parse_offset_spec
from wharf.client.spark.rpc import QueueBounds

pytestmark = pytest.mark.spark


def bounds(*rows: tuple[str, int, int, int]) -> dict[tuple[str, int], QueueBounds]:
    return {(t, q): QueueBounds(t, q, lo, hi) for t, q, lo, hi in rows}


def test_offsets_survive_the_checkpoint_json_round_trip_with_string_keys() -> None:
    offsets = {("a", 0): 5, ("a", 1): 7, ("b", 3): 0}
    raw = json.loads(json.dumps(encode_offsets(offsets)))
    assert raw == {"a": {"0": 5, "1": 7}, "b": {"3": 0}}
    assert decode_offsets(raw) == offsets


def test_max_rows_is_split_in_proportion_to_lag() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 300, ("t", 1): 100, ("t", 2): 100}
    end = cap_by_max_rows(start, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 25, ("t", 2): 100}


def test_everything_is_taken_when_the_lag_fits_the_limit() -> None:
    start = {("t", 0): 3}
    latest = {("t", 0): 10}
    assert cap_by_max_rows(start, latest, 100) == latest


@given(
    lags=st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=8),
    limit=st.integers(min_value=1, max_value=1000),
)
def test_capped_batches_use_the_budget_and_never_pass_latest(lags: list[int], limit: int) -> None:
    start = {("t", q): 10 for q in range(len(lags))}
    latest = {("t", q): 10 + lag for q, lag in enumerate(lags)}
    end = cap_by_max_rows(start, latest, limit)
    taken = sum(end[k] - start[k] for k in start)
    assert taken == min(limit, sum(lags))
    assert all(start[k] <= end[k] <= latest[k] for k in start)


def test_min_partitions_splits_big_ranges_into_contiguous_pieces() -> None:
    ranges = [QueueRange("t", 0, 0, 90), QueueRange("t", 1, 0, 10)]
    split = split_ranges(ranges, 10)
    queue0 = [r for r in split if r.queue_id == 0]
    assert len(queue0) == 9
    assert queue0[0].start == 0 and queue0[-1].end == 90
    assert all(a.end == b.start for a, b in itertools.pairwise(queue0))
    assert sum(r.size for r in split) == 100


def test_min_partitions_below_the_range_count_changes_nothing() -> None:
    ranges = [QueueRange("t", 0, 0, 90), QueueRange("t", 1, 0, 10)]
    assert split_ranges(ranges, 2) == ranges


def test_retention_loss_fails_clearly_by_default() -> None:
    with pytest.raises(DataLossError, match=r"offsets \[0, 40\) of t/0 were removed"):
        check_retention([QueueRange("t", 0, 0, 100)], bounds(("t", 0, 40, 100)), True)


def test_retention_loss_is_skipped_when_allowed(caplog: pytest.LogCaptureFixture) -> None:
    kept = check_retention([QueueRange("t", 0, 0, 100)], bounds(("t", 0, 40, 100)), False)
    assert kept == [QueueRange("t", 0, 40, 100)]
    assert "removed by retention" in caplog.text


def test_explicit_offsets_and_specials_resolve_per_queue() -> None:
    spec = parse_offset_spec("startingOffsets", '{"t": {"0": 12, "1": -2}}', LATEST, True)
    b = bounds(("t", 0, 0, 50), ("t", 1, 5, 50), ("t", 2, 0, 50))
    assert resolve_offsets(spec, b) == {("t", 0): 12, ("t", 1): 5, ("t", 2): 50}
    assert resolve_offsets(OffsetSpec(EARLIEST), b)[("t", 1)] == 5


def test_a_queue_new_to_the_query_starts_at_its_earliest_offset() -> None:
    b = bounds(("t", 0, 0, 10), ("t", 1, 4, 9))
    ranges = plan_ranges({("t", 0): 6}, {("t", 0): 10, ("t", 1): 9}, b)
    assert ranges == [QueueRange("t", 0, 6, 10), QueueRange("t", 1, 4, 9)]
