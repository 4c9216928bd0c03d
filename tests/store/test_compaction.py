"""The kept log and one compaction pass, without a store: records encoded by the codec, the
dirty range from a list (what the service reads on the loop), crashes injected at every step
of the swap."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.store.codec.records import decode_record, encode_batch
from wharf.store.model import MessageInput
from wharf.store.retention.compactor import (
    MAP_ENTRY_BYTES,
    Chunk,
    Pacer,
    compact_blocking,
    key_of,
    key_of_properties,
    split_records,
)
from wharf.store.retention.kept_log import STEPS, GenerationWriter, KeptLog, KeptState

NOW = 1_800_000_000_000


class Crash(Exception):
    """A step's injected failure: the process "dies" there (nothing after it runs)."""


def records(
    values: Sequence[tuple[str | None, str | None]], first: int = 0, stamp: int = NOW
) -> Chunk:
    """(key, value) -> stored records; value None is a tombstone, key None keyless."""
    messages = []
    for key, value in values:
        props = {} if key is None else {"KEYS": key}
        if value is None:
            props["__KAFKA_VALUE"] = "null"
        messages.append(MessageInput(body=(value or "\x00").encode(), properties=props))
    batch = encode_batch("t", 0, first, messages, 0, stamp, "127.0.0.1:1", 1 << 20)
    return split_records(batch.data)


def reader(dirty: Chunk, step: int = 3):
    def read(offset: int, end: int) -> tuple[Chunk, int]:
        chunk = [r for r in dirty if offset <= r[0] < end][:step]
        return chunk, (chunk[-1][0] + 1 if chunk else end)

    return read


def kept_values(kept: KeptLog | None) -> list[tuple[int, str, str]]:
    if kept is None:
        return []
    out = []
    for entries, data in kept.scan():
        for offset, pos, _, _ in entries:
            m = decode_record(data, pos - entries[0][1])
            assert m.queue_offset == offset
            out.append((offset, m.properties.get("KEYS", ""), m.body.decode()))
    return out


def run(
    directory: Path,
    kept: KeptLog | None,
    dirty: Chunk,
    end: int,
    *,
    base: int = 0,
    horizon: int = 0,
    map_bytes: int = 1 << 20,
    fail=None,
) -> KeptLog:
    cleaned = kept.state.cleaned_to if kept is not None else base
    state, _ = compact_blocking(
        kept, directory, base, cleaned, end, reader(dirty),
        delete_horizon_ms=horizon, map_bytes=map_bytes,
        pacer=Pacer(0, lambda: False), fail=fail,
    )  # fmt: skip
    return KeptLog(directory, state)


def test_latest_value_per_key_and_offsets_kept(tmp_path: Path) -> None:
    dirty = records([("a", "1"), ("b", "1"), ("a", "2"), (None, "x"), ("c", "1"), ("b", "2")])
    kept = run(tmp_path, None, dirty, 6)
    assert kept_values(kept) == [(2, "a", "2"), (4, "c", "1"), (5, "b", "2")]
    assert kept.state.cleaned_to == 6
    # a second pass over new records: old kept records superseded only by their own key
    more = records([("c", "2"), ("d", "1")], first=6)
    kept2 = run(tmp_path, kept, more, 8)
    assert kept_values(kept2) == [(2, "a", "2"), (5, "b", "2"), (6, "c", "2"), (7, "d", "1")]


def test_tombstones_stay_until_the_horizon(tmp_path: Path) -> None:
    dirty = records([("a", "1"), ("a", None), ("b", "1")])
    kept = run(tmp_path, None, dirty, 3, horizon=NOW - 1)  # tombstone newer than horizon
    assert [(o, k) for o, k, _ in kept_values(kept)] == [(1, "a"), (2, "b")]
    kept = run(tmp_path, kept, [], 3, horizon=NOW + 1)  # now older: dropped
    assert [(o, k) for o, k, _ in kept_values(kept)] == [(2, "b")]


def test_a_tombstone_s_age_is_its_store_time_not_its_first_pass(tmp_path: Path) -> None:
    """The horizon compares each tombstone's store timestamp: one stored before it goes at
    the first pass that sees it; the pass reports the oldest tombstone it kept (what the
    service waits on to run the pass that drops it)."""
    old = records([("a", "1"), ("a", None)], stamp=NOW - 5_000)
    new = records([("b", "1"), ("b", None), ("c", None)], first=2, stamp=NOW)
    _, figures = compact_blocking(
        None, tmp_path, 0, 0, 5, reader(old + new), delete_horizon_ms=NOW - 1_000,
        map_bytes=1 << 20, pacer=Pacer(0, lambda: False),
    )  # fmt: skip
    assert figures.removed_tombstones == 1  # a's, 5 s old at its first pass
    assert figures.oldest_tombstone_ms == NOW  # b's and c's kept
    _, none = compact_blocking(
        None, tmp_path / "2", 0, 0, 2, reader(old), delete_horizon_ms=NOW - 10_000,
        map_bytes=1 << 20, pacer=Pacer(0, lambda: False),
    )  # fmt: skip
    assert none.oldest_tombstone_ms == NOW - 5_000
    assert compact_blocking(
        None, tmp_path / "3", 0, 0, 1, reader(old[:1]), delete_horizon_ms=0,
        map_bytes=1 << 20, pacer=Pacer(0, lambda: False),
    )[1].oldest_tombstone_ms == -1  # fmt: skip


