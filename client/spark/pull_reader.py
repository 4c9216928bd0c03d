"""Executor side of the ``wharf`` source: read one planned ``QueueRange`` over PullMessage.

Runs in a Spark Python worker: it only uses the partition and the options (never driver
state), opens its own channel, and pulls up to ``pullBatchSize`` (max 1024) messages per RPC
in ``raw_records`` mode (the stored records' bytes, decoded lazily by ``client.records``,
which also re-checks exact tags: the broker filters by tag hash in that mode), emitting
Arrow batches of up to 8192 rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.types import StructType
from wharf.v1 import messaging_pb2

from client.message import ReceivedMessage
from client.records import messages_from_reply
from client.spark.columns import ColumnBuffer
from client.spark.offsets import DataLossError, QueueRange
from client.spark.options import ReadOptions
from client.spark.rpc import BrokerRpc

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


def _append_messages(
    buffer: ColumnBuffer,
    messages: Sequence[ReceivedMessage],
    end: int,
    include_properties: bool,
) -> None:
    """Rows of the source's schema; ``body`` decompressed, ``properties`` without the system
    ones (KEYS, TAGS, UNIQ_KEY: they have their own columns)."""
    append = buffer.append
    for m in messages:
        offset = m.queue_offset
        if offset >= end:
            break  # a tag-filtered pull may return matches past the planned range
        append(
            m.queue_topic,
            m.queue_id,
            offset,
            m.body,
            m.tags,
            list(m.keys),
            m.properties if include_properties else None,
            m.msg_id,
            m.born_timestamp,
            m.store_timestamp,
        )


def read_queue_range(opts: ReadOptions, schema: StructType, r: QueueRange) -> Iterator[Any]:
    """Yield Arrow batches (or tuples with ``arrowBatches=false``) for ``[r.start, r.end)``."""
    buffer = ColumnBuffer(schema)
    match_all = opts.tag_expression in ("", "*")
    offset = r.start
    with BrokerRpc(opts.endpoints, opts.timeout_s) as rpc:
        while offset < r.end:
            want = min(opts.pull_batch_size, r.end - offset)
            reply = rpc.pull_records(
                opts.consumer_group, r.topic, r.queue_id, offset, want, opts.tag_expression
            )
            status = reply.status
            if status == _FOUND:
                messages = messages_from_reply(reply, opts.tag_expression)
                first = messages[0].queue_offset if messages else offset
                if match_all and first > offset:
                    # Without a tag filter every offset yields a message: a jump is a hole
                    # (retention raced this read, or the ConsumeQueue lost units).
                    _lost(opts, r, f"offsets [{offset}, {first}) are missing")
                _append_messages(buffer, messages, r.end, opts.include_properties)
                next_offset = reply.next_begin_offset
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
            if buffer.rows >= _ROWS_PER_BATCH:
                yield from _drain(buffer, opts.arrow_batches)
        if buffer.rows:
            yield from _drain(buffer, opts.arrow_batches)


def _drain(buffer: ColumnBuffer, arrow: bool) -> Iterator[Any]:
    if arrow:
        yield buffer.to_arrow()
    else:
        yield from buffer.to_tuples()
