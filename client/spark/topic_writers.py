"""The ``wharf`` sink: batch and streaming writers sending rows as CommitLog records.

Wire path: each row is encoded here, on the executor, as a CommitLog record
(``wharf.client.record_encoder``, the SDK producer's encoder: bodies over 4 KiB zlib-compressed),
and a chunk of records goes out as one SendMessage ``records`` request (the broker checks and
appends them without per-message conversion, and answers in the compact form).

Delivery guarantee (see client/spark/README.md): *idempotent at-least-once*. Every row gets a
deterministic unique id (UNIQ_KEY) ``spark-<writerId>-<batchId>-<partitionId>-<rowIndex>``
and rows are sent in chunks of ``batchSize`` rows (at most ``maxRequestBytes`` of records)
per (topic, queueId), each chunk one store append (all or nothing). A task first probes the
broker for the last id of each chunk it is about to send (ViewMessage by unique id) and skips
chunks a previous attempt already stored, until the first absent one; from there it sends
without probing (earlier attempts sent chunks in the same order, so the stored chunks form a
prefix). So task retries, a streaming micro-batch re-run after a driver restart (same query
id, same batch id), and re-running a failed batch job with the same ``writerId`` do not
duplicate rows -- provided the input of each partition is deterministic (same rows, same
order), speculative execution is off, and the broker's index is enabled. Not transactional:
readers can see a batch's rows before Spark commits it, and ``abort`` cannot take back what
was stored (the broker API has no half messages).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)
from wharf.client.errors import InvalidArgumentError
from wharf.client.record_encoder import RecordEncoder
from wharf.client.spark.options import OptionError, WriteOptions
from wharf.client.spark.rpc import BrokerRpc, PendingSend
from wharf.v1 import messaging_pb2

log = logging.getLogger(__name__)

# System property names (store/codec/properties.py), spelled out here: the connector does not import
# the store (import-linter); the wire form is RocketMQ's, so the names are fixed.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"

# Spark sets these on every job of a streaming micro-batch (MicroBatchExecution).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

_COLUMN_TYPES: dict[str, tuple[type, ...]] = {
    "topic": (StringType,),
    "body": (BinaryType, StringType),
    "tags": (StringType,),
    "keys": (ArrayType,),
    "properties": (MapType,),
    "queueId": (IntegerType, LongType, ShortType),
}


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Fail at planning, with the column named, instead of in every task."""
    names = {f.name: f.dataType for f in schema.fields}
    for name, data_type in names.items():
        allowed = _COLUMN_TYPES.get(name)
        if allowed is None:
            raise OptionError(
                f"column {name!r} is not written by the wharf sink; select only "
                f"{sorted(_COLUMN_TYPES)}"
            )
        if not isinstance(data_type, allowed):
            raise OptionError(
                f"column {name!r} has type {data_type.simpleString()}, expected "
                f"{' or '.join(t.__name__ for t in allowed)}"
            )
    if "body" not in names:
        raise OptionError("the wharf sink needs a 'body' column (binary or string)")
    if "topic" not in names and opts.topic is None:
        raise OptionError("the wharf sink needs a 'topic' column or the 'topic' option")
    keys = names.get("keys")
    if isinstance(keys, ArrayType) and not isinstance(keys.elementType, StringType):
        raise OptionError("column 'keys' must be array<string>")
    props = names.get("properties")
    if isinstance(props, MapType) and not (
        isinstance(props.keyType, StringType) and isinstance(props.valueType, StringType)
    ):
        raise OptionError("column 'properties' must be map<string,string>")


@dataclass
class WriteSummary(WriterCommitMessage):
    partition_id: int
    attempt: int
    sent: int  # messages this attempt stored
    skipped: int  # messages a previous attempt had stored already (idempotent retry)


