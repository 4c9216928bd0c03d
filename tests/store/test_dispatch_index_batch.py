"""The vectorized index writers write exactly what the reference (scalar) code writes:
``index_key_hashes`` == ``index_key_hash`` per key, and ``put_entries_vectorized`` (numpy) and
the compiled ``put_index_entries`` leave the IndexFile byte-for-byte as the scalar entry loop
does (chains, slots, header), including over stale slot values left by a crash."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import wharf.store.index.index_file as index_file_module
from hypothesis import example, given, settings
from hypothesis import strategies as st
from wharf.store.codec.hashes import index_key_hash
from wharf.store.codec.layout import INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_SLOT
from wharf.store.fast import index_batch
from wharf.store.fast.index_batch import IndexColumns
from wharf.store.fast.index_hash import index_key_hashes
from wharf.store.index.index_file import IndexFile

key_text = st.text(
    alphabet=st.sampled_from("abcXYZ09#-_ é€😀\x00"), min_size=0, max_size=12
) | st.from_regex(r"[0-9A-F]{32}", fullmatch=True)


@given(st.lists(key_text, max_size=60))
def test_batch_hashes_match_the_reference_hash(keys: list[str]) -> None:
    assert index_key_hashes(keys) == [index_key_hash(key) for key in keys]


def test_batch_hashes_of_known_values() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: RocketMQ maps it to 0.
    assert index_key_hashes(["polygenelubricants", "TagA", "T#k"]) == [
        0,
        2598919,
        index_key_hash("T#k"),
    ]


entry = st.tuples(
    st.integers(0, 0x7FFFFFFF),  # key hash (abs'd)
    st.integers(0, 1 << 40),  # commit log offset
    st.integers(1_700_000_000_000, 1_700_000_000_000 + 10**7),  # store time ms
)


@contextlib.contextmanager
def _twin(name: str) -> Iterator[None]:
    """The batch writer ``IndexFile.put_entries`` uses: the scalar loop, numpy or compiled."""
    saved = index_file_module.VECTORIZE_FROM, index_batch._compiled
    index_file_module.VECTORIZE_FROM = 10**9 if name == "scalar" else 1
    if name != "compiled":
        index_batch._compiled = None
    try:
        yield
    finally:
        index_file_module.VECTORIZE_FROM, index_batch._compiled = saved


@settings(max_examples=60, deadline=None)
@given(
    slot_num=st.integers(1, 9),
    stale_slots=st.lists(st.integers(-3, 80), min_size=9, max_size=9),
    batches=st.lists(st.lists(entry, min_size=1, max_size=40), min_size=1, max_size=4),
    as_columns=st.booleans(),
)
# A stale slot holding exactly the number of the entry written over it: not a valid prevIndex.
@example(1, [1] + [0] * 8, [[(5, 1, 1_700_000_000_000)]], True)
# More entries than the compiled writer asks for ahead (8), each slot's chain of several.
@example(9, [0] * 9, [[(h, 100 + h, 1_700_000_000_000) for h in range(30)]], True)
def test_batch_writers_are_byte_identical_to_the_scalar_loop(
    slot_num: int,
    stale_slots: list[int],
    batches: list[list[tuple[int, int, int]]],
    as_columns: bool,
) -> None:
    # numpy's pass and the compiled one (``put_index_entries``) against the reference loop, on
    # batches with a crash's stale slot values; the compiled one must be built here.
    assert index_batch._compiled is not None
    twins = ("scalar", "numpy", "compiled")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for name in twins:
            index = IndexFile.create_blocking(Path(tmp) / name, slot_num, 64, 0, 0)
            for slot, value in enumerate(stale_slots[:slot_num]):  # a crash's leftovers
                INDEX_SLOT.pack_into(
                    index._mm, INDEX_HEADER_SIZE + slot * INDEX_HASH_SLOT_SIZE, value
                )
            files.append(index)
        scalar = files[0]
        try:
            for batch in batches:
                given_batch = IndexColumns.from_entries(batch) if as_columns else batch
                written = []
                for name, index in zip(twins, files, strict=True):
                    with _twin(name):
                        written.append(index.put_entries(given_batch))
                for name, index, count in zip(twins, files, written, strict=True):
                    assert count == written[0], name
                    assert index._mm[:] == scalar._mm[:], name
                    assert (index.index_count, index.hash_slot_count) == (
                        scalar.index_count,
                        scalar.hash_slot_count,
                    ), name
        finally:
            for index in files:
                index.close()


def test_compiled_writer_refuses_entries_past_the_file(tmp_path: Path) -> None:
    assert index_batch._compiled is not None
    index = IndexFile.create_blocking(tmp_path / "idx", 4, 8, 0, 0)
    try:
        columns = IndexColumns.from_entries([(7, 100 + i, 1_700_000_000_000) for i in range(9)])
        before = index._mm[:]
        with pytest.raises(ValueError, match="outside the index file"):
            index_batch._compiled.put_index_entries(
                index._mm, 4, index._entries_pos, 0, 0,
                columns.hashes.copy(), columns.offsets.copy(), columns.stamps.copy(),
            )  # fmt: skip
        assert index._mm[:] == before  # nothing written
    finally:
        index.close()


def test_vectorized_chains_are_found_by_lookup(tmp_path: Path) -> None:
    index = IndexFile.create_blocking(tmp_path / "idx", 4, 256, 0, 0)
    try:
        keys = [f"T#k{i % 7}" for i in range(100)]
        stamp = 1_700_000_000_000
        entries = [(h, 1000 + i, stamp + i) for i, h in enumerate(index_key_hashes(keys))]
        assert index.put_entries(entries) == 100
        out: list[int] = []
        index.select_phy_offsets(index_key_hash("T#k3"), stamp, stamp + 10**6, 100, out)
        # Same key hash -> same chain; other keys sharing the slot are skipped by hash.
        assert out == [1000 + i for i in reversed(range(100)) if i % 7 == 3]
    finally:
        index.close()
