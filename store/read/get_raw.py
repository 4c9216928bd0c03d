"""The raw pull read: ConsumeQueue units -> tag HASH filter -> stored record bytes, no decode
(RocketMQ's broker sends the CommitLog bytes and its clients decode them with MessageDecoder).

Offsets, statuses and ``next_begin_offset`` are exactly those of
``wharf.store.read.get_message`` (the same ``check_offset`` / ``choose_units`` helpers), with one
difference: records are selected by tag hash only, so a hash collision (Java's
``"Aa".hashCode() == "BB".hashCode()``) is returned and the reader must re-check the exact tag,
as RocketMQ clients do. FOUND therefore means "records returned", not "records matching the
exact tags".

Speed: each run of adjacent records costs one ``read_bytes`` copy (one run is usually the whole
reply: a queue's records are mostly adjacent in the log); each record costs one 12-byte unpack
(TOTALSIZE and MAGICCODE checked against its unit, BODYLENGTH for the metrics) instead of a
full decode into a ``StoredMessage``. A numpy version of the unit choice and of this check
(commit 28a859a) was 5-7x faster in a micro-benchmark, even with a thread contending for the
GIL, but slower inside the broker: 2.5 vs 1.6 us of broker CPU per message at 1024-record
pulls, 6.9 vs 4.9 at 100 (three alternated runs each). The cause was not found; measure numpy
paths in the broker, not only in isolation. The C twins (``_log_scan.c`` ``choose_runs`` and
``check_run``, one call each per pull and per run, no arrays to build) were measured in the
broker: at pulls of 100, 2.5-3.3 -> 1.8-2.1 us of broker CPU a consumed message (8 alternated
rounds, 2026-11-28; tests/bench/README.md "consume").
"""

from __future__ import annotations

import struct
from array import array

from wharf.store import fast
from wharf.store.codec.layout import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    OFFSET_BODY_LENGTH,
    RECORD_FIXED_SIZE,
    partial_struct,
)
from wharf.store.codec.records import record_properties
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import GetStatus, RawGetResult, TagFilter
from wharf.store.queue.consume_queue import ConsumeQueue
from wharf.store.read.filter import MATCH_ALL
from wharf.store.read.get_message import (
    check_offset,
    choose_from_units,
    codes_to_match,
    units_to_scan,
)

# TOTALSIZE, MAGICCODE and BODYLENGTH in one unpack (the rest of the header skipped).
_SIZE_MAGIC_BODY = partial_struct(("TOTAL_SIZE", "MAGIC", "BODY_LENGTH"))
_BODY_LENGTH = struct.Struct(">i")
# A run of adjacent chosen records: (log offset, bytes, first, count), its records' sizes
# being sizes[first:first + count] (int32 in native order, one per chosen unit).
Run = tuple[int, int, int, int]


def get_raw_records(
    queue: ConsumeQueue | None,
    commit_log: CommitLog,
    offset: int,
    max_count: int,
    tag_filter: TagFilter | None,
    max_bytes: int,
) -> RawGetResult:
    early = check_offset(queue, offset)
    if early is not None:
        return RawGetResult(
            early.status, early.next_begin_offset, early.min_offset, early.max_offset
        )
    assert queue is not None
    min_offset, max_offset = queue.min_offset, queue.max_offset
    choosing = tag_filter or MATCH_ALL
    unit_bytes = units_to_scan(queue, offset, max_count, choosing)
    if not unit_bytes:
        return RawGetResult(GetStatus.OFFSET_FOUND_NULL, offset + 1, min_offset, max_offset)
    runs, sizes, scanned, removed_first = _choose_runs(
        unit_bytes, max_count, max_bytes, commit_log.min_offset, codes_to_match(choosing)
    )
    chunks, count, body_bytes, missing = _read_runs(commit_log, runs, sizes)
    if tag_filter is not None and tag_filter.sql is not None and count:
        # Raw records go out undecoded, but a SQL92 filter is the broker's to apply: decode
        # each record's properties once (what the filter costs, ~2 us a record here).
        chunks, count, body_bytes = _filter_records(chunks, tag_filter)
    if count:
        status = GetStatus.FOUND
    elif removed_first or missing:
        status = GetStatus.MESSAGE_WAS_REMOVING
    else:
        status = GetStatus.NO_MATCHED_MESSAGE
    records = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return RawGetResult(
        status, offset + scanned, min_offset, max_offset, records, count, body_bytes
    )


