"""Write a dispatch chunk's IndexFile entries in one vectorized pass (numpy).

Entries travel as ``IndexColumns`` (int64 arrays: the dispatch decoder produces them that
way). The scalar writer (``IndexFile._put_entries_scalar``) costs a slot read, an entry pack and a
slot write per key, in Python. Here the chain links are computed for the whole batch at once:

- an entry's prevIndex is the previous entry of the batch with the same slot, or, for the first
  entry of a slot in the batch, the slot's current value if that is a valid entry number;
- each slot touched ends up holding the number of its last entry in the batch;
- entries are packed into one big-endian structured array and copied in with one slice write.

The bytes written are exactly the scalar writer's (tests compare the two on random batches),
including its treatment of stale slot values: a value is valid if 0 < value < the number of the
entry being written.

``put_entries_columns`` writes a batch with the compiled ``_log_scan.put_index_entries`` where
it is built (one pass in log order, no sort: the numpy pass's stable argsort of the slots was
~130 instructions a message more at 256 topics than at one, whose keys come sorted), else here.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from wharf.store.codec.layout import INDEX_ENTRY_FIELDS, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE
from wharf.store.fast import load
from wharf.store.fast.layout_dtypes import packed

_compiled = load("_log_scan")

_INT_MAX = 0x7FFFFFFF
# keyHash i | phyOffset q | timeDiff i | prevIndex i, big-endian, packed: INDEX_ENTRY.
_ENTRY_DTYPE = packed(
    INDEX_ENTRY_FIELDS,
    {"KEY_HASH": "hash", "PHY_OFFSET": "offset", "TIME_DIFF": "diff", "PREV_INDEX": "prev"},
)
assert _ENTRY_DTYPE.itemsize == INDEX_ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class IndexColumns:
    """Index entries to write, as int64 columns (one element per entry, in write order)."""

    hashes: np.ndarray  # indexKeyHash of "topic#key"
    offsets: np.ndarray  # commit log offset of the record
    stamps: np.ndarray  # store timestamp of the record, ms

    @classmethod
    def from_entries(cls, entries: Sequence[tuple[int, int, int]]) -> IndexColumns:
        if not entries:
            return EMPTY_COLUMNS
        columns = np.array(entries, dtype=np.int64).reshape(len(entries), 3)
        return cls(columns[:, 0], columns[:, 1], columns[:, 2])

    def __len__(self) -> int:
        return len(self.hashes)

    def __getitem__(self, part: slice) -> IndexColumns:
        return IndexColumns(self.hashes[part], self.offsets[part], self.stamps[part])

    def entries(self) -> list[tuple[int, int, int]]:
        return list(
            zip(self.hashes.tolist(), self.offsets.tolist(), self.stamps.tolist(), strict=True)
        )


EMPTY_COLUMNS = IndexColumns(*(np.zeros(0, dtype=np.int64) for _ in range(3)))


def put_entries_columns(
    mm: mmap.mmap,
    slot_num: int,
    entries_pos: int,
    first_number: int,
    begin_timestamp: int,
    entries: IndexColumns,
) -> int:
    """``put_entries_vectorized``, compiled where built. Returns how many slots became used."""
    if _compiled is None:
        return put_entries_vectorized(
            mm, slot_num, entries_pos, first_number, begin_timestamp, entries
        )
    return _compiled.put_index_entries(
        mm,
        slot_num,
        entries_pos,
        first_number,
        begin_timestamp,
        np.ascontiguousarray(entries.hashes, dtype=np.int64),
        np.ascontiguousarray(entries.offsets, dtype=np.int64),
        np.ascontiguousarray(entries.stamps, dtype=np.int64),
    )


def put_entries_vectorized(
    mm: mmap.mmap,
    slot_num: int,
    entries_pos: int,
    first_number: int,
    begin_timestamp: int,
    entries: IndexColumns,
) -> int:
    """Write ``entries`` as entry numbers ``first_number...`` and update their slots.
    Returns how many slots became used."""
    count = len(entries)
    hashes = entries.hashes
    slots = hashes % slot_num
    numbers = np.arange(first_number, first_number + count, dtype=np.int64)

    # Group the batch by slot (stable: log order inside a slot) to link each chain.
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    same_as_before = sorted_slots[1:] == sorted_slots[:-1]
    starts = np.concatenate(([True], ~same_as_before))  # first entry of a slot in the batch
    ends = np.concatenate((~same_as_before, [True]))  # last entry of a slot in the batch

    prev = np.empty(count, dtype=np.int64)
    follower = order[1:][same_as_before]
    prev[follower] = numbers[order[:-1][same_as_before]]

    slot_table = np.frombuffer(mm, dtype=">i4", count=slot_num, offset=INDEX_HEADER_SIZE)
    try:
        heads = order[starts]
        current = slot_table[slots[heads]].astype(np.int64)
        valid = (current > 0) & (current < numbers[heads])
        prev[heads] = np.where(valid, current, 0)
        new_slots = int(np.count_nonzero(~valid))
        tails = order[ends]
        slot_table[slots[tails]] = numbers[tails]
    finally:
        del slot_table  # release the buffer export: the mmap must stay closable

    packed = np.empty(count, dtype=_ENTRY_DTYPE)
    packed["hash"] = hashes
    packed["offset"] = entries.offsets
    if begin_timestamp > 0:
        diffs = (entries.stamps - begin_timestamp) // 1000
        packed["diff"] = np.minimum(np.maximum(diffs, 0, out=diffs), _INT_MAX, out=diffs)
    else:
        packed["diff"] = 0
    packed["prev"] = prev
    start = entries_pos + first_number * _ENTRY_DTYPE.itemsize
    mm[start : start + count * INDEX_ENTRY_SIZE] = packed.tobytes()
    return new_slots
