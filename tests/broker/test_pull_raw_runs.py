"""The raw pull read (store.get_raw) over runs of adjacent records: one copy per run, every
record checked against its ConsumeQueue unit (size and magic), body bytes counted, gaps split
runs, and a unit that disagrees with the log is never returned unchecked."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pytest
from wharf.store.codec.layout import MESSAGE_MAGIC_CODE
from wharf.store.codec.records import encode_batch
from wharf.store.errors import CorruptRecordError
from wharf.store.model import MessageInput
from wharf.store.read import get_raw

TAGS = ["a", "b", "c"]


@dataclass
class FakeLog:
    """A commit log over one in-memory buffer starting at offset ``base``; ``read_message``
    stands for the checked single-record read of the fallback path."""

    data: bytes
    base: int = 0
    min_offset: int = 0
    single_reads: int = 0

    def read_bytes(self, offset: int, size: int) -> bytes | None:
        start = offset - self.base
        if offset < self.min_offset or start < 0 or start + size > len(self.data):
            return None
        return self.data[start : start + size]

    def read_message(self, offset: int, size: int) -> object | None:
        """As CommitLog.read_message: CorruptRecordError if the record there is not ``size``
        bytes long (or not a message)."""
        self.single_reads += 1
        data = self.read_bytes(offset, size)
        if data is None:
            return None
        total, magic = struct.unpack_from(">iI", self.data, offset - self.base)
        if total != size or magic != MESSAGE_MAGIC_CODE:
            raise CorruptRecordError(offset, "record fields do not match the offset/size asked")
        return data


def records(count: int, start: int = 4096) -> bytes:
    inputs = [
        MessageInput(b"x" * (10 + i % 50), {"UNIQ_KEY": f"U{i}", "TAGS": TAGS[i % 3]})
        for i in range(count)
    ]
    return encode_batch("t", 0, 0, inputs, start, 1_700_000_000_000, "10.0.0.1:1", 1 << 20).data


def units_of(data: bytes, start: int = 4096) -> list[tuple[int, int]]:
    units, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        units.append((start + pos, size))
        pos += size
    return units


def test_adjacent_records_are_one_copy_with_their_body_bytes() -> None:
    data = records(300)  # ~37 KiB: one run, whatever the old 1 MiB run cap
    log = FakeLog(data, base=4096)
    chunks, count, body_bytes, missing = get_raw._read_runs(log, *get_raw.runs_of(units_of(data)))  # type: ignore[arg-type]
    assert chunks == [data] and count == 300 and missing == 0
    assert body_bytes == sum(10 + i % 50 for i in range(300))
    assert log.single_reads == 0


def test_gaps_between_records_split_runs() -> None:
    first, second = records(60), records(60, start=50_000)
    log = FakeLog(first + b"\0" * (50_000 - 4096 - len(first)) + second, base=4096)
    units = units_of(first) + units_of(second, start=50_000)
    chunks, count, _, missing = get_raw._read_runs(log, *get_raw.runs_of(units))  # type: ignore[arg-type]
    assert chunks == [first, second] and count == 120 and missing == 0


@pytest.mark.parametrize("damage", ["size", "magic", "tiny"])
def test_a_unit_that_disagrees_with_the_log_is_reported_not_returned(damage: str) -> None:
    data = records(100)
    units = units_of(data)
    bad = {"size": 50, "magic": 70, "tiny": 99}[damage]
    if damage == "size":
        units[bad] = (units[bad][0], units[bad][1] + 1)
    elif damage == "magic":
        at = units[bad][0] - 4096 + 4
        data = data[:at] + b"\0\0\0\0" + data[at + 4 :]
    else:  # a unit too small to hold a record header
        units[bad] = (units[bad][0], 8)
    log = FakeLog(data, base=4096)
    # The run holding the bad unit fails the one-unpack check and is re-read record by record
    # with the checked read, which reports the corruption (DATA_LOSS at the broker).
    with pytest.raises(CorruptRecordError) as raised:
        get_raw._read_runs(log, *get_raw.runs_of(units))  # type: ignore[arg-type]
    assert raised.value.offset == units[bad][0]
    assert log.single_reads == bad + 1
