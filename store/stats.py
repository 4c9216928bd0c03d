"""Status and settings helpers of the MessageStore facade: settings validation, the flush tally
behind ``stats()``, and ``stats()`` itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wharf.store.codec.layout import CQ_STORE_UNIT_SIZE
from wharf.store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from wharf.store.model import StoreStats
from wharf.store.services.cleanup import parse_delete_when
from wharf.store.services.schedule import parse_delay_levels

if TYPE_CHECKING:
    from wharf.store.message_store import MessageStore, StoreObserver


class FlushTally:
    """Counts flushes for ``stats()`` and forwards to the broker's observer."""

    def __init__(self, observer: StoreObserver | None) -> None:
        self.observer = observer
        self.flush_count = 0
        self.last_flush_seconds = 0.0

    def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
        self.flush_count += 1
        self.last_flush_seconds = seconds
        if self.observer is not None:
            self.observer.on_flush(kind, seconds, nbytes)

    def on_group_commit(self, waiters: int) -> None:
        if self.observer is not None:
            self.observer.on_group_commit(waiters)


def validate_config(config: StoreConfig) -> None:
    """Refuse settings the store cannot honour, at construction, with the setting's name."""
    if not config.store_path_root_dir:
        raise ValueError("store_path_root_dir must be set")
    if config.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
        raise ValueError(
            f"flush_disk_type must be {ASYNC_FLUSH} or {SYNC_FLUSH}, got {config.flush_disk_type!r}"
        )
    size = config.mapped_file_size_consume_queue
    if size <= 0 or size % CQ_STORE_UNIT_SIZE:
        raise ValueError(
            f"mapped_file_size_consume_queue must be a positive multiple of {CQ_STORE_UNIT_SIZE}"
            f" (bytes per unit), got {size}"
        )
    if config.message_index_enable and (config.max_hash_slot_num <= 0 or config.max_index_num <= 1):
        raise ValueError("max_hash_slot_num must be > 0 and max_index_num > 1")
    ratios = (
        config.disk_max_used_space_ratio,
        config.disk_space_clean_forcibly_ratio,
        config.disk_space_warning_level_ratio,
    )
    if not all(0 < r <= 100 for r in ratios):
        raise ValueError(f"disk space ratios are percentages in (0, 100], got {ratios}")
    parse_delete_when(config.delete_when)  # ValueError names the bad hour
    parse_delay_levels(config.message_delay_level)


def build_stats(store: MessageStore) -> StoreStats:
    """``MessageStore.stats()``: counters and sizes kept in memory, no file walking."""
    commit_log = store.commit_log
    config = store.config
    queues = store.queues
    index = store.index
    index_files = len(index.files) if index is not None else 0
    return StoreStats(
        commit_log_min_offset=commit_log.min_offset,
        commit_log_max_offset=commit_log.max_offset,
        commit_log_flushed_offset=commit_log.flushed_offset,
        commit_log_committed_offset=commit_log.committed_offset,
        dispatch_behind_bytes=max(commit_log.max_offset - store.dispatch_offset, 0),
        commit_log_segments=commit_log.segment_count,
        consume_queue_files=queues.file_count,
        index_files=index_files,
        disk_used_ratio=store.disk_used_ratio,
        writable=store.writable,
        not_writable_reason=store.not_writable_reason,
        messages_put_total=store.messages_put_total,
        bytes_put_total=store.bytes_put_total,
        recovery_seconds=store.recovery_seconds,
        flush_count=store.observer.flush_count,
        last_flush_seconds=store.observer.last_flush_seconds,
        # Allocated sizes: segments are preallocated; queue and index files are sparse, so
        # for them this is an upper bound.
        storage_size_bytes=commit_log.segment_count * config.mapped_file_size_commit_log
        + queues.file_count * config.mapped_file_size_consume_queue
        + index_files * (index.file_bytes if index is not None else 0),
    )
