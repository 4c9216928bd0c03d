"""MessageStore: the store's one public facade (RocketMQ's DefaultMessageStore, minus the god
class). It wires the CommitLog, ConsumeQueues, IndexFiles, ReputService, flush services,
ScheduleMessageService and cleanup services, and runs recovery at start.

CONTRACT (the broker codes against exactly this; implementations fill in the bodies):

- One asyncio event loop owns the store. Appends are synchronous and never await, which makes
  them atomic on that loop without a lock. Blocking syscalls (fdatasync, file creation,
  large scans, recovery) run in threads.
- ``start()`` loads and recovers (in a thread), writes the abort marker, starts the services.
  ``shutdown()`` stops services, flushes everything, writes the checkpoint, removes the abort
  marker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from store.config import StoreConfig
from store.model import (
    AppendResult,
    GetResult,
    MessageInput,
    PutResult,
    QueueStat,
    StoredMessage,
    StoreStats,
    TagFilter,
)

# Called after dispatch made new messages visible: (topic, queue_id, new max offset).
ArrivalListener = Callable[[str, int, int], None]


class StoreObserver(Protocol):
    """Hooks the broker's metrics implement (the store imports no prometheus)."""

    def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
        """kind: 'sync' (group commit), 'async' (FlushRealTimeService), 'cq' (queues/index)."""

    def on_group_commit(self, waiters: int) -> None:
        """One group commit served ``waiters`` put requests with a single fdatasync."""


class MessageStore:
    def __init__(self, config: StoreConfig, observer: StoreObserver | None = None) -> None:
        raise NotImplementedError

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None: ...
    async def shutdown(self) -> None: ...

    # --- writes ------------------------------------------------------------------------------
    def append(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> AppendResult:
        """Validate and append a batch (consecutive queue offsets in one queue). Never awaits.
        Messages with a DELAY property go to SCHEDULE_TOPIC_XXXX queue level-1 (the real
        topic/queue kept in REAL_TOPIC/REAL_QID). Raises InvalidMessageError (nothing written),
        StoreNotWritableError."""
        raise NotImplementedError

    async def put(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> PutResult:
        """append() plus the durability wait of the flush mode: SYNC_FLUSH awaits the group
        commit (FLUSH_DISK_TIMEOUT after syncFlushTimeout); ASYNC_FLUSH wakes the flush service
        and returns at once."""
        raise NotImplementedError

    # --- reads -------------------------------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter | None = None,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> GetResult: ...

    def look_message_by_offset(self, commit_log_offset: int) -> StoredMessage | None: ...

    def query_messages(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[StoredMessage]:
        """By KEYS entry or unique id, through the IndexFiles; newest first is fine."""
        raise NotImplementedError

    def get_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...
    def get_min_offset(self, topic: str, queue_id: int) -> int: ...
    def get_max_offset(self, topic: str, queue_id: int) -> int: ...
    def get_queue_stats(self, topic: str) -> list[QueueStat]: ...
    def delete_topics(self, topics: Sequence[str]) -> None: ...

    # --- listeners / status ------------------------------------------------------------------
    def add_arrival_listener(self, listener: ArrivalListener) -> None: ...
    def stats(self) -> StoreStats: ...

    @property
    def writable(self) -> bool: ...

    @property
    def config(self) -> StoreConfig: ...
