"""Driver side of the ``wharf`` source: plan queue ranges for batch and streaming reads.

Batch: ``partitions()`` resolves startingOffsets/endingOffsets (or startingTimestamp) against
the broker's queue bounds once. Streaming: offsets live in Spark's checkpoint (the source of
truth); ``latestOffset`` applies admission control (maxOffsetsPerTrigger, split across queues
in proportion to lag) and the availableNow target; ``partitions`` re-checks retention.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType
from wharf.client.spark.cluster_rpc import ClusterRpc, connect
from wharf.client.spark.offsets import (
    OffsetMap,
    QueueKey,
    QueueRange,
    bounds_by_key,
    cap_by_max_rows,
    check_retention,
    decode_offsets,
    encode_offsets,
    plan_ranges,
    resolve_offsets,
    split_ranges,
)
from wharf.client.spark.options import ReadOptions
from wharf.client.spark.pull_reader import read_queue_range
from wharf.client.spark.rpc import BrokerRpc, QueueBounds

log = logging.getLogger(__name__)


def fetch_bounds(opts: ReadOptions, rpc: BrokerRpc | ClusterRpc) -> dict[QueueKey, QueueBounds]:
    bounds: list[QueueBounds] = []
    for topic in opts.topics:
        found = rpc.queue_bounds(topic)
        if not found:
            log.warning("wharf source: topic %r has no queues on %s yet", topic, rpc.endpoint)
        bounds.extend(found)
    return bounds_by_key(bounds)


def _starting_offsets(
    opts: ReadOptions, rpc: BrokerRpc | ClusterRpc, bounds: dict[QueueKey, QueueBounds]
) -> OffsetMap:
    return resolve_offsets(opts.starting, bounds, opts.starting_timestamp, rpc.search_offset)


class TopicBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self._opts = opts
        self._schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        opts = self._opts
        with connect(opts) as rpc:
            bounds = fetch_bounds(opts, rpc)
            start = _starting_offsets(opts, rpc, bounds)
        end = resolve_offsets(opts.ending, bounds)
        for key, first in start.items():
            if first > end[key]:
                raise ValueError(
                    f"startingOffsets {first} is after endingOffsets {end[key]} for "
                    f"{key[0]}/{key[1]}"
                )
        ranges = plan_ranges(start, end, bounds)
        ranges = check_retention(ranges, bounds, opts.fail_on_data_loss)
        return split_ranges(ranges, opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueueRange)
        return read_queue_range(self._opts, self._schema, partition)


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One instance lives in a long-running Python process on the driver (offsets, planning);
    ``read`` runs on another, pickled instance in executors and uses only the partition."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self._opts = opts
        self._schema = schema
        self._target: OffsetMap | None = None  # availableNow: never read past this

    def _bounds(self) -> dict[QueueKey, QueueBounds]:
        with connect(self._opts) as rpc:
            return fetch_bounds(self._opts, rpc)

    def initialOffset(self) -> dict:
        with connect(self._opts) as rpc:
            bounds = fetch_bounds(self._opts, rpc)
            start = _starting_offsets(self._opts, rpc, bounds)
        return encode_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        bounds = self._bounds()
        self._target = {key: b.max_offset for key, b in bounds.items()}
        log.info("wharf source: availableNow target %s", encode_offsets(self._target))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = decode_offsets(start)
        bounds = self._bounds()
        latest: OffsetMap = {key: b.max_offset for key, b in bounds.items()}
        if self._target is not None:
            # Queues that appeared after the availableNow target are not read in this run.
            latest = {
                key: min(v, self._target[key]) for key, v in latest.items() if key in self._target
            }
        # A queue new to this query starts at its earliest offset.
        begin_all = {key: begin.get(key, bounds[key].min_offset) for key in latest}
        # Never move backwards (e.g. a queue's max briefly below a checkpointed offset).
        latest = {key: max(v, begin_all[key]) for key, v in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = cap_by_max_rows(begin_all, latest, limit.max_rows)
        # Keep queues the broker no longer reports, so their offsets stay in the checkpoint.
        end = {**begin, **latest}
        return encode_offsets(end)

    def reportLatestOffset(self) -> dict | None:
        return encode_offsets({key: b.max_offset for key, b in self._bounds().items()})

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = decode_offsets(start), decode_offsets(end)
        bounds = self._bounds()
        ranges = plan_ranges(begin, stop, bounds)
        if not ranges:
            return []
        ranges = check_retention(ranges, bounds, self._opts.fail_on_data_loss)
        return split_ranges(ranges, self._opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueueRange)
        return read_queue_range(self._opts, self._schema, partition)

    def commit(self, end: dict) -> None:
        """Spark finished every batch up to ``end``. Spark's checkpoint stays the source of
        truth; with ``progressGroup`` the offsets are mirrored to that consumer group so
        ``wharf group progress`` shows the query's lag. commit trails by one batch, so the
        mirror does too."""
        group = self._opts.progress_group
        if group is None:
            return
        with connect(self._opts) as rpc:
            for (topic, queue_id), offset in sorted(decode_offsets(end).items()):
                rpc.update_consumer_offset(group, topic, queue_id, offset)
