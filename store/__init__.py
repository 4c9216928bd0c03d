"""Wharf's storage engine: a RocketMQ-style CommitLog / ConsumeQueue / IndexFile store.

The public surface is the ``MessageStore`` facade plus the values and errors crossing its
boundary; everything else in the package is internal.
"""

from store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from store.errors import (
    CorruptRecordError,
    DiskFullError,
    FlushFailedError,
    InvalidFilterError,
    InvalidMessageError,
    MessageNotFoundError,
    StoreError,
    StoreNotWritableError,
    StoreShutDownError,
)
from store.message_store import ArrivalListener, MessageStore, StoreObserver
from store.model import (
    AppendResult,
    GetResult,
    GetStatus,
    MessageInput,
    PutResult,
    PutStatus,
    QueueStat,
    StoredMessage,
    StoreStats,
    TagFilter,
)

__all__ = [
    "ASYNC_FLUSH",
    "SYNC_FLUSH",
    "AppendResult",
    "ArrivalListener",
    "CorruptRecordError",
    "DiskFullError",
    "FlushFailedError",
    "GetResult",
    "GetStatus",
    "InvalidFilterError",
    "InvalidMessageError",
    "MessageInput",
    "MessageNotFoundError",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "QueueStat",
    "StoreConfig",
    "StoreError",
    "StoreNotWritableError",
    "StoreObserver",
    "StoreShutDownError",
    "StoreStats",
    "StoredMessage",
    "TagFilter",
]
