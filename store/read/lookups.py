"""Lookups by position, key and time (the facade's non-pull reads): a record at a commit log
offset, messages by KEYS entry or unique id through the IndexFiles, per-queue figures, and the
start-up walk of the ledgers (``marks_since``). Pulls are ``get_message.py`` / ``get_raw.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from wharf.store.errors import CorruptRecordError
from wharf.store.index.index_files import IndexService
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import QueueStat, StoredMessage
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue

__all__ = ["look_message", "marks_since", "query_by_key", "queue_stats"]


def look_message(commit_log: CommitLog, offset: int) -> StoredMessage | None:
    """The record starting at ``offset``, None when there is none. Offsets come from users
    (offset message ids): one that is not a record start is "not found", not a store fault."""
    if offset < 0:
        return None
    try:
        return commit_log.read_message(offset)
    except CorruptRecordError:
        return None


def query_by_key(
    index: IndexService,
    commit_log: CommitLog,
    topic: str,
    key: str,
    max_num: int,
    begin_ms: int,
    end_ms: int,
) -> list[StoredMessage]:
    """By KEYS entry or unique id, newest first. Hash collisions and records outside
    [begin_ms, end_ms] are dropped after decoding."""
    if max_num <= 0 or not key:
        return []
    # Index time is whole seconds since the file's begin: widen, then check exactly.
    offsets = index.query_offsets(
        topic, key, max(max_num * 2, max_num + 16), begin_ms - 1000, end_ms
    )
    found: list[StoredMessage] = []
    for offset in offsets:
        msg = look_message(commit_log, offset)
        if msg is None or msg.topic != topic:
            continue
        if not begin_ms <= msg.store_timestamp <= end_ms:
            continue
        if key != msg.unique_id and key not in msg.keys:
            continue
        found.append(msg)
        if len(found) >= max_num:
            break
    return found


def queue_stats(
    queues: Iterable[ConsumeQueue],
    commit_log: CommitLog,
    log_start: Callable[[str, int, int], int] = lambda topic, queue_id, queue_min: queue_min,
) -> list[QueueStat]:
    """Each queue's min and max offsets and the store time of its last message (0: none); the
    min is ``log_start(topic, queue id, its consume queue's min)`` (a compacted queue's)."""
    stats = []
    for queue in queues:
        last = queue.get_unit(queue.max_offset - 1) if queue.max_offset else None
        stamp = 0
        if last is not None and last[1] != BLANK_UNIT_SIZE:
            stamp = commit_log.store_timestamp_at(last[0]) or 0
        low = log_start(queue.topic, queue.queue_id, queue.min_offset)
        stats.append(QueueStat(queue.queue_id, low, queue.max_offset, stamp))
    return stats


def marks_since(commit_log: CommitLog, offset: int, prop: str) -> list[int]:
    """The integer value of property ``prop`` in every record from ``offset`` on: a start-up
    walk for the records that closed ledger entries after a checkpoint (delivered timer
    copies, transaction resolutions)."""
    found: list[int] = []
    end = commit_log.max_offset
    while offset < end:
        batch = commit_log.iter_dispatch(offset, 4 << 20)
        for req in batch.requests:
            text = req.properties.get(prop, "")
            if text.isdigit():
                found.append(int(text))
        if batch.next_offset <= offset:
            break
        offset = batch.next_offset
    return found
