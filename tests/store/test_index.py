"""IndexFile / IndexService against a dict oracle: tiny slot tables force collision chains, tiny
files force rolling, and everything must survive a reopen and a truncation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.store.codec.hashes import index_key_hash
from wharf.store.codec.layout import INDEX_HEADER
from wharf.store.index.index_file import IndexFile
from wharf.store.index.index_files import IndexService, build_index_keys, index_file_name

SLOTS = 3
ENTRIES = 9  # 8 usable entries per file: entry 0 terminates chains

KEYS = [f"T#k{i}" for i in range(6)]

operations = st.lists(
    st.tuples(st.sampled_from(KEYS), st.integers(0, 2500)), min_size=1, max_size=60
)


def _run(coro):  # hypothesis + function-scoped event loops do not mix; run our own
    return asyncio.run(coro)


def _load(directory: Path) -> IndexService:
    return IndexService.load_blocking(directory, SLOTS, ENTRIES)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations, window=st.tuples(st.integers(0, 60_000), st.integers(0, 60_000)))
def test_queries_match_a_dict_oracle_across_files_and_reopen(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]], window: tuple[int, int]
) -> None:
    directory = tmp_path_factory.mktemp("index")
    service = _load(directory)
    oracle: list[tuple[str, int, int]] = []  # key, offset, store timestamp
    offset, stamp = 0, 1_700_000_000_000
    entries = []
    for key, gap_ms in ops:
        stamp += gap_ms
        entries.append((index_key_hash(key), offset, stamp))
        oracle.append((key, offset, stamp))
        offset += 100
    _run(service.put_entries(entries))
    assert len(service.files) == -(-len(ops) // (ENTRIES - 1))
    service.flush_blocking()
    service.close()

    reopened = _load(directory)
    begin = 1_700_000_000_000 + min(window)
    end = 1_700_000_000_000 + max(window)
    try:
        for key in KEYS:
            topic, _, bare = key.partition("#")
            same_hash = {k for k in KEYS if index_key_hash(k) == index_key_hash(key)}
            everything = reopened.query_offsets(topic, bare, 10_000, 0, 2**62)
            assert sorted(everything) == sorted(o for k, o, _ in oracle if k in same_hash)
            # Time is second-granular: widening by a second must find all of [begin, end] ...
            found = set(reopened.query_offsets(topic, bare, 10_000, begin - 1000, end))
            wanted = {o for k, o, s in oracle if k in same_hash and begin <= s <= end}
            assert wanted <= found
            # ... and never anything outside the widened window.
            stamps = {o: s for _, o, s in oracle}
            assert all(begin - 1000 <= stamps[o] < end + 1000 for o in found)
            # max_num caps the answer.
            assert len(reopened.query_offsets(topic, bare, 2, 0, 2**62)) == min(2, len(everything))
    finally:
        reopened.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations, cut=st.integers(0, 60))
def test_truncation_removes_exactly_the_entries_beyond_the_log_end(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]], cut: int
) -> None:
    directory = tmp_path_factory.mktemp("index")
    service = _load(directory)
    entries = [
        (index_key_hash(key), i * 100, 1_700_000_000_000 + i) for i, (key, _) in enumerate(ops)
    ]
    _run(service.put_entries(entries))
    log_end = cut * 100
    service.truncate_from_physical_blocking(log_end)
    service.close()
    reopened = _load(directory)
    try:
        for key in KEYS:
            same_hash = {k for k in KEYS if index_key_hash(k) == index_key_hash(key)}
            expected = sorted(
                i * 100 for i, (k, _) in enumerate(ops) if k in same_hash and i * 100 < log_end
            )
            assert sorted(reopened.query_offsets("T", key[2:], 10_000, 0, 2**62)) == expected
        # New entries chain correctly after the truncation point.
        _run(reopened.put_entries([(index_key_hash("T#new"), 10**6, 1_800_000_000_000)]))
        assert reopened.query_offsets("T", "new", 10, 0, 2**62) == [10**6]
    finally:
        reopened.close()


def test_header_is_rocketmq_layout_and_entry_zero_is_unused(tmp_path: Path) -> None:
    index = IndexFile.create_blocking(tmp_path / index_file_name(0), 4, 8, 0, 0)
    index.put_entries([(index_key_hash("T#a"), 500, 1_700_000_001_234)])
    index.put_entries([(index_key_hash("T#b"), 900, 1_700_000_003_000)])
    raw = (tmp_path / index_file_name(0)).read_bytes()
    assert len(raw) == 40 + 4 * 4 + 8 * 20
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = INDEX_HEADER.unpack_from(raw)
    assert (begin_ts, end_ts, begin_phy, end_phy) == (
        1_700_000_001_234,
        1_700_000_003_000,
        500,
        900,
    )
    assert index_count == 3  # starts at 1
    assert slot_count == len({index_key_hash("T#a") % 4, index_key_hash("T#b") % 4})
    assert raw[40 + 16 : 40 + 16 + 20] == bytes(20)  # entry 0
    index.close()


def test_reindexing_already_indexed_records_is_skipped(tmp_path: Path) -> None:
    from wharf.store.codec.dispatch import DispatchRequest

    def req(offset: int, keys: list[str], uniq: str = "") -> DispatchRequest:
        return DispatchRequest(
            offset, 100, "T", 0, 0, 1_700_000_000_000, 0, "", keys, uniq, {}, 0, 0
        )

    service = _load(tmp_path)
    first = [req(0, ["a"], "U1"), req(100, ["b", "c"])]
    entries = service.entries_for(first)
    assert len(entries) == 4
    _run(service.put_entries(entries))
    # Recovery re-dispatches the same records plus one new one.
    again = service.entries_for([*first, req(200, ["a"])])
    assert again == [(index_key_hash("T#a"), 200, 1_700_000_000_000)]
    assert build_index_keys("T", "U", ["x", ""]) == ["T#U", "T#x"]
    service.close()


def test_index_files_are_named_by_creation_time_in_order(tmp_path: Path) -> None:
    service = _load(tmp_path)

    async def roll_three() -> None:
        for _ in range(3):
            await service.roll()

    _run(roll_three())
    names = [f.path.name for f in service.files]
    assert names == sorted(names) and len(set(names)) == 3
    assert all(len(n) == 17 and n.isdigit() for n in names)
    service.close()


@settings(max_examples=300, deadline=None)
@given(topic=st.text(min_size=1, max_size=20), key=st.text(max_size=80))
def test_fast_key_hash_equals_the_reference_java_hash(topic: str, key: str) -> None:
    from wharf.store.index.index_files import IndexKeyHasher

    hasher = IndexKeyHasher()
    assert hasher(topic, key) == index_key_hash(f"{topic}#{key}")
    assert hasher(topic, key + "x") == index_key_hash(f"{topic}#{key}x")  # cached prefix
