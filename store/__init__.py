"""Wharf's storage engine: a RocketMQ-style CommitLog / ConsumeQueue / IndexFile store.

The public surface is the ``MessageStore`` facade plus the values and errors crossing its
boundary, and what the broker's core needs of the engine without reaching into it: a write's
handles (``Written``, ``WrittenMany``, ``durable_all``), the answers of ``write_when_durable``
(``DEFERRED``, ``DURABLE``, ``REFUSED``), a pop delivery (``PoppedMessage``), the filter parsers
(``parse_tag_expression``, ``parse_sql_expression``, ``MATCH_ALL``), the replication status
(``ReplicationStatus``), the base of a running part (``Service``) and the Kafka converter's
compiled path (``kafka_send_records``, ``kafka_fetch_batch``, ``kafka_compiled``: store/fast/
kafka_convert.py, the twin of ``wharf.store.codec.kafka_records``). Everything else in the
package is internal.
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
    from wharf.store.fast.kafka_convert import fetch_batch as kafka_fetch_batch
    from wharf.store.fast.kafka_convert import is_compiled as kafka_compiled
    from wharf.store.fast.kafka_convert import send_records as kafka_send_records
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
# The Kafka front end's compiled conversion (it may not import wharf.store.fast): loaded, and
# the C module configured, on first use.
_LAZY_KAFKA = {
    "kafka_compiled": "is_compiled",
    "kafka_fetch_batch": "fetch_batch",
    "kafka_send_records": "send_records",
}


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
    if name in _LAZY_KAFKA:
        from wharf.store.fast import kafka_convert

        return getattr(kafka_convert, _LAZY_KAFKA[name])
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
    "kafka_compiled",
    "kafka_fetch_batch",
    "kafka_send_records",
    "parse_sql_expression",
    "parse_tag_expression",
]
