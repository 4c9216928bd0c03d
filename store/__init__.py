"""Wharf's storage engine: a RocketMQ-style CommitLog / ConsumeQueue / IndexFile store.

The public surface is the ``MessageStore`` facade plus the values and errors crossing its
boundary; everything else in the package is internal.
"""

from wharf.store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from wharf.store.errors import (
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
from wharf.store.model import (
    AppendResult,
    ConsumerLink,
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

# The facade (and with it numpy and every service module) loads on first use, so that importing
# the sans-IO codec (``wharf.store.codec``) -- as the SDK's record decoder and the Spark offline scan
# do -- stays cheap.
_LAZY = {"ArrivalListener", "MessageStore", "StoreObserver", "Written", "durable_all"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from wharf.store import message_store

        return getattr(message_store, name)
    raise AttributeError(f"module 'store' has no attribute {name!r}")


__all__ = [
    "ASYNC_FLUSH",
    "SYNC_FLUSH",
    "AppendResult",
    "ArrivalListener",
    "ConsumerLink",
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
    "Written",
    "durable_all",
]
