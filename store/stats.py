"""``MessageStore.stats()``: counters and sizes kept in memory, no file walking.

``build_stats`` reads the opened parts (``wharf.store.parts``) and takes the facade's own
counters as arguments; it never sees the facade. (Settings validation, once here too, lives
with the settings in ``wharf.store.config``; the flush tally in ``wharf.store.observer``.)
"""

from __future__ import annotations

from wharf.store.model import StoreStats
from wharf.store.parts import StoreParts


def build_stats(
    parts: StoreParts,
    *,
    dispatch_offset: int,
    disk_used_ratio: float,
    not_writable_reason: str,
    messages_put_total: int,
    bytes_put_total: int,
    recovery_seconds: float,
    sends_held: int,
    sends_refused_busy: int,
) -> StoreStats:
    commit_log = parts.commit_log
    config = parts.config
    queues = parts.queues
    index = parts.index
    index_files = len(index.files) if index is not None else 0
    return StoreStats(
        commit_log_min_offset=commit_log.min_offset,
        commit_log_max_offset=commit_log.max_offset,
        commit_log_flushed_offset=commit_log.flushed_offset,
        commit_log_committed_offset=commit_log.committed_offset,
        dispatch_behind_bytes=max(commit_log.max_offset - dispatch_offset, 0),
        commit_log_segments=commit_log.segment_count,
        consume_queue_files=queues.file_count,
        index_files=index_files,
        disk_used_ratio=disk_used_ratio,
        writable=not not_writable_reason,
        not_writable_reason=not_writable_reason,
        disk_full_episodes=commit_log.disk_full_episodes,
        messages_put_total=messages_put_total,
        bytes_put_total=bytes_put_total,
        recovery_seconds=recovery_seconds,
        sends_held=sends_held,
        sends_refused_busy=sends_refused_busy,
        flush_count=parts.observer.flush_count,
        last_flush_seconds=parts.observer.last_flush_seconds,
        # Allocated sizes: segments are preallocated; queue and index files are sparse, so
        # for them this is an upper bound.
        storage_size_bytes=commit_log.segment_count * config.mapped_file_size_commit_log
        + queues.file_count * config.mapped_file_size_consume_queue
        + index_files * (index.file_bytes if index is not None else 0),
    )