class _ChunkSender:
    """Buffers encoded records per (topic, queueId) and sends full chunks, probing first (see
    the module docstring) while previous attempts may have stored them."""

    def __init__(self, rpc: BrokerRpc, opts: WriteOptions) -> None:
        self._rpc = rpc
        self._opts = opts
        # Per key: the records, the last record's unique id (what probing asks for), bytes.
        self._pending: dict[tuple[str, int | None], list[bytes]] = {}
        self._last_id: dict[tuple[str, int | None], str] = {}
        self._pending_bytes: dict[tuple[str, int | None], int] = {}
        self._probing = opts.idempotent
        self._in_flight: tuple[PendingSend, int, str, str] | None = None
        self.sent = 0
        self.skipped = 0

    def add(self, topic: str, queue_id: int | None, record: bytes, unique_id: str) -> None:
        key = (topic, queue_id)
        size = len(record)
        chunk = self._pending.get(key)
        if chunk is None:
            chunk = self._pending[key] = []
            self._pending_bytes[key] = 0
        elif self._pending_bytes[key] + size > self._opts.max_request_bytes:
            # Deterministic too: a record's size depends only on its row.
            self._flush(key)
            chunk = self._pending[key] = []
            self._pending_bytes[key] = 0
        chunk.append(record)
        self._pending_bytes[key] += size
        self._last_id[key] = unique_id
        if len(chunk) >= self._opts.batch_size:
            self._flush(key)

    def flush_all(self) -> None:
        for key in list(self._pending):
            self._flush(key)
        self._settle()

    def _flush(self, key: tuple[str, int | None]) -> None:
        chunk = self._pending.pop(key)
        del self._pending_bytes[key]
        last_id = self._last_id.pop(key)
        topic, queue_id = key
        if self._probing:
            if self._rpc.unique_id_exists(topic, last_id):
                self.skipped += len(chunk)
                return
            self._probing = False
        # One chunk in flight at a time: the next chunk's rows are encoded while this one
        # travels, and it is sent only once this one is acknowledged, so stored chunks
        # still form a prefix of the task's chunks (what probing relies on).
        self._settle()
        pending = self._rpc.start_send_records(topic, queue_id, chunk, self._opts.producer_group)
        self._in_flight = (pending, len(chunk), topic, last_id)

    def _settle(self) -> None:
        """Wait for the chunk in flight, if any, and check its acknowledgement."""
        if self._in_flight is None:
            return
        pending, count, topic, last_id = self._in_flight
        self._in_flight = None
        reply = pending.result()
        if reply.count != count:
            raise RuntimeError(
                f"broker acknowledged {reply.count} of {count} messages to {topic} "
                f"(chunk ending with {last_id})"
            )
        if reply.status == messaging_pb2.FLUSH_DISK_TIMEOUT:
            log.warning(
                "wharf sink: %d messages to %s (up to %s) stored but not flushed in time",
                count,
                topic,
                last_id,
            )
        elif reply.status != messaging_pb2.SEND_OK:
            raise RuntimeError(
                f"broker refused the chunk ending with {last_id}: "
                f"{messaging_pb2.SendStatus.Name(reply.status)}"
            )
        self.sent += count


class _RowEncoder:
    """Rows -> CommitLog records (``wharf.client.record_encoder``), with the message semantics of
    a SendMessage ``messages`` request: empty tags and keys are absent, and the system
    properties (TAGS, KEYS, UNIQ_KEY) win over user properties of the same name."""

    def __init__(self) -> None:
        self._encoder = RecordEncoder()
        self._threshold = self._encoder.compress_threshold

    def encode(
        self,
        row: int,
        topic: str,
        body: bytes,
        unique_id: str,
        tags: str | None,
        keys: list[str | None] | None,
        properties: list[tuple[str, str | None]] | None,
    ) -> bytes:
        encoder = self._encoder
        try:
            if not (tags or keys or properties) and 0 < len(body) <= self._threshold:
                return encoder.encode_bare(encoder.tail(topic), body, unique_id)
            user: dict[str, str] = {}
            if properties:  # Arrow gives a map as (key, value) pairs; null values dropped
                user.update((k, v) for k, v in properties if v is not None)
                user.pop(PROPERTY_UNIQ_KEY, None)
            key_list = [k for k in keys or () if k]
            if tags:
                user.pop(PROPERTY_TAGS, None)
            if key_list:
                user.pop(PROPERTY_KEYS, None)
            return encoder.encode(
                topic, body, unique_id, tags=tags or None, keys=key_list, properties=user
            )
        except InvalidArgumentError as exc:
            raise ValueError(f"row {row}: {exc}") from None


