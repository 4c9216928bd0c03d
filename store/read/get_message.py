"""The pull read path: ConsumeQueue units -> tag hash filter -> CommitLog records -> exact tag
check (RocketMQ's DefaultMessageStore.getMessage).

Statuses and ``next_begin_offset`` follow RocketMQ (nextOffsetCorrection as on a master):

- unknown or empty queue: NO_MESSAGE_IN_QUEUE, next 0;
- offset < min: OFFSET_TOO_SMALL, next = min;  offset == max: OFFSET_OVERFLOW_ONE, next = offset;
- offset > max: OFFSET_OVERFLOW_BADLY, next = min if min == 0 else max;
- otherwise units are scanned from offset (at most ``max_count`` units when everything matches,
  at least 800 with a filter, as RocketMQ's maxFilterMessageCount) and next = offset + units
  scanned; FOUND if anything matched, MESSAGE_WAS_REMOVING if the first candidates pointed at
  deleted log data, else NO_MATCHED_MESSAGE.

Speed: units selected for one pull usually point at consecutive records (a producer's batch),
so each run of adjacent records is located with ONE segment lookup and decoded straight from the
segment map by the batch decoder (``decode_records``: bodies and texts are the only copies),
instead of one lookup + copy + decode call per message.
"""

from __future__ import annotations

from wharf.store.codec.records import decode_records
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import GetResult, GetStatus, StoredMessage, TagFilter
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE, UNIT, ConsumeQueue
from wharf.store.read.filter import MATCH_ALL

# RocketMQ's maxFilterMessageCount: a filtered pull scans at least this many units.
MIN_FILTER_SCAN_UNITS = 800
# Adjacent records are read together up to this many bytes (one copy, bounded memory).
MAX_RUN_BYTES = 1024 * 1024


def get_messages(
    queue: ConsumeQueue | None,
    commit_log: CommitLog,
    offset: int,
    max_count: int,
    tag_filter: TagFilter | None,
    max_bytes: int,
) -> GetResult:
    early = check_offset(queue, offset)
    if early is not None:
        return early
    assert queue is not None
    min_offset, max_offset = queue.min_offset, queue.max_offset
    tag_filter = tag_filter or MATCH_ALL
    choice = choose_units(queue, commit_log, offset, max_count, tag_filter, max_bytes)
    if choice is None:
        return GetResult(GetStatus.OFFSET_FOUND_NULL, offset + 1, min_offset, max_offset)
    chosen, scanned, removed_first = choice

    # Pass 2: read adjacent records together and decode them.
    messages, missing = _read_chosen(commit_log, chosen)
    if not tag_filter.match_all:
        matches = tag_filter.matches
        messages = [m for m in messages if matches(m.properties)]
    if messages:
        status = GetStatus.FOUND
    elif removed_first or missing:
        status = GetStatus.MESSAGE_WAS_REMOVING
    else:
        status = GetStatus.NO_MATCHED_MESSAGE
    return GetResult(status, offset + scanned, min_offset, max_offset, messages)


def check_offset(queue: ConsumeQueue | None, offset: int) -> GetResult | None:
    """The result for an offset with nothing to read (no queue, empty, out of range), else
    None. Shared by ``get_messages`` and the raw read (``wharf.store.read.get_raw``)."""
    if queue is None:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
    min_offset, max_offset = queue.min_offset, queue.max_offset
    if max_offset == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
    if offset < min_offset:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
    if offset == max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if offset > max_offset:
        next_offset = min_offset if min_offset == 0 else max_offset
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, next_offset, min_offset, max_offset)
    return None


def choose_units(
    queue: ConsumeQueue,
    commit_log: CommitLog,
    offset: int,
    max_count: int,
    tag_filter: TagFilter,
    max_bytes: int,
) -> tuple[list[tuple[int, int]], int, bool] | None:
    """Pass 1 of a pull: (chosen (commit log offset, size) by tag HASH and size limits, units
    scanned, whether the first candidates pointed at deleted log data); None when no unit
    could be read at ``offset``. No CommitLog access beyond its min offset."""
    unit_bytes = units_to_scan(queue, offset, max_count, tag_filter)
    if not unit_bytes:
        return None
    return choose_from_units(
        unit_bytes, max_count, max_bytes, commit_log.min_offset, codes_to_match(tag_filter)
    )


