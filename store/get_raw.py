"""The raw pull read: ConsumeQueue units -> tag HASH filter -> stored record bytes, no decode
(RocketMQ's broker sends the CommitLog bytes and its clients decode them with MessageDecoder).

Offsets, statuses and ``next_begin_offset`` are exactly those of ``store.get_message`` (the
same ``check_offset`` and unit-selection rules), with one difference: records are selected by
tag hash only, so a hash collision (Java's ``"Aa".hashCode() == "BB".hashCode()``) is returned
and the reader must re-check the exact tag, as RocketMQ clients do. FOUND therefore means
"records returned", not "records matching the exact tags".

Speed: each run of adjacent records costs one ``read_bytes`` copy (one run is usually the
whole reply: a queue's records are mostly adjacent in the log). Big pulls do no per-record
Python work: the units are selected and every record's TOTALSIZE / MAGICCODE / BODYLENGTH is
checked against its unit with numpy (``_choose_vectorized``, ``_check_run_vectorized``:
~0.15-0.2 ms for 1024 records instead of 1.2-2 ms of Python loops). Small pulls, where numpy's
fixed cost would dominate, use the scalar loops of ``store.get_message``.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass

import numpy as np

from store.commit_log import CommitLog
from store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from store.filter import MATCH_ALL
from store.format import MESSAGE_MAGIC_CODE, RECORD_FIXED_SIZE
from store.get_message import MIN_FILTER_SCAN_UNITS, check_offset, choose_units
from store.model import GetStatus, TagFilter

# TOTALSIZE, MAGICCODE at 0; BODYLENGTH at 84 (see store.format's record diagram).
_SIZE_MAGIC = struct.Struct(">iI")
_BODY_LENGTH = struct.Struct(">i")
_BODY_LENGTH_POS = 84
# Below this many units the scalar loops win: numpy's fixed cost is ~50 us per pull here;
# measured per pull of 1 KiB records, scalar vs numpy: 32 -> 24 vs 55 us, 100 -> 67 vs 64 us,
# 256 -> 163 vs 78 us, 1024 -> ~1.2-2 ms vs ~0.15-0.2 ms.
VECTOR_MIN_UNITS = 96
# ConsumeQueue unit as numpy sees it (store.format.CQ_UNIT ">qiq").
_UNIT_DTYPE = np.dtype([("phy", ">i8"), ("size", ">i4"), ("tag", ">i8")])
# Per record: bytes 0-7 (TOTALSIZE, MAGICCODE) and 84-87 (BODYLENGTH), gathered in one go.
_CHECK_BYTES = np.r_[0:8, 84:88]
_CHECK_DTYPE = np.dtype([("total", ">i4"), ("magic", ">u4"), ("body", ">i4")])


@dataclass(slots=True)
class RawGetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: bytes = b""  # whole stored records, concatenated in queue-offset order
    count: int = 0  # records in ``records``
    body_bytes: int = 0  # sum of their BODYLENGTH (what the view path counts as bytes out)


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
    tag_filter = tag_filter or MATCH_ALL
    if max_count >= VECTOR_MIN_UNITS:
        vector = _choose_vectorized(queue, commit_log, offset, max_count, tag_filter, max_bytes)
        if vector is None:
            return RawGetResult(GetStatus.OFFSET_FOUND_NULL, offset + 1, min_offset, max_offset)
        phys, sizes, scanned, removed_first = vector
        chunks, count, body_bytes, missing = _read_runs_vectorized(commit_log, phys, sizes)
    else:
        choice = choose_units(queue, commit_log, offset, max_count, tag_filter, max_bytes)
        if choice is None:
            return RawGetResult(GetStatus.OFFSET_FOUND_NULL, offset + 1, min_offset, max_offset)
        chosen, scanned, removed_first = choice
        chunks, count, body_bytes, missing = _read_runs(commit_log, chosen)
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


def _choose_vectorized(
    queue: ConsumeQueue,
    commit_log: CommitLog,
    offset: int,
    max_count: int,
    tag_filter: TagFilter,
    max_bytes: int,
) -> tuple[np.ndarray, np.ndarray, int, bool] | None:
    """``store.get_message.choose_units`` with numpy: the same choice for the same units
    (as arrays of commit log offsets and sizes), pinned by tests/broker/test_pull_raw_vector.py."""
    match_all = tag_filter.match_all
    scan = max_count if match_all else max(MIN_FILTER_SCAN_UNITS, max_count)
    unit_bytes = queue.read_unit_bytes(offset, scan)
    if not unit_bytes:
        return None
    units = np.frombuffer(unit_bytes, _UNIT_DTYPE)
    phy = units["phy"].astype(np.int64)
    size = units["size"].astype(np.int64)
    keep = size != BLANK_UNIT_SIZE
    if not match_all:
        keep &= np.isin(units["tag"], np.fromiter(tag_filter.codes, np.int64))
    live = keep & (phy >= commit_log.min_offset)
    if live.all():
        # The common case (no blank, filtered or deleted unit): the loop stops before unit
        # i >= 1 once i units are chosen or the bytes through unit i exceed the budget.
        over_budget = int(np.searchsorted(np.cumsum(size), max_bytes, side="right"))
        scanned = max(1, min(len(size), max_count, over_budget))
        return phy[:scanned], size[:scanned], scanned, False
    live_size = np.where(live, size, 0)
    count_before = np.cumsum(live) - live  # units chosen before this one
    bytes_before = np.cumsum(live_size) - live_size
    # The scalar loop stops BEFORE a unit once something is chosen and the count or the byte
    # budget (with this unit's size, chosen or not) would be exceeded.
    stop = (count_before > 0) & ((count_before >= max_count) | (bytes_before + size > max_bytes))
    scanned = int(np.argmax(stop)) if stop.any() else len(units)
    live = live[:scanned]
    removed_first = bool(np.any(keep[:scanned] & ~live & (count_before[:scanned] == 0)))
    return phy[:scanned][live], size[:scanned][live], scanned, removed_first


def _read_runs_vectorized(
    commit_log: CommitLog, phys: np.ndarray, sizes: np.ndarray
) -> tuple[list[bytes], int, int, int]:
    """``_read_runs`` over arrays: runs of adjacent records found and checked with numpy."""
    if not len(phys):
        return [], 0, 0, 0
    breaks = np.flatnonzero(phys[1:] != phys[:-1] + sizes[:-1]) + 1
    bounds = [0, *breaks.tolist(), len(phys)]
    chunks: list[bytes] = []
    count = body_bytes = missing = 0
    for i, j in itertools.pairwise(bounds):
        start = int(phys[i])
        run_sizes = sizes[i:j]
        chunk = _read_or_none(commit_log, start, int(run_sizes.sum()))
        bodies = None if chunk is None else _check_run_vectorized(chunk, run_sizes)
        if bodies is not None:
            assert chunk is not None
            chunks.append(chunk)
            count += j - i
            body_bytes += bodies
            continue
        run = list(zip(phys[i:j].tolist(), run_sizes.tolist(), strict=True))
        more_chunks, more, more_bodies, more_missing = _read_runs(commit_log, run)
        chunks.extend(more_chunks)
        count += more
        body_bytes += more_bodies
        missing += more_missing
    return chunks, count, body_bytes, missing


def _read_runs(
    commit_log: CommitLog, chosen: list[tuple[int, int]]
) -> tuple[list[bytes], int, int, int]:
    """(chunks of whole records, records, body bytes, records that could not be read)."""
    chunks: list[bytes] = []
    count = body_bytes = missing = 0
    i, n = 0, len(chosen)
    while i < n:
        start, size = chosen[i]
        end = start + size
        j = i + 1
        # One run = adjacent records (the reply is bounded by max_pull_bytes already).
        while j < n and chosen[j][0] == end:
            end += chosen[j][1]
            j += 1
        chunk = _read_or_none(commit_log, start, end - start)
        run = chosen[i:j]
        bodies = None if chunk is None else _check_run(chunk, run)
        if bodies is not None:
            assert chunk is not None
            chunks.append(chunk)
            count += j - i
            body_bytes += bodies
        else:
            # Not one readable range (retention deleted part of it, or it spans segments), or
            # a unit disagrees with the log: record by record, with the full checked read.
            for phy_offset, record_size in run:
                record = _read_one(commit_log, phy_offset, record_size)
                if record is None:
                    missing += 1
                else:
                    chunks.append(record)
                    count += 1
                    body_bytes += _BODY_LENGTH.unpack_from(record, _BODY_LENGTH_POS)[0]
        i = j
    return chunks, count, body_bytes, missing


def _check_run(chunk: bytes, run: list[tuple[int, int]]) -> int | None:
    """Sum of BODYLENGTHs if every record in ``chunk`` is a message of its unit's size, else
    None (the caller falls back to checked single reads)."""
    pos = bodies = 0
    size_magic = _SIZE_MAGIC.unpack_from
    body_length = _BODY_LENGTH.unpack_from
    for _, size in run:
        total, magic = size_magic(chunk, pos)
        if total != size or magic != MESSAGE_MAGIC_CODE or size < RECORD_FIXED_SIZE:
            return None
        bodies += body_length(chunk, pos + _BODY_LENGTH_POS)[0]
        pos += size
    return bodies


def _check_run_vectorized(chunk: bytes, sizes: np.ndarray) -> int | None:
    """``_check_run`` with numpy: every record's TOTALSIZE / MAGICCODE against its unit.
    ``chunk`` holds exactly the run (``len(chunk) == sizes.sum()``)."""
    if int(sizes.min()) < RECORD_FIXED_SIZE:
        return None  # not a message record: the gather below could run past the chunk
    starts = np.cumsum(sizes) - sizes
    header = np.frombuffer(chunk, np.uint8)[starts[:, None] + _CHECK_BYTES].view(_CHECK_DTYPE)
    if not ((header["total"][:, 0] == sizes) & (header["magic"][:, 0] == MESSAGE_MAGIC_CODE)).all():
        return None
    return int(header["body"].sum())


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
