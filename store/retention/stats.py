"""RetentionStats: what topic retention and compaction did, for metrics and tools."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RetentionStats:
    compacted_queues: int = 0  # queues of compacted topics (with or without a kept log yet)
    passes: int = 0  # compaction passes installed
    pass_failures: int = 0
    passes_map_full: int = 0  # passes that stopped early: more keys than compactionMapBytes
    records_read: int = 0  # dirty records read to build the maps
    bytes_read: int = 0
    records_kept: int = 0  # records written into new generations
    bytes_written: int = 0
    tombstones_removed: int = 0
    kept_bytes: int = 0  # the live generations' size, all queues
    kept_records: int = 0
    last_pass_seconds: float = 0.0
    cpu_seconds: float = 0.0  # the passes' own thread CPU time, all passes
    last_pass_at_ms: int = 0
    max_dirty_ratio: float = 0.0  # of the queues looked at last
    pinned_log_offset: int = -1  # lowest commit log offset compaction still needs (-1: none)
    log_start_moves: int = 0  # queue log starts moved (retention.ms/bytes, DeleteRecords)
