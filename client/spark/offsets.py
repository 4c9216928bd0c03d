"""Offset planning, pure functions (no I/O): resolve start/end offsets per queue, cap a
micro-batch with ``maxOffsetsPerTrigger``, split ranges for ``minPartitions``, check ranges
against retention (``failOnDataLoss``), and (de)serialise offsets for Spark's checkpoint.

Offsets are logical ConsumeQueue offsets. In Spark's checkpoint they are JSON
``{"topic": {"<queueId>": next offset}}``: string queue keys, because JSON object keys come
back from the checkpoint as strings anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition
from wharf.client.spark.options import EARLIEST, LATEST, OffsetSpec
from wharf.client.spark.rpc import QueueBounds

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]
OffsetMap = dict[QueueKey, int]


class DataLossError(RuntimeError):
    """Offsets a query needs were removed by retention (or never stored)."""


@dataclass(frozen=True, slots=True)
class QueueRange(InputPartition):
    """One Spark partition: ``[start, end)`` of one queue."""

    topic: str
    queue_id: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def encode_offsets(offsets: Mapping[QueueKey, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, queue_id), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(queue_id)] = int(offset)
    return out


def decode_offsets(raw: Mapping[str, Mapping[str, int]] | None) -> OffsetMap:
    if not raw:
        return {}
    return {
        (topic, int(queue)): int(offset)
        for topic, queues in raw.items()
        for queue, offset in queues.items()
    }


def bounds_by_key(bounds: Iterable[QueueBounds]) -> dict[QueueKey, QueueBounds]:
    return {(b.topic, b.queue_id): b for b in bounds}


def resolve_offsets(
    spec: OffsetSpec,
    bounds: Mapping[QueueKey, QueueBounds],
    timestamp_ms: int | None = None,
    search: Callable[[str, int, int], int] | None = None,
) -> OffsetMap:
    """Concrete offsets for every known queue. A timestamp (startingTimestamp) wins over the
    spec and is looked up with ``search(topic, queue, ts)`` (the broker's SearchOffset).
    Explicit offsets are clamped to the queue's max; offsets below the min are kept so
    that the data-loss check can see them."""
    resolved: OffsetMap = {}
    for key, b in bounds.items():
        if timestamp_ms is not None:
            assert search is not None, "a timestamp needs the SearchOffset call"
            offset = search(b.topic, b.queue_id, timestamp_ms)
        else:
            wanted = spec.lookup(*key)
            if wanted == EARLIEST:
                offset = b.min_offset
            elif wanted == LATEST:
                offset = b.max_offset
            else:
                offset = wanted
        resolved[key] = min(max(offset, 0), b.max_offset)
    return resolved


def cap_by_max_rows(start: Mapping[QueueKey, int], latest: OffsetMap, max_rows: int) -> OffsetMap:
    """End offsets covering at most ``max_rows`` messages, split across queues in proportion to
    their lag (as spark-sql-kafka does with maxOffsetsPerTrigger). Largest remainders get the
    leftover rows, so the whole budget is used and every lagging queue progresses eventually."""
    lags = {k: latest[k] - start.get(k, latest[k]) for k in latest}
    total = sum(lag for lag in lags.values() if lag > 0)
    if total <= max_rows:
        return dict(latest)
    grants: dict[QueueKey, int] = {}
    remainders: list[tuple[int, QueueKey]] = []
    for key, lag in sorted(lags.items()):
        if lag <= 0:
            grants[key] = 0
            continue
        share, remainder = divmod(max_rows * lag, total)
        grants[key] = share
        remainders.append((remainder, key))
    leftover = max_rows - sum(grants.values())
    for _, key in sorted(remainders, key=lambda item: (-item[0], item[1])):
        if leftover <= 0:
            break
        if grants[key] < lags[key]:
            grants[key] += 1
            leftover -= 1
    return {k: (start.get(k, latest[k]) + grants[k]) if lags[k] > 0 else latest[k] for k in latest}


def split_ranges(ranges: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """Split ranges so there are at least ``min_partitions`` Spark tasks (when the ranges hold
    that many offsets): each range into parts proportional to its share of the total."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[QueueRange] = []
    for r in ranges:
        parts = max(1, min(r.size, -(-r.size * min_partitions // total)))  # ceil: >= min
        for i in range(parts):
            lo = r.start + r.size * i // parts
            hi = r.start + r.size * (i + 1) // parts
            if hi > lo:
                out.append(QueueRange(r.topic, r.queue_id, lo, hi))
    return out


def check_retention(
    ranges: list[QueueRange],
    bounds: Mapping[QueueKey, QueueBounds],
    fail_on_data_loss: bool,
) -> list[QueueRange]:
    """Compare each range with the queue's current min offset (retention moves it up).
    ``fail_on_data_loss``: raise DataLossError naming the lost offsets; otherwise log a warning
    and keep what is left of the range."""
    kept: list[QueueRange] = []
    for r in ranges:
        b = bounds.get((r.topic, r.queue_id))
        if b is None:
            lost = f"queue {r.topic}/{r.queue_id} no longer exists on the broker"
            lo = r.end
        elif r.start < b.min_offset:
            lo = min(b.min_offset, r.end)
            lost = (
                f"offsets [{r.start}, {lo}) of {r.topic}/{r.queue_id} were removed by "
                f"retention (queue min offset is now {b.min_offset})"
            )
        else:
            kept.append(r)
            continue
        if fail_on_data_loss:
            raise DataLossError(
                f"{lost}. Set failOnDataLoss=false to skip them with a warning, or start from "
                "'earliest'."
            )
        log.warning("wharf source: %s; skipping them (failOnDataLoss=false)", lost)
        if lo < r.end:
            kept.append(QueueRange(r.topic, r.queue_id, lo, r.end))
    return kept


def plan_ranges(
    start: Mapping[QueueKey, int],
    end: Mapping[QueueKey, int],
    bounds: Mapping[QueueKey, QueueBounds],
) -> list[QueueRange]:
    """One range per queue with something to read. A queue missing from ``start`` appeared
    after the previous batch: it reads from its earliest offset (Kafka does the same for new
    partitions), which is not data loss."""
    ranges = []
    for key, stop in sorted(end.items()):
        first = start.get(key)
        if first is None:
            b = bounds.get(key)
            first = b.min_offset if b is not None else 0
        if stop > first:
            ranges.append(QueueRange(key[0], key[1], first, stop))
    return ranges