def test_records_below_the_log_start_are_dropped(tmp_path: Path) -> None:
    kept = run(tmp_path, None, records([("a", "1"), ("b", "1"), ("c", "1")]), 3)
    kept = run(tmp_path, kept, [], 3, base=2)
    assert kept_values(kept) == [(2, "c", "1")]
    assert kept.state.base == 2


def test_a_full_map_stops_the_pass_and_the_next_goes_on(tmp_path: Path) -> None:
    values = [(f"k{i % 5}", str(i)) for i in range(20)]
    dirty = records(values)
    kept = run(tmp_path, None, dirty, 20, map_bytes=3 * MAP_ENTRY_BYTES)
    assert kept.state.cleaned_to == 3  # the 4th key found the map full
    passes = 1
    while kept.state.cleaned_to < 20:
        kept = run(tmp_path, kept, dirty, 20, map_bytes=3 * MAP_ENTRY_BYTES)
        passes += 1
    assert passes > 2
    assert sorted(kept_values(kept)) == [(15 + i, f"k{i}", str(15 + i)) for i in range(5)]


def test_find_gives_the_next_kept_record(tmp_path: Path) -> None:
    kept = run(tmp_path, None, records([("a", "1"), ("a", "2"), ("b", "1"), ("b", "2")]), 4)
    assert [e[0] for e in kept.find(0, 10, 1 << 20)] == [1, 3]
    assert [e[0] for e in kept.find(2, 10, 1 << 20)] == [3]
    assert kept.find(4, 10, 1 << 20) == []
    assert [e[0] for e in kept.find(0, 1, 1 << 20)] == [1]


@pytest.mark.parametrize("killed", [False, True])
@pytest.mark.parametrize("step", STEPS[:-1])
def test_a_crash_at_any_step_leaves_the_old_or_the_new_log(
    tmp_path: Path, step: str, killed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``killed``: nothing runs after the step (kill -9: the pass's files stay behind for
    the next load to remove); else the pass's own clean-up runs (an I/O error)."""
    if killed:
        monkeypatch.setattr(GenerationWriter, "abort_blocking", GenerationWriter._close)
    old = run(tmp_path, None, records([("a", "1"), ("b", "1")]), 2)
    old_values = kept_values(old)
    more = records([("a", "2"), ("c", "1")], first=2)

    def fail(at: str) -> None:
        if at == step:
            raise Crash(at)

    with pytest.raises(Crash):
        run(tmp_path, old, more, 4, fail=fail)
    old.close()
    reopened = KeptLog.load_blocking(tmp_path)
    assert reopened is not None
    new_values = [(1, "b", "1"), (2, "a", "2"), (3, "c", "1")]
    if reopened.state.generation == 1:
        assert kept_values(reopened) == old_values and reopened.state.cleaned_to == 2
    else:
        assert kept_values(reopened) == new_values and reopened.state.cleaned_to == 4
        assert step in ("dir-sync",)  # only a crash after the rename sees the new one
    names = {p.name for p in tmp_path.iterdir()}
    gen = reopened.state.generation
    assert names == {"CURRENT", f"{gen:020d}.log", f"{gen:020d}.idx"}


def test_a_damaged_current_is_refused(tmp_path: Path) -> None:
    kept = run(tmp_path, None, records([("a", "1")]), 1)
    kept.close()
    data = bytearray((tmp_path / "CURRENT").read_bytes())
    data[20] ^= 1
    (tmp_path / "CURRENT").write_bytes(bytes(data))
    with pytest.raises(Exception, match="CRC"):
        KeptLog.load_blocking(tmp_path)


def test_state_round_trips() -> None:
    state = KeptState(3, 10, 99, 7, 1234)
    assert KeptState.decode(state.encode(), "x") == state


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["KEYS", "__KAFKA_KEY", "__KAFKA_VALUE", "TAGS", "xKEYS", "KEYSx"]),
            st.text(
                st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]),
                max_size=12,
            ),
        ),
        max_size=5,
    )
)
@settings(max_examples=100, deadline=None)
def test_the_byte_search_key_agrees_with_the_decoded_properties(
    pairs: list[tuple[str, str]],
) -> None:
    props = dict(pairs)
    message = MessageInput(b"body", props)
    data = encode_batch("t", 0, 0, [message], 0, NOW, "127.0.0.1:1", 1 << 20).data
    assert key_of(data) == key_of_properties(data)
