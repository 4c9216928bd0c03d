"""Output schemas and a columnar accumulator that turns messages into Arrow batches or tuples.

Arrow batches are checked by Spark against ``to_arrow_schema(schema, timezone="UTC")``
exactly, so the Arrow schema is derived from the Spark schema the same way. Timestamps
travel as microseconds since the epoch (UTC).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def _topic_fields(include_properties: bool) -> list[StructField]:
    fields = [
        StructField("topic", StringType()),
        StructField("queueId", IntegerType()),
        StructField("offset", LongType()),
        StructField("body", BinaryType()),
        StructField("tags", StringType()),
        StructField("keys", ArrayType(StringType())),
    ]
    if include_properties:
        fields.append(StructField("properties", MapType(StringType(), StringType())))
    fields += [
        StructField("msgId", StringType()),
        StructField("bornTimestamp", TimestampType()),
        StructField("storeTimestamp", TimestampType()),
    ]
    return fields


def topic_schema(include_properties: bool) -> StructType:
    """Schema of the ``wharf`` source: the properties map only when asked (includeProperties).
    Built as a StructType, not DDL: parsing DDL needs a running SparkContext."""
    return StructType(_topic_fields(include_properties))


def store_schema() -> StructType:
    """Schema of the ``wharf-store`` scan: the topic schema with properties, plus where the
    record sits in the CommitLog and, for a record that failed its checks, why (else null)."""
    return StructType(
        [
            *_topic_fields(True),
            StructField("commitLogOffset", LongType()),
            StructField("corruptReason", StringType()),
        ]
    )


KNOWN_COLUMNS = frozenset(
    [
        "topic",
        "queueId",
        "offset",
        "body",
        "tags",
        "keys",
        "properties",
        "msgId",
        "bornTimestamp",
        "storeTimestamp",
        "commitLogOffset",
        "corruptReason",
    ]
)


def check_schema(schema: StructType, allowed: frozenset[str]) -> None:
    unknown = [f.name for f in schema.fields if f.name not in allowed]
    if unknown:
        raise ValueError(
            f"unknown column(s) {unknown} in the schema given to the wharf source; "
            f"known columns: {sorted(allowed)}"
        )


def _to_array(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    if pa.types.is_map(arrow_type):
        values = [None if v is None else list(v.items()) for v in values]
    return pa.array(values, type=arrow_type)


def _ms_to_datetime(ms: int | None) -> dt.datetime | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000.0, tz=dt.UTC)


class ColumnBuffer:
    """Rows accumulated column by column (lists), emitted as one Arrow batch or as tuples."""

    def __init__(self, schema: StructType) -> None:
        self.schema = schema
        self.names = [f.name for f in schema.fields]
        self.columns: dict[str, list[Any]] = {name: [] for name in KNOWN_COLUMNS}
        self.rows = 0
        self._arrow_schema = to_arrow_schema(schema, timezone="UTC")
        # Rows added as Arrow arrays (``extend_arrays``), in order with the list rows: the
        # lists always hold the newest rows.
        self._chunks: list[pa.RecordBatch] = []
        self._list_rows = 0

    def append(
        self,
        topic: str | None,
        queue_id: int | None,
        offset: int | None,
        body: bytes | None,
        tags: str | None,
        keys: list[str] | None,
        properties: dict[str, str] | None,
        msg_id: str | None,
        born_ms: int | None,
        store_ms: int | None,
        commit_log_offset: int | None = None,
        corrupt_reason: str | None = None,
    ) -> None:
        c = self.columns
        c["topic"].append(topic)
        c["queueId"].append(queue_id)
        c["offset"].append(offset)
        c["body"].append(body)
        c["tags"].append(tags)
        c["keys"].append(keys)
        c["properties"].append(properties)
        c["msgId"].append(msg_id)
        # Arrow timestamps in microseconds (the unit Spark's TimestampType maps to).
        c["bornTimestamp"].append(None if born_ms is None else born_ms * 1000)
        c["storeTimestamp"].append(None if store_ms is None else store_ms * 1000)
        c["commitLogOffset"].append(commit_log_offset)
        c["corruptReason"].append(corrupt_reason)
        self.rows += 1
        self._list_rows += 1

    def extend(self, rows: int, columns: Mapping[str, list[Any]]) -> None:
        """Add ``rows`` rows given column by column (cheaper than ``append`` per row: the
        caller builds each column in one comprehension). Columns not given are null;
        timestamps are microseconds here (``append`` takes milliseconds)."""
        for name, values in self.columns.items():
            given = columns.get(name)
            if given is None:
                values.extend([None] * rows)
            else:
                if len(given) != rows:
                    raise ValueError(f"column {name!r} has {len(given)} values, expected {rows}")
                values.extend(given)
        self.rows += rows
        self._list_rows += rows

    def extend_arrays(self, rows: int, columns: Mapping[str, pa.Array | list[Any]]) -> None:
        """Add ``rows`` rows given as Arrow arrays of the schema's Arrow types (or lists, as
        ``extend`` takes them); columns not given are null. Emitted by ``to_arrow`` only."""
        self._flush_lists()
        arrays = []
        for field in self._arrow_schema:
            given = columns.get(field.name)
            if given is None:
                arrays.append(pa.nulls(rows, field.type))
                continue
            if len(given) != rows:
                raise ValueError(f"column {field.name!r} has {len(given)} values, expected {rows}")
            if not isinstance(given, pa.Array):
                given = _to_array(given, field.type)
            arrays.append(given)
        self._chunks.append(pa.RecordBatch.from_arrays(arrays, schema=self._arrow_schema))
        self.rows += rows

    def _flush_lists(self) -> None:
        if not self._list_rows:
            return
        arrays = [_to_array(self.columns[f.name], f.type) for f in self._arrow_schema]
        self._chunks.append(pa.RecordBatch.from_arrays(arrays, schema=self._arrow_schema))
        for values in self.columns.values():
            values.clear()
        self._list_rows = 0

    def clear(self) -> None:
        for values in self.columns.values():
            values.clear()
        self._chunks.clear()
        self.rows = 0
        self._list_rows = 0

    def to_arrow(self) -> pa.RecordBatch:
        self._flush_lists()
        chunks = self._chunks
        if len(chunks) == 1:
            batch = chunks[0]
        elif chunks:
            batch = pa.concat_batches(chunks)
        else:
            arrays = [pa.array([], type=f.type) for f in self._arrow_schema]
            batch = pa.RecordBatch.from_arrays(arrays, schema=self._arrow_schema)
        self.clear()
        return batch

    def to_tuples(self) -> Iterator[tuple[Any, ...]]:
        if self._chunks:
            raise RuntimeError("rows added as Arrow arrays are emitted by to_arrow only")
        columns = []
        for name in self.names:
            values = self.columns[name]
            if name in ("bornTimestamp", "storeTimestamp"):
                values = [_ms_to_datetime(None if v is None else v // 1000) for v in values]
            elif name == "keys":  # lists, as Spark's row conversion expects for arrays
                values = [None if v is None else list(v) for v in values]
            columns.append(list(values))
        self.clear()
        return iter(list(zip(*columns, strict=True)))
