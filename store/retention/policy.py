"""TopicPolicy: the store's side of a topic's cleanup configs.

The broker parses a topic's configs (Kafka's names, ``broker/meta/topic_configs.py``) into one
of these and hands it to the store; the store never reads config names or strings. Defaults are
Kafka's, except ``retention_ms``: None leaves a topic to the store's own age rule
(``fileReservedTime``, 72 h), which is what every topic had before per-topic retention.
"""

from __future__ import annotations

from dataclasses import dataclass

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    compact: bool = False  # cleanup.policy has "compact": keep the latest record per key
    delete: bool = True  # cleanup.policy has "delete": retention by age and size applies
    retention_ms: int | None = None  # None: the store's rule; -1: keep forever
    retention_bytes: int = -1  # per queue (Kafka: per partition); -1: no size limit
    segment_ms: int = 604_800_000  # a compacted queue's active part rolls after this
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000  # a tombstone's life, from its store time


DEFAULT_POLICY = TopicPolicy()
