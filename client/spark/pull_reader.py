"""Executor side of the ``wharf`` source: read one planned ``QueueRange`` over PullMessage.

Runs in a Spark Python worker: it only uses the partition and the options (never driver
state), opens its own channel, and pulls up to ``pullBatchSize`` (max 1024) messages per RPC
in ``raw_records`` mode (the stored records' bytes), with one pull in flight while the
previous reply is decoded, emitting Arrow batches of up to 8192 rows. Each reply is decoded
into the schema's columns at once (``record_columns``: ~1.5-2 us a 1 KiB row as Arrow arrays,
against ~3.5-5 us for one ``wharf.client.records`` message per row); exact tags are re-checked
there (the broker filters by tag hash in that mode). Replies of MessageViews (a broker without
``raw_records``) and malformed records take the per-row path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from typing import Any

from pyspark.sql.types import StructType
from wharf.client.consumer.pull_wire import PullReply
from wharf.client.message import ReceivedMessage
from wharf.client.records import exact_tags, messages_from_reply
from wharf.client.spark.cluster_rpc import connect, split_key
from wharf.client.spark.columns import ColumnBuffer
from wharf.client.spark.offsets import DataLossError, QueueRange
from wharf.client.spark.options import ReadOptions
from wharf.client.spark.record_columns import decode_reply_columns
from wharf.client.spark.rpc import PendingPull
from wharf.v1 import messaging_pb2

log = logging.getLogger(__name__)

_FOUND = messaging_pb2.FOUND
_NO_MATCHED = messaging_pb2.NO_MATCHED_MSG
_NO_NEW = messaging_pb2.NO_NEW_MSG
_ILLEGAL = messaging_pb2.OFFSET_ILLEGAL

# Rows per Arrow batch handed to Spark: several pull answers (<= 1024 each) per batch, as
# Spark's own tuple path batches 10,000 rows; small batches cost more on the JVM side.
_ROWS_PER_BATCH = 8192


def _lost(opts: ReadOptions, r: QueueRange, what: str) -> None:
    if opts.fail_on_data_loss:
        raise DataLossError(
            f"{what} while reading {r.topic}/{r.queue_id} [{r.start}, {r.end}). "
            "Set failOnDataLoss=false to skip lost offsets with a warning."
        )
    log.warning("wharf source: %s; skipping (failOnDataLoss=false)", what)


_offset_of = attrgetter("queue_offset")
# Column -> how to read it from a message (client.records reads each field lazily, so
# columns the schema leaves out cost nothing). Timestamps in microseconds (Arrow's unit).
_EXTRACTORS: dict[str, Callable[[ReceivedMessage], Any]] = {
    "offset": _offset_of,
    "body": attrgetter("body"),  # decompressed
    "tags": attrgetter("tags"),
    "keys": attrgetter("keys"),
    # Without the system properties (KEYS, TAGS, UNIQ_KEY): they have their own columns.
    "properties": attrgetter("properties"),
    "msgId": attrgetter("msg_id"),
    "bornTimestamp": lambda m: m.born_timestamp * 1000,
    "storeTimestamp": lambda m: m.store_timestamp * 1000,
}


class _RangeColumns:
    """Turns the messages of one queue range into the source's columns, one comprehension
    per column the schema asks for."""

    def __init__(
        self, buffer: ColumnBuffer, r: QueueRange, include_properties: bool, arrow: bool = True
    ) -> None:
        self.buffer = buffer
        self._arrow = arrow
        self._range = r
        names = set(buffer.names)
        if not include_properties:
            names.discard("properties")
        # ``properties`` first: it parses the properties once, and tags/keys are then read
        # from that dict instead of being searched for in the record.
        self._columns = sorted(
            (name for name in _EXTRACTORS if name in names), key=lambda n: n != "properties"
        )
        self._topic = "topic" in names
        self._queue_id = "queueId" in names

    def add_reply(self, reply: PullReply, tag_expression: str, offset: int) -> int:
        """Add the rows of one FOUND reply; returns the queue offset of its first message
        (``offset`` when it has none). Raw records are decoded per reply
        (``record_columns``); MessageViews (an older broker) and malformed records take the
        per-row path (which raises the precise error for the latter)."""
        if reply.records_end > reply.records_start:
            decoded = decode_reply_columns(
                reply.buffer,
                reply.records_start,
                reply.records_end,
                self._columns,
                exact_tags(tag_expression),
                self._range.end,
                self._arrow,
            )
            if decoded is not None:
                if decoded.rows:
                    self._extend(decoded.rows, decoded.columns, self._arrow)
                return offset if decoded.first_offset is None else decoded.first_offset
        messages = messages_from_reply(reply, tag_expression)
        first = messages[0].queue_offset if messages else offset
        self.add(messages)
        return first

    def add(self, messages: Sequence[ReceivedMessage]) -> None:
        """The per-row path: one attribute read per column and message."""
        end = self._range.end
        if messages and _offset_of(messages[-1]) >= end:
            # A tag-filtered pull may return matches past the planned range.
            messages = [m for m in messages if _offset_of(m) < end]
        rows = len(messages)
        if not rows:
            return
        columns = {name: list(map(_EXTRACTORS[name], messages)) for name in self._columns}
        self._extend(rows, columns)

    def _extend(self, rows: int, columns: dict[str, Any], arrays: bool = False) -> None:
        # Every record of a ConsumeQueue belongs to its topic and queue.
        if self._topic:  # the topic, not a cluster's "<topic>@<broker>" queue key
            columns["topic"] = [split_key(self._range.topic)[0]] * rows
        if self._queue_id:
            columns["queueId"] = [self._range.queue_id] * rows
        if arrays:
            self.buffer.extend_arrays(rows, columns)
        else:
            self.buffer.extend(rows, columns)


def read_queue_range(opts: ReadOptions, schema: StructType, r: QueueRange) -> Iterator[Any]:
    """Yield Arrow batches (or tuples with ``arrowBatches=false``) for ``[r.start, r.end)``."""
    buffer = ColumnBuffer(schema)
    columns = _RangeColumns(buffer, r, opts.include_properties, opts.arrow_batches)
    match_all = opts.tag_expression in ("", "*")
    offset = r.start
    with connect(opts) as rpc:

        def start_pull(at: int) -> PendingPull:
            want = min(opts.pull_batch_size, r.end - at)
            return rpc.start_pull_records(
                opts.consumer_group, r.topic, r.queue_id, at, want, opts.tag_expression
            )

        # One pull in flight while the previous reply is decoded and handed to Spark: the
        # next offset is known as soon as a FOUND reply arrives.
        pending = start_pull(offset) if offset < r.end else None
        while pending is not None:
            reply = pending.result()
            pending = None
            status = reply.status
            if status == _FOUND:
                next_offset = reply.next_begin_offset
                if offset < next_offset < r.end:
                    pending = start_pull(next_offset)
                first = columns.add_reply(reply, opts.tag_expression, offset)
                if match_all and first > offset:
                    # Without a tag filter every offset yields a message: a jump is a hole
                    # (retention raced this read, or the ConsumeQueue lost units).
                    _lost(opts, r, f"offsets [{offset}, {first}) are missing")
            elif status == _NO_MATCHED:
                next_offset = reply.next_begin_offset  # filtered out: move on, emit nothing
            elif status == _ILLEGAL and offset < reply.min_offset:
                _lost(
                    opts,
                    r,
                    f"offsets [{offset}, {min(reply.min_offset, r.end)}) were removed by "
                    f"retention (queue min offset is now {reply.min_offset})",
                )
                next_offset = reply.min_offset
            else:
                # NO_NEW_MSG or past the max: the broker has fewer messages than were planned
                # (e.g. a crash lost unflushed ASYNC_FLUSH data). Never wait for them.
                _lost(
                    opts,
                    r,
                    f"the queue ends at {reply.max_offset}, before the planned end {r.end}",
                )
                break
            if next_offset <= offset:
                raise RuntimeError(
                    f"broker did not advance {r.topic}/{r.queue_id} past offset {offset} "
                    f"(status {messaging_pb2.PullStatus.Name(status)})"
                )
            offset = next_offset
            if pending is None and offset < r.end:
                pending = start_pull(offset)
            if buffer.rows >= _ROWS_PER_BATCH:
                yield from _drain(buffer, opts.arrow_batches)
        if buffer.rows:
            yield from _drain(buffer, opts.arrow_batches)


def _drain(buffer: ColumnBuffer, arrow: bool) -> Iterator[Any]:
    if arrow:
        yield buffer.to_arrow()
    else:
        yield from buffer.to_tuples()