def units_to_scan(queue: ConsumeQueue, offset: int, max_count: int, tag_filter: TagFilter) -> bytes:
    """The units a pull at ``offset`` looks at: ``max_count``, or more under a filter (which
    may skip many)."""
    max_count = max(max_count, 1)
    scan = max_count if tag_filter.match_all else max(MIN_FILTER_SCAN_UNITS, max_count)
    return queue.read_unit_bytes(offset, scan)


def codes_to_match(tag_filter: TagFilter) -> frozenset[int] | None:
    """The tag hash codes a unit must carry, or None (no tags: a SQL filter alone has no tag
    hash to skip units by)."""
    return tag_filter.codes if tag_filter.tags else None


def choose_from_units(
    unit_bytes: bytes, max_count: int, max_bytes: int, log_min: int, codes: frozenset[int] | None
) -> tuple[list[tuple[int, int]], int, bool]:
    """The choice among ``unit_bytes`` (see ``choose_units``); the reference of the compiled
    ``choose_runs`` (store/fast/_log_scan.c)."""
    max_count = max(max_count, 1)
    chosen: list[tuple[int, int]] = []
    total_bytes = 0
    scanned = 0
    removed_first = False
    for phy_offset, size, tags_code in UNIT.iter_unpack(unit_bytes):
        if chosen and (len(chosen) >= max_count or total_bytes + size > max_bytes):
            break
        scanned += 1
        if size == BLANK_UNIT_SIZE or (codes is not None and tags_code not in codes):
            continue
        if phy_offset < log_min:
            removed_first = removed_first or not chosen
            continue
        chosen.append((phy_offset, size))
        total_bytes += size
    return chosen, scanned, removed_first


def _read_chosen(
    commit_log: CommitLog, chosen: list[tuple[int, int]]
) -> tuple[list[StoredMessage], int]:
    """The decoded records and how many could not be read (deleted meanwhile)."""
    messages: list[StoredMessage] = []
    missing = 0
    i, n = 0, len(chosen)
    while i < n:
        start, size = chosen[i]
        end = start + size
        j = i + 1
        while j < n and chosen[j][0] == end and end - start + chosen[j][1] <= MAX_RUN_BYTES:
            end += chosen[j][1]
            j += 1
        run = chosen[i:j]
        decoded = _decode_in_place(commit_log, start, end - start, run)
        if decoded is None:
            # Not one readable range (deleted meanwhile, or spans segments): one by one.
            for phy_offset, record_size in run:
                try:
                    msg = commit_log.read_message(phy_offset, record_size)
                except ValueError:  # its segment was unmapped by retention meanwhile
                    msg = None
                if msg is None:
                    missing += 1
                else:
                    messages.append(msg)
        else:
            if [m.store_size for m in decoded] == [size for _, size in run]:
                messages.extend(decoded)
                i = j
                continue
            for msg, (phy, record_size) in zip(decoded, run, strict=True):
                if msg.store_size == record_size:
                    messages.append(msg)
                    continue
                # The unit disagrees with the log: the checked path raises CorruptRecordError.
                checked = commit_log.read_message(phy, record_size)
                if checked is None:
                    missing += 1
                else:
                    messages.append(checked)
        i = j
    return messages, missing


def _decode_in_place(
    commit_log: CommitLog, start: int, size: int, run: list[tuple[int, int]]
) -> list[StoredMessage] | None:
    """Decode a run of adjacent records straight from the segment map (no copy of the run:
    the decoder copies out bodies and texts only), or None when the run is not in one
    readable segment or retention unmapped it meanwhile (a worker thread deletes while the
    loop reads): the caller then reads record by record."""
    try:
        located = commit_log.readable_segment(start, size)
        if located is None:
            return None
        raw, base = located
        return decode_records(raw, [phy - base for phy, _ in run], base)
    except ValueError:
        return None
