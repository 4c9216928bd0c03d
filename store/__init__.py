"""Wharf's storage engine: a RocketMQ-style CommitLog / ConsumeQueue / IndexFile store.

The public surface is the ``MessageStore`` facade plus the values and errors crossing its
boundary, and what the broker's core needs of the engine without reaching into it: a write's
handles (``Written``, ``WrittenMany``, ``durable_all``), the answers of ``write_when_durable``
(``DEFERRED``, ``DURABLE``, ``REFUSED``), a pop delivery (``PoppedMessage``), the filter parsers
(``parse_tag_expression``, ``parse_sql_expression``, ``MATCH_ALL``), the replication status
(``ReplicationStatus``) and the base of a running part (``Service``). Everything else in the package is internal.
"""

from typing import TYPE_CHECKING

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
    DEFERRED,
    DURABLE,
    REFUSED,
    AppendResult,
    ConsumerLink,
    GetResult,
    GetStatus,
    MessageInput,
    PoppedMessage,
    PutHook,
    PutResult,
    PutStatus,
    QueueStat,
    StoredMessage,
    StoreStats,
    TagFilter,
)
from wharf.store.service import Service

if TYPE_CHECKING:
    from wharf.store.ha.status import ReplicationStatus
    from wharf.store.message_store import (
        ArrivalListener,
        MessageStore,
        StoreObserver,
        Written,
        durable_all,
    )
    from wharf.store.read.filter import MATCH_ALL, parse_sql_expression, parse_tag_expression
    from wharf.store.write import WrittenMany

# The facade (and with it numpy and every service module) loads on first use, so that importing
# the sans-IO codec (``wharf.store.codec``) -- as the SDK's record decoder and the Spark offline scan
# do -- stays cheap; the filter parsers (and their SQL compiler) likewise.
_LAZY = {"ArrivalListener", "MessageStore", "StoreObserver", "Written", "durable_all"}
_LAZY_WRITE = {"WrittenMany"}
_LAZY_HA = {"ReplicationStatus"}
_LAZY_FILTER = {"MATCH_ALL", "parse_sql_expression", "parse_tag_expression"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from wharf.store import message_store

        return getattr(message_store, name)
    if name in _LAZY_WRITE:
        from wharf.store import write

        return getattr(write, name)
    if name in _LAZY_HA:
        from wharf.store.ha import status

        return getattr(status, name)
    if name in _LAZY_FILTER:
        from wharf.store.read import filter as filters

        return getattr(filters, name)
    raise AttributeError(f"module 'store' has no attribute {name!r}")


__all__ = [
    "ASYNC_FLUSH",
    "DEFERRED",
    "DURABLE",
    "MATCH_ALL",
    "REFUSED",
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
    "PoppedMessage",
    "PutHook",
    "PutResult",
    "PutStatus",
    "QueueStat",
    "ReplicationStatus",
    "Service",
    "StoreConfig",
    "StoreError",
    "StoreNotWritableError",
    "StoreObserver",
    "StoreShutDownError",
    "StoreStats",
    "StoredMessage",
    "TagFilter",
    "Written",
    "WrittenMany",
    "durable_all",
    "parse_sql_expression",
    "parse_tag_expression",
]