def _as_body(value: Any, row: int) -> bytes:
    if value is None:
        raise ValueError(f"row {row}: 'body' is null; the wharf sink needs a body")
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def write_rows(
    opts: WriteOptions, writer_id: str, batch_id: int, batches: Iterator[pa.RecordBatch]
) -> WriteSummary:
    """Send every row of this task; ids are ``spark-<writer>-<batch>-<partition>-<row>``."""
    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    prefix = f"spark-{writer_id}-{batch_id}-{partition_id}-"
    row = 0
    encoder = _RowEncoder()
    with BrokerRpc(opts.endpoints, opts.timeout_s, opts.tls) as rpc:
        sender = _ChunkSender(rpc, opts)
        for batch in batches:
            cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
            n = batch.num_rows
            topics = cols.get("topic", [None] * n)
            bodies = cols["body"]
            tags = cols.get("tags", [None] * n)
            keys = cols.get("keys", [None] * n)
            props = cols.get("properties", [None] * n)
            queues = cols.get("queueId", [None] * n)
            for i in range(n):
                topic = opts.topic or topics[i]
                if not topic:
                    raise ValueError(f"row {row}: 'topic' is null and no 'topic' option is set")
                unique_id = f"{prefix}{row}"
                body = _as_body(bodies[i], row)
                record = encoder.encode(row, topic, body, unique_id, tags[i], keys[i], props[i])
                sender.add(topic, queues[i], record, unique_id)
                row += 1
        sender.flush_all()
    if sender.skipped:
        log.warning(
            "wharf sink: partition %d attempt %d skipped %d messages stored by a previous attempt",
            partition_id,
            attempt,
            sender.skipped,
        )
    return WriteSummary(partition_id, attempt, sender.sent, sender.skipped)


def _summarise(messages: list[WriterCommitMessage | None]) -> tuple[int, int, int]:
    done = [m for m in messages if isinstance(m, WriteSummary)]
    return (
        sum(m.sent for m in done),
        sum(m.skipped for m in done),
        len(messages) - len(done),
    )


class TopicBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, writer_id: str) -> None:
        self._opts = opts
        self._writer_id = writer_id  # made once on the driver; same for every task attempt

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_rows(self._opts, self._writer_id, 0, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        sent, skipped, _ = _summarise(messages)
        log.info(
            "wharf sink %s: %d messages stored (%d deduplicated)", self._writer_id, sent, skipped
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent, _, failed = _summarise(messages)
        log.warning(
            "wharf sink %s: job aborted with %d failed tasks; %d messages already stored stay "
            "visible. Re-run with option writerId=%s to complete it without duplicates.",
            self._writer_id,
            failed,
            sent,
            self._writer_id,
        )


class TopicStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self._opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
        writer_id = self._opts.writer_id or query_id
        if writer_id is None or batch_id is None:
            raise RuntimeError("wharf stream sink: no streaming query id / batch id in the task")
        return write_rows(self._opts, writer_id, int(batch_id), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent, skipped, _ = _summarise(messages)
        log.info(
            "wharf sink: batch %d: %d messages stored (%d deduplicated)", batchId, sent, skipped
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent, _, failed = _summarise(messages)
        log.warning(
            "wharf sink: batch %d aborted (%d failed tasks); %d stored messages stay visible and "
            "are skipped when the batch is re-run",
            batchId,
            failed,
            sent,
        )