def _filter_records(chunks: list[bytes], tag_filter: TagFilter) -> tuple[list[bytes], int, int]:
    """The records of ``chunks`` that ``tag_filter`` passes: (chunks, records, body bytes)."""
    kept: list[bytes] = []
    count = body_bytes = 0
    matches = tag_filter.matches
    for chunk in chunks:
        pos = 0
        while pos < len(chunk):
            size = _SIZE_MAGIC_BODY.unpack_from(chunk, pos)[0]
            if matches(record_properties(chunk, pos)):
                kept.append(chunk[pos : pos + size])
                count += 1
                body_bytes += _BODY_LENGTH.unpack_from(chunk, pos + OFFSET_BODY_LENGTH)[0]
            pos += size
    return kept, count, body_bytes


def choose_runs_python(
    unit_bytes: bytes, max_count: int, max_bytes: int, log_min: int, codes: frozenset[int] | None
) -> tuple[list[Run], bytes, int, bool]:
    """The chosen units in runs of adjacent records: (runs, sizes, units scanned,
    removed_first); the reference of the compiled ``choose_runs``."""
    chosen, scanned, removed_first = choose_from_units(
        unit_bytes, max_count, max_bytes, log_min, codes
    )
    runs, sizes = runs_of(chosen)
    return runs, sizes, scanned, removed_first


def runs_of(chosen: list[tuple[int, int]]) -> tuple[list[Run], bytes]:
    """(log offset, size) units as runs of adjacent records, and their sizes (int32)."""
    runs: list[Run] = []
    i, n = 0, len(chosen)
    while i < n:
        start, size = chosen[i]
        end = start + size
        j = i + 1
        # One run = adjacent records (the whole reply is bounded by max_pull_bytes already).
        while j < n and chosen[j][0] == end:
            end += chosen[j][1]
            j += 1
        runs.append((start, end - start, i, j - i))
        i = j
    return runs, array("i", [size for _, size in chosen]).tobytes()


def _read_runs(
    commit_log: CommitLog, runs: list[Run], sizes: bytes
) -> tuple[list[bytes], int, int, int]:
    """(chunks of whole records, records, body bytes, records that could not be read)."""
    chunks: list[bytes] = []
    count = body_bytes = missing = 0
    for start, length, first, run_count in runs:
        chunk = _read_or_none(commit_log, start, length)
        bodies = -1 if chunk is None else _check_run(chunk, sizes, first, run_count)
        if bodies >= 0:
            chunks.append(chunk)  # type: ignore[arg-type]  # not None when bodies >= 0
            count += run_count
            body_bytes += bodies
            continue
        # Not one readable range (retention deleted part of it, or it spans segments), or a
        # unit disagrees with the log: record by record, with the full checked read.
        phy_offset = start
        for record_size in memoryview(sizes).cast("i")[first : first + run_count]:
            record = _read_one(commit_log, phy_offset, record_size)
            if record is None:
                missing += 1
            else:
                chunks.append(record)
                count += 1
                body_bytes += _BODY_LENGTH.unpack_from(record, OFFSET_BODY_LENGTH)[0]
            phy_offset += record_size
    return chunks, count, body_bytes, missing


def check_run_python(chunk: bytes, sizes: bytes, first: int, count: int) -> int:
    """Sum of BODYLENGTHs if ``chunk`` holds, back to back, messages of the sizes
    sizes[first:first + count], else -1 (the caller falls back to checked single reads); the
    reference of the compiled ``check_run``."""
    pos = bodies = 0
    unpack = _SIZE_MAGIC_BODY.unpack_from
    last = len(chunk) - RECORD_FIXED_SIZE  # a record starting later cannot be whole
    for size in memoryview(sizes).cast("i")[first : first + count]:
        if pos > last:
            return -1
        total, magic, body = unpack(chunk, pos)
        if (
            total != size
            or size < RECORD_FIXED_SIZE
            or (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2)
        ):
            return -1
        bodies += body
        pos += size
    return bodies


# The compiled twins (store/fast/_log_scan.c; tests/store/test_fast_pull_runs.py compares
# them with the references): at pulls of 100 the Python loops above were a quarter of the
# broker's CPU in a consume run (py-spy, 2026-11-28).
_COMPILED = fast.load("_log_scan")
_choose_runs = choose_runs_python if _COMPILED is None else _COMPILED.choose_runs
_check_run = check_run_python if _COMPILED is None else _COMPILED.check_run


def _read_one(commit_log: CommitLog, offset: int, size: int) -> bytes | None:
    """One record's bytes, validated like the decoding path (CorruptRecordError if the unit
    disagrees with the log; None if deleted meanwhile)."""
    try:
        if commit_log.read_message(offset, size) is None:
            return None
    except ValueError:  # its segment was unmapped by retention meanwhile
        return None
    return _read_or_none(commit_log, offset, size)


def _read_or_none(commit_log: CommitLog, offset: int, size: int) -> bytes | None:
    """``read_bytes``, with a segment that retention unmapped between lookup and copy treated
    like a deleted range."""
    try:
        return commit_log.read_bytes(offset, size)
    except ValueError:
        return None
