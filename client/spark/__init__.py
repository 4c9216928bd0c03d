"""PySpark connector for Wharf (PySpark 4.3 Python Data Source API).

    from wharf.client.spark import register
    register(spark)                      # formats "wharf" and "wharf-store"
    df = spark.read.format("wharf").option("endpoints", "127.0.0.1:8081").option("topic", "t").load()

Importing this package does not import pyspark; ``register`` does.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``wharf`` (topics over gRPC) and ``wharf-store`` (offline CommitLog scan)
    data sources on a SparkSession."""
    from wharf.client.spark.sources import WharfDataSource, WharfStoreDataSource

    spark.dataSource.register(WharfDataSource)
    spark.dataSource.register(WharfStoreDataSource)


__all__ = ["register"]
