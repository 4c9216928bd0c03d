"""The ``wharf`` sink: batch and streaming writers, exactly-once through half messages.

Delivery guarantee (see client/spark/README.md), default ``transactional=true``: *exactly
once*. Every row gets a deterministic unique id (UNIQ_KEY)
``spark-<writerId>.<batchId>.<partitionId>.<rowIndex>`` and rows go out in chunks of
``batchSize`` rows (at most ``maxRequestBytes``) per (topic, queueId), each chunk one store
append of *half messages* (TRAN_MSG=true: invisible to every consumer). A task returns the
transaction id ranges the broker gave its chunks; the driver's ``commit`` resolves them with
EndTransactions (commit copies appended in chunk order) and rolls back every other open half
of the same ``spark-<writerId>.<batchId>.`` prefix -- what failed task attempts left. ``abort``
rolls back the whole prefix. So a reader never sees rows of a batch Spark did not commit.

A re-run of a batch (a streaming batch after a driver crash: same query id and batch id; a
batch job re-run with the same ``writerId``) does not duplicate rows: before sending, a task
probes the broker for the last id of each chunk in the destination topic (ViewMessage by
unique id) and skips chunks a committed run stored, until the first absent one; commits go in
chunk order, so committed chunks are a prefix of each task's chunks even when the driver died
half-way through a commit. Conditions: deterministic partition input (same rows, same order),
speculative execution off, the broker's index on. A driver that dies inside ``commit`` leaves
the batch partly visible until the re-run completes it (the re-run commits the rest, never
takes committed rows back).

``transactional=false``: the previous mode, *idempotent at-least-once* on the records fast
path (the probe above; rows are visible as soon as a task stores them, ``abort`` cannot take
them back): faster, see the README's figures.

Over a cluster (option ``namesrv``): rows spread over every group taking writes to their
topic (``cluster_rpc.ClusterRpc.write_groups``, broker name order): a row without ``queueId``
goes to group ``(partitionId + rowIndex) mod groups`` (the broker picks its queue); a
``queueId`` numbers the write queues of the groups one after the other (group a's 0..n-1,
then group b's), so equal ids keep one (broker, queue). Chunks are cut per (topic, group,
queue), each sent to its group's master; the probe asks the chunk's own group; the task
reports which group holds each half range, and the driver ends each group's halves with that
group's own EndTransactions calls (``rollback_rest`` on every group holding the topic, so a
failed attempt's halves are rolled back wherever they went). Condition, besides the above:
the topic's writable groups are the same for a batch and its re-run.

Wire paths: half messages travel as proto messages (the broker re-addresses them to
``RMQ_SYS_TRANS_HALF_TOPIC``); plain rows are encoded here as CommitLog records
(``wharf.client.record_encoder``) and sent as one SendMessage ``records`` request per chunk.
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
from wharf.client.compression import maybe_compress
from wharf.client.errors import InvalidArgumentError
from wharf.client.record_encoder import RecordEncoder
from wharf.client.spark.cluster_rpc import ClusterRpc
from wharf.client.spark.options import OptionError, WriteOptions
from wharf.client.spark.rpc import BrokerRpc, PendingSend
from wharf.v1 import common_pb2, messaging_pb2

log = logging.getLogger(__name__)

# System property names (store/codec/properties.py), spelled out here: the connector does not import
# the store (import-linter); the wire form is RocketMQ's, so the names are fixed.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# Halves one EndTransactions request names (the broker's cap is 65536).
END_BATCH_HALVES = 16384

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
    prefix: str = ""  # the rows' unique id prefix up to the partition: spark-<writer>.<batch>.
    halves: list[tuple[int, int]] | None = None  # transaction id ranges (first, count) to commit
    topics: list[str] | None = None  # the topics its rows went to
    half_brokers: list[str] | None = None  # cluster: the broker group of each ``halves`` range


_Key = tuple[str, str, int | None]  # topic, broker group ("" for one broker), queue id


class _Placement:
    """Where a row goes over a cluster (see the module): its group, and its queue there."""

    def __init__(self, rpc: ClusterRpc, partition_id: int) -> None:
        self._rpc = rpc
        self._partition = partition_id

    def place(self, topic: str, queue_id: int | None, row: int) -> tuple[str, int | None]:
        groups = self._rpc.write_groups(topic)
        if queue_id is None:
            return groups[(self._partition + row) % len(groups)][0], None
        first = 0
        for name, count in groups:
            if queue_id < first + count:
                return name, queue_id - first
            first += count
        raise ValueError(
            f"row {row}: queueId {queue_id} is beyond the {first} write queues of {topic!r} "
            f"across its broker groups {[n for n, _ in groups]}"
        )


class _ChunkSender:
    """Buffers encoded records per (topic, queueId) and sends full chunks, probing first (see
    the module docstring) while previous attempts may have stored them."""

    def __init__(self, rpc: BrokerRpc | ClusterRpc, opts: WriteOptions) -> None:
        self._rpc = rpc
        self._opts = opts
        # Per key (topic, broker group or "", queue): the records, the last record's unique id
        # (what probing asks for), bytes.
        self._pending: dict[_Key, list[Any]] = {}
        self._last_id: dict[_Key, str] = {}
        self._pending_bytes: dict[_Key, int] = {}
        self._probing = opts.idempotent or opts.transactional
        self._in_flight: tuple[PendingSend, int, str, str, str] | None = None
        self.sent = 0
        self.skipped = 0
        self.halves: list[tuple[int, int]] = []  # transactional: (first id, count) per chunk
        self.half_brokers: list[str] = []  # the group of each range ("" for one broker)
        self.topics: set[str] = set()

    def _target(self, topic: str, broker: str) -> BrokerRpc:
        if isinstance(self._rpc, ClusterRpc):
            return self._rpc.group_rpc(topic, broker)
        return self._rpc

    def add(
        self,
        topic: str,
        queue_id: int | None,
        record: bytes | common_pb2.Message,
        unique_id: str,
        size: int | None = None,
        broker: str = "",
    ) -> None:
        """Buffer one row (a record, or a half message with its ``size``: its body's) for
        ``broker``'s group ("" : the one broker)."""
        if size is None:
            assert isinstance(record, bytes)
            size = len(record)
        key = (topic, broker, queue_id)
        self.topics.add(topic)
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

    def _flush(self, key: _Key) -> None:
        chunk = self._pending.pop(key)
        del self._pending_bytes[key]
        last_id = self._last_id.pop(key)
        topic, broker, queue_id = key
        rpc = self._target(topic, broker)
        if self._probing:  # the chunk's own group: where a previous attempt sent it
            if rpc.unique_id_exists(topic, last_id):
                self.skipped += len(chunk)
                return
            self._probing = False
        # One chunk in flight at a time: the next chunk's rows are encoded while this one
        # travels, and it is sent only once this one is acknowledged, so stored chunks
        # still form a prefix of the task's chunks (what probing relies on).
        self._settle()
        if self._opts.transactional:
            pending = rpc.start_send_messages(topic, queue_id, chunk, self._opts.producer_group)
        else:
            pending = rpc.start_send_records(topic, queue_id, chunk, self._opts.producer_group)
        self._in_flight = (pending, len(chunk), topic, last_id, broker)

    def _settle(self) -> None:
        """Wait for the chunk in flight, if any, and check its acknowledgement."""
        if self._in_flight is None:
            return
        pending, count, topic, last_id, broker = self._in_flight
        self._in_flight = None
        reply = pending.result()
        status = reply.status
        if self._opts.transactional:
            entries = reply.results
            first = entries[0].queue_offset if entries else -1
            if len(entries) != count or any(
                e.queue_offset != first + i for i, e in enumerate(entries)
            ):
                raise RuntimeError(
                    f"broker acknowledged {len(entries)} of {count} half messages to {topic} "
                    f"with non-consecutive transaction ids (chunk ending with {last_id})"
                )
            status = entries[-1].status
            self.halves.append((first, count))
            self.half_brokers.append(broker)
        elif reply.count != count:
            raise RuntimeError(
                f"broker acknowledged {reply.count} of {count} messages to {topic} "
                f"(chunk ending with {last_id})"
            )
        if status == messaging_pb2.FLUSH_DISK_TIMEOUT:
            log.warning(
                "wharf sink: %d messages to %s (up to %s) stored but not flushed in time",
                count,
                topic,
                last_id,
            )
        elif status != messaging_pb2.SEND_OK:
            raise RuntimeError(
                f"broker refused the chunk ending with {last_id}: "
                f"{messaging_pb2.SendStatus.Name(status)}"
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
            key_list = [k for k in keys or () if k]
            user = _user_properties(properties, tags, key_list)
            return encoder.encode(
                topic, body, unique_id, tags=tags or None, keys=key_list, properties=user
            )
        except InvalidArgumentError as exc:
            raise ValueError(f"row {row}: {exc}") from None


class _HalfEncoder:
    """Rows -> half messages (proto ``Message``, TRAN_MSG=true), with the semantics of
    ``_RowEncoder``: bodies over 4 KiB zlib-compressed, empty tags and keys absent, system
    properties winning over user properties of the same name."""

    def __init__(self, producer_group: str, check_immunity_s: int) -> None:
        del producer_group  # travels in the request
        self._system = {
            PROPERTY_TRANSACTION_PREPARED: "true",
            PROPERTY_CHECK_IMMUNITY: str(check_immunity_s),
        }

    def encode(
        self,
        row: int,
        topic: str,
        body: bytes,
        unique_id: str,
        tags: str | None,
        keys: list[str | None] | None,
        properties: list[tuple[str, str | None]] | None,
    ) -> common_pb2.Message:
        del row, topic  # errors surface as the broker's INVALID_ARGUMENT naming the message
        key_list = [k for k in keys or () if k]
        user = _user_properties(properties, tags, key_list)
        user.update(self._system)
        payload, compressed = maybe_compress(body)
        return common_pb2.Message(
            body=payload,
            tags=tags or "",
            keys=key_list,
            properties=user,
            unique_id=unique_id,
            compressed=compressed,
        )


def _user_properties(
    properties: list[tuple[str, str | None]] | None, tags: str | None, keys: list[str]
) -> dict[str, str]:
    """A row's user properties (Arrow gives a map as (key, value) pairs; null values dropped):
    the row's unique id always wins over a UNIQ_KEY property, the tags and keys columns over
    TAGS / KEYS properties when set (else those properties stand in for them)."""
    user: dict[str, str] = {}
    if properties:
        user.update((k, v) for k, v in properties if v is not None)
        user.pop(PROPERTY_UNIQ_KEY, None)
    if tags:
        user.pop(PROPERTY_TAGS, None)
    if keys:
        user.pop(PROPERTY_KEYS, None)
    return user


def _as_body(value: Any, row: int) -> bytes:
    if value is None:
        raise ValueError(f"row {row}: 'body' is null; the wharf sink needs a body")
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def row_prefix(writer_id: str, batch_id: int) -> str:
    """The unique id prefix of a writer's batch: ``spark-<writer>.<batch>.`` (writer ids have
    no '.', so no other writer's or batch's ids start with it)."""
    return f"spark-{writer_id}.{batch_id}."


def write_rows(
    opts: WriteOptions, writer_id: str, batch_id: int, batches: Iterator[pa.RecordBatch]
) -> WriteSummary:
    """Send every row of this task; ids are ``spark-<writer>.<batch>.<partition>.<row>``."""
    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    batch_prefix = row_prefix(writer_id, batch_id)
    prefix = f"{batch_prefix}{partition_id}."
    row = 0
    encoder: _RowEncoder | _HalfEncoder = (
        _HalfEncoder(opts.producer_group, opts.check_immunity_s)
        if opts.transactional
        else _RowEncoder()
    )
    with _connect(opts) as rpc:
        sender = _ChunkSender(rpc, opts)
        placement = _Placement(rpc, partition_id) if isinstance(rpc, ClusterRpc) else None
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
                item = encoder.encode(row, topic, body, unique_id, tags[i], keys[i], props[i])
                # Sizes cut chunks, so they are deterministic: a record's length, a half's body
                # plus 256 bytes for its header and properties.
                size = None if isinstance(item, bytes) else len(body) + 256
                queue_id, broker = queues[i], ""
                if placement is not None:
                    broker, queue_id = placement.place(topic, queue_id, row)
                sender.add(topic, queue_id, item, unique_id, size, broker)
                row += 1
        sender.flush_all()
    if sender.skipped:
        log.warning(
            "wharf sink: partition %d attempt %d skipped %d messages stored by a previous attempt",
            partition_id,
            attempt,
            sender.skipped,
        )
    return WriteSummary(
        partition_id,
        attempt,
        sender.sent,
        sender.skipped,
        batch_prefix,
        sender.halves if opts.transactional else None,
        sorted(sender.topics),
        sender.half_brokers if opts.transactional and placement is not None else None,
    )


def _connect(opts: WriteOptions) -> BrokerRpc | ClusterRpc:
    """One broker (``endpoints``) or a cluster's groups (``namesrv``)."""
    if opts.namesrv:
        return ClusterRpc(opts.namesrv, opts.timeout_s, connection=opts.connection)
    return BrokerRpc.for_options(opts)


def end_batch(opts: WriteOptions, prefix: str, summaries: list[WriteSummary], commit: bool) -> None:
    """The driver's side of a transactional batch: commit the halves the tasks reported, in
    partition and chunk order, or none; then roll back every other open half of ``prefix``.
    Requests of at most END_BATCH_HALVES; each is repeatable. Over a cluster, each group's
    halves on that group (and the roll-back on every group holding the topics)."""
    by_broker: dict[str, list[tuple[int, int]]] = {}
    for m in sorted(summaries, key=lambda m: m.partition_id):
        brokers = m.half_brokers or [""] * len(m.halves or ())
        for broker, r in zip(brokers, m.halves or (), strict=True):
            by_broker.setdefault(broker, []).append(r)
    # The topics bound what the END may touch (and what ACL checks PUB on): the option's, or
    # those the tasks wrote (a topic only failed attempts wrote is not rolled back here: the
    # broker's check-back discards those halves).
    topics = sorted({opts.topic} if opts.topic else {t for m in summaries for t in m.topics or ()})
    committed = rolled_back = before = 0
    with _connect(opts) as rpc:
        if isinstance(rpc, ClusterRpc):
            groups = {g for t in topics for g in rpc.groups_of(t)} | set(by_broker)
            targets = [(rpc.group_rpc(topics[0], g), by_broker.get(g, [])) for g in sorted(groups)]
        else:
            targets = [(rpc, by_broker.get("", []))]
        for target, ranges in targets:
            pieces = _pieces(ranges if commit else [])
            for i, piece in enumerate(pieces):
                reply = target.end_transactions(prefix, piece, commit, i == len(pieces) - 1, topics)
                committed += reply.committed
                rolled_back += reply.rolled_back
                before += reply.resolved_before
    log.info(
        "wharf sink %s: %d messages committed, %d half messages rolled back, %d resolved before",
        prefix,
        committed,
        rolled_back,
        before,
    )


def _pieces(ranges: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Ranges cut into requests of at most END_BATCH_HALVES halves (at least one request)."""
    pieces: list[list[tuple[int, int]]] = [[]]
    count = 0
    for first, n in ranges:
        if count + n > END_BATCH_HALVES and pieces[-1]:
            pieces.append([])
            count = 0
        pieces[-1].append((first, n))
        count += n
    return pieces


def _summarise(messages: list[WriterCommitMessage | None]) -> tuple[list[WriteSummary], int, int]:
    done = [m for m in messages if isinstance(m, WriteSummary)]
    return done, sum(m.sent for m in done), len(messages) - len(done)


class TopicBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, writer_id: str) -> None:
        self._opts = opts
        self._writer_id = writer_id  # made once on the driver; same for every task attempt

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_rows(self._opts, self._writer_id, 0, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        done, sent, _ = _summarise(messages)
        if self._opts.transactional:
            end_batch(self._opts, row_prefix(self._writer_id, 0), done, commit=True)
        log.info("wharf sink %s: %d messages stored", self._writer_id, sent)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done, sent, failed = _summarise(messages)
        if self._opts.transactional:
            end_batch(self._opts, row_prefix(self._writer_id, 0), done, commit=False)
            log.warning(
                "wharf sink %s: job aborted with %d failed tasks; its %d stored messages were "
                "rolled back",
                self._writer_id,
                failed,
                sent,
            )
            return
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

    def _prefix(self, done: list[WriteSummary], batch_id: int) -> str | None:
        """The batch's id prefix: from the option, else from the tasks (the query id is only
        known inside tasks)."""
        if self._opts.writer_id:
            return row_prefix(self._opts.writer_id, batch_id)
        return done[0].prefix if done else None

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done, sent, _ = _summarise(messages)
        prefix = self._prefix(done, batchId)
        if self._opts.transactional and prefix is not None:
            end_batch(self._opts, prefix, done, commit=True)
        log.info("wharf sink: batch %d: %d messages stored", batchId, sent)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done, sent, failed = _summarise(messages)
        prefix = self._prefix(done, batchId)
        if self._opts.transactional:
            if prefix is not None:
                end_batch(self._opts, prefix, done, commit=False)
            # Else no task finished: their halves are rolled back by the re-run's commit (same
            # query and batch id) or, never re-run, discarded by the broker's check-back.
            log.warning(
                "wharf sink: batch %d aborted (%d failed tasks); its half messages were rolled "
                "back (%d from finished tasks)",
                batchId,
                failed,
                sent,
            )
            return
        log.warning(
            "wharf sink: batch %d aborted (%d failed tasks); %d stored messages stay visible and "
            "are skipped when the batch is re-run",
            batchId,
            failed,
            sent,
        )
