"""The two Spark data sources: ``wharf`` (topics over gRPC) and ``wharf-store`` (offline
CommitLog scan). Constructors stay cheap: Spark builds these in several Python processes."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType
from wharf.client.spark.columns import KNOWN_COLUMNS, check_schema, store_schema, topic_schema
from wharf.client.spark.options import (
    OptionError,
    new_writer_id,
    parse_read_options,
    parse_write_options,
)


class WharfDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("wharf")``; options as in
    spark-sql-kafka (see client/spark/README.md)."""

    @classmethod
    def name(cls) -> str:
        return "wharf"

    def schema(self) -> StructType:
        include = str(self.options.get("includeProperties", "false")).lower() == "true"
        return topic_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        from wharf.client.spark.topic_readers import TopicBatchReader

        check_schema(schema, KNOWN_COLUMNS - {"commitLogOffset", "corruptReason"})
        return TopicBatchReader(parse_read_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from wharf.client.spark.topic_readers import TopicStreamReader

        check_schema(schema, KNOWN_COLUMNS - {"commitLogOffset", "corruptReason"})
        return TopicStreamReader(parse_read_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from wharf.client.spark.topic_writers import TopicBatchWriter, check_write_schema

        if overwrite:
            raise OptionError("the wharf sink only appends to topics: use mode('append')")
        opts = parse_write_options(self.options)
        check_write_schema(schema, opts)
        return TopicBatchWriter(opts, opts.writer_id or new_writer_id())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from wharf.client.spark.topic_writers import TopicStreamWriter, check_write_schema

        opts = parse_write_options(self.options)
        check_write_schema(schema, opts)
        return TopicStreamWriter(opts)


class WharfStoreDataSource(DataSource):
    """``spark.read.format("wharf-store").load(<store dir>)``: decode CommitLog segments with
    the store's own codec, no daemon. Option ``corruptRecords``: ``fail`` (default) or
    ``report`` (corrupt records become rows with ``corruptReason`` set)."""

    @classmethod
    def name(cls) -> str:
        return "wharf-store"

    def schema(self) -> StructType:
        return store_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        from wharf.client.spark.store_scan import StoreScanReader, parse_scan_options

        check_schema(schema, KNOWN_COLUMNS)
        return StoreScanReader(parse_scan_options(self.options), schema)
