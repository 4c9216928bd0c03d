"""The raw pull read of records a running sync will make durable: the same read as
``get_raw`` over a ConsumeQueue that has the dispatch plan's units appended (``PlannedQueue``).

Used only to build an answer during the fdatasync (``arrivals.py`` "ahead of the sync"); the
answer's bytes reach the reader from the sync thread after the fdatasync
(``CommitLog.write_when_durable``), never before: committed reads hold as for any read.
"""

from __future__ import annotations

from typing import cast

from wharf.store.codec.layout import CQ_STORE_UNIT_SIZE
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import RawGetResult, TagFilter
from wharf.store.queue.consume_queue import ConsumeQueue
from wharf.store.read.get_raw import get_raw_records


class PlannedQueue:
    """A queue's planned units from logical ``first`` on, read like a ConsumeQueue (the
    three members ``get_raw_records`` uses); the queue's own min offset is kept."""

    __slots__ = ("_first", "_units", "max_offset", "min_offset")

    def __init__(self, queue: ConsumeQueue | None, first: int, units: bytes) -> None:
        self.min_offset = 0 if queue is None else queue.min_offset
        self.max_offset = first + len(units) // CQ_STORE_UNIT_SIZE
        self._first = first
        self._units = units

    def read_unit_bytes(self, offset: int, max_count: int) -> bytes:
        if offset < self._first:
            return b""  # below the plan: the ConsumeQueue has it, not this view
        at = (offset - self._first) * CQ_STORE_UNIT_SIZE
        return self._units[at : at + max_count * CQ_STORE_UNIT_SIZE]


def get_raw_records_ahead(
    queue: ConsumeQueue | None,
    commit_log: CommitLog,
    units: bytes,
    offset: int,
    max_count: int,
    tag_filter: TagFilter | None,
    max_bytes: int,
) -> RawGetResult:
    """``get_raw_records`` from ``offset`` over ``units`` (the planned units from ``offset``,
    as ``ReputService.planned_units`` gives them)."""
    # A PlannedQueue offers the three members get_raw_records reads of a ConsumeQueue.
    view = cast(ConsumeQueue, PlannedQueue(queue, offset, units))
    return get_raw_records(view, commit_log, offset, max_count, tag_filter, max_bytes)
