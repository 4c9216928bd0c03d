"""Reads of a compacted queue below its ``cleaned_to``: from its kept log
(``retention/kept_log.py``), the next kept record at or after the offset asked.

Offsets never change, so a compacted queue has gaps. A read in a gap gets the next record kept
after it and ``next_begin_offset`` past that record (past ``cleaned_to`` once the kept log has
no more): a RocketMQ pull at a removed offset answers the next record with the right next
offset, a Kafka fetch answers a batch whose first offset is later than the fetch offset (every
Kafka client takes that: it is what a compacted Kafka log answers). When nothing is kept at or
after the offset, the read is the consume queue's own at ``cleaned_to`` (NO_MATCHED_MESSAGE,
next = ``cleaned_to``, when that is the queue's end: readers move past the gap instead of
waiting in it). Below the log start
offset the answer is OFFSET_TOO_SMALL with the start, as for any queue.

Records go out as the commit log stored them (QUEUEOFFSET intact; PHYSICALOFFSET their old
place in the commit log: a lookup by that offset finds nothing once the segment is gone).
Tags are checked on the decoded properties (the kept log has no tag hash column).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

from wharf.store.codec.layout import OFFSET_BODY_LENGTH, TOTAL_SIZE
from wharf.store.codec.records import decode_record, record_properties
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import GetResult, GetStatus, RawGetResult, StoredMessage, TagFilter
from wharf.store.queue.consume_queue import ConsumeQueue
from wharf.store.read.get_message import get_messages
from wharf.store.read.get_raw import get_raw_records
from wharf.store.retention.kept_log import KeptLog

_BODY_LENGTH = TOTAL_SIZE  # both ">i"
Below = Callable[[int], GetResult | RawGetResult]  # the consume queue's read at an offset


class KeptView(Protocol):
    """What a read asks of retention (``services/retention.py`` ``RetentionService``)."""

    def covering(self, topic: str, queue_id: int, offset: int) -> KeptLog | None: ...

    def min_offset(self, topic: str, queue_id: int, queue_min: int) -> int: ...


def messages_at(
    view: KeptView,
    queue: ConsumeQueue | None,
    commit_log: CommitLog,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    tag_filter: TagFilter | None,
    max_bytes: int,
) -> GetResult:
    """``get_messages``, from the kept log where one covers ``offset``."""
    args = (view, queue, commit_log, topic, queue_id, offset, max_count, tag_filter, max_bytes)
    return cast(GetResult, _at(get_messages, False, *args))


def raw_records_at(
    view: KeptView,
    queue: ConsumeQueue | None,
    commit_log: CommitLog,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    tag_filter: TagFilter | None,
    max_bytes: int,
) -> RawGetResult:
    """``get_raw_records``, from the kept log where one covers ``offset``."""
    args = (view, queue, commit_log, topic, queue_id, offset, max_count, tag_filter, max_bytes)
    return cast(RawGetResult, _at(get_raw_records, True, *args))


def _at(
    read: Callable[..., GetResult | RawGetResult],
    raw: bool,
    view: KeptView,
    queue: ConsumeQueue | None,
    commit_log: CommitLog,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    tag_filter: TagFilter | None,
    max_bytes: int,
) -> GetResult | RawGetResult:
    """``read`` (the consume queue's reader of either form) where no kept log covers
    ``offset``, else the kept log's answer, ``read`` serving what lies above it."""
    kept = view.covering(topic, queue_id, offset)
    if kept is None:
        return read(queue, commit_log, offset, max_count, tag_filter, max_bytes)
    return read_kept(
        kept, offset, max_count, tag_filter, max_bytes,
        log_start=view.min_offset(topic, queue_id, queue.min_offset if queue else 0),
        max_offset=queue.max_offset if queue else kept.state.cleaned_to,
        raw=raw,
        below=lambda at: read(queue, commit_log, at, max_count, tag_filter, max_bytes),
    )  # fmt: skip


def read_kept(
    kept: KeptLog,
    offset: int,
    max_count: int,
    tag_filter: TagFilter | None,
    max_bytes: int,
    *,
    log_start: int,
    max_offset: int,
    raw: bool,
    below: Below,
) -> GetResult | RawGetResult:
    """A read at ``offset`` (< ``kept.state.cleaned_to``): module docs."""
    if offset < log_start:
        status = GetStatus.OFFSET_TOO_SMALL
        if raw:
            return RawGetResult(status, log_start, log_start, max_offset)
        return GetResult(status, log_start, log_start, max_offset)
    state = kept.state
    entries = [e for e in kept.find(offset, max_count, max_bytes) if e[0] < state.cleaned_to]
    if not entries:
        result = below(state.cleaned_to)
        if result.status is GetStatus.OFFSET_OVERFLOW_ONE and offset < state.cleaned_to:
            # removed up to the queue's end: "nothing here, go on at cleaned_to", so every
            # reader moves past the gap (pop, RocketMQ's retry-now, Kafka's empty batch)
            status, nothing = GetStatus.NO_MATCHED_MESSAGE, state.cleaned_to
            if raw:
                return RawGetResult(status, nothing, log_start, max_offset)
            return GetResult(status, nothing, log_start, max_offset)
        return result
    data = kept.read_entries(entries)
    last = entries[-1][0]
    after = kept.first_at_or_after(last + 1)
    next_offset = state.cleaned_to if after >= state.records else last + 1
    positions = [e[1] - entries[0][1] for e in entries]
    matches = None if tag_filter is None or tag_filter.match_all else tag_filter.matches
    if raw:
        if matches is not None:
            keep = [p for p in positions if matches(record_properties(data, p))]
            if len(keep) != len(positions):
                data = b"".join(data[p : p + TOTAL_SIZE.unpack_from(data, p)[0]] for p in keep)
                positions = _positions(data)
        bodies = sum(_BODY_LENGTH.unpack_from(data, p + OFFSET_BODY_LENGTH)[0] for p in positions)
        status = GetStatus.FOUND if positions else GetStatus.NO_MATCHED_MESSAGE
        records = data if positions else b""
        return RawGetResult(
            status, next_offset, log_start, max_offset, records, len(positions), bodies
        )
    messages: list[StoredMessage] = [decode_record(data, p) for p in positions]
    if matches is not None:
        messages = [m for m in messages if matches(m.properties)]
    status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
    return GetResult(status, next_offset, log_start, max_offset, messages)


def _positions(data: bytes) -> list[int]:
    positions, pos = [], 0
    while pos < len(data):
        positions.append(pos)
        pos += TOTAL_SIZE.unpack_from(data, pos)[0]
    return positions
