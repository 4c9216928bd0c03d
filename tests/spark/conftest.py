"""One session-scoped local SparkSession for every Spark test (JVM start-up costs seconds).

Environment first (before the JVM starts): workers must run this interpreter (it has pyarrow
and the project installed) and everything binds to 127.0.0.1. ``local[2,2]`` gives every task
one retry, which the idempotent-sink test relies on (plain local[N] never retries).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.harness import REPO_ROOT

pyspark = pytest.importorskip("pyspark")

# spark-sql-kafka-0-10 and what it needs beyond PySpark's own jars, copied there by Maven from
# tests/java/spark-kafka/pom.xml (test_spark_kafka_connector.py skips without them).
KAFKA_CONNECTOR_JARS = REPO_ROOT / "tests" / "java" / "target" / "spark-kafka" / "jars"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession
    from wharf.client.spark import register

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = SparkSession.builder
    if KAFKA_CONNECTOR_JARS.is_dir():  # Spark's own Kafka source/sink (make java-clients)
        jars = sorted(str(p) for p in KAFKA_CONNECTOR_JARS.glob("*.jar"))
        builder = builder.config("spark.jars", ",".join(jars))
    session = (
        builder.master("local[2,2]")
        .appName("wharf-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
