"""Spark's own Kafka connector (``spark-sql-kafka-0-10``, the jars of
``tests/java/spark-kafka/pom.xml`` handed to ``spark.jars`` by ``conftest.py``) against the real
daemon's Kafka port, beside the project's own connector: a stream read with
``spark.readStream.format("kafka")`` and written by the Kafka sink to another topic with a
checkpoint, the query run to what is available, stopped, records added, and run again on the
same checkpoint: every record once in the output topic, the second run starting at the offsets
the first one ended at. The output is read back by Spark's batch Kafka source."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import BrokerProcess, Daemons
from tests.spark.conftest import KAFKA_CONNECTOR_JARS

pytestmark = pytest.mark.spark

SOURCE, SINK = "SK_IN", "SK_OUT"
PARTITIONS = 2


@pytest.fixture
def broker(daemons: Daemons, tmp_path: Path) -> Iterator[BrokerProcess]:
    if not any(KAFKA_CONNECTOR_JARS.glob("spark-sql-kafka-0-10_*.jar")):
        pytest.skip("Spark's Kafka connector is not fetched: run `make java-clients` (needs mvn)")
    with daemons.broker(tmp_path / "broker", extra_args=["--kafka-listen", "127.0.0.1:0"]) as b:
        admin = AdminClient({"bootstrap.servers": b.kafka_endpoint})
        for future in admin.create_topics(
            [NewTopic(t, PARTITIONS, 1) for t in (SOURCE, SINK)]
        ).values():
            future.result(15)
        yield b


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(start, start + count):
        producer.produce(SOURCE, key=f"k{i}", value=f"v{i}", partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def run_to_available(spark: Any, bootstrap: str, checkpoint: Path) -> dict[str, Any]:
    """One run of the streaming query (trigger availableNow) on ``checkpoint``: Kafka source ->
    each value tagged with its source partition and offset -> Kafka sink. Returns its last
    progress's source entry (start and end offsets)."""
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", SOURCE)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(
            "key",
            "CONCAT(CAST(value AS STRING), '@', partition, ':', offset) AS value",
        )
    )
    query = (
        stream.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", SINK)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert progress, query.recentProgress
    return {
        "start": progress[0]["sources"][0]["startOffset"],
        "end": progress[-1]["sources"][0]["endOffset"],
        "rows": sum(p["numInputRows"] for p in progress),
    }


def offsets(value: Any) -> dict[str, int] | None:
    """A progress offset (JSON text or dict, {topic: {partition: offset}}) for SOURCE; None
    for a first batch's "null" start."""
    parsed = json.loads(value) if isinstance(value, str) else value
    return None if parsed is None else {p: int(o) for p, o in parsed[SOURCE].items()}


def read_sink(spark: Any, bootstrap: str) -> list[tuple[str, str]]:
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", SINK)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")
        .collect()
    )
    return [(r[0], r[1]) for r in rows]


def test_a_kafka_stream_with_a_checkpoint_resumes_and_writes_each_record_once(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker.kafka_endpoint
    checkpoint = tmp_path / "checkpoint"
    produce(bootstrap, 0, 20)
    start = time.monotonic()
    first = run_to_available(spark, bootstrap, checkpoint)
    first_s = time.monotonic() - start
    assert first["rows"] == 20
    assert offsets(first["start"]) in (None, {"0": 0, "1": 0})  # earliest
    assert offsets(first["end"]) == {"0": 10, "1": 10}

    produce(bootstrap, 20, 10)
    second = run_to_available(spark, bootstrap, checkpoint)
    # Resumed from the checkpoint: where the first run ended, only the 10 new records.
    assert offsets(second["start"]) == {"0": 10, "1": 10}
    assert offsets(second["end"]) == {"0": 15, "1": 15}
    assert second["rows"] == 10

    out = read_sink(spark, bootstrap)
    counts = Counter(value for _, value in out)
    assert all(n == 1 for n in counts.values()), [v for v, n in counts.items() if n > 1]
    expected = {f"v{i}@{i % PARTITIONS}:{i // PARTITIONS}" for i in range(30)}
    assert set(counts) == expected  # every record once, tagged with its source offset
    assert sorted(out) == sorted((f"k{i}", f"v{i}@{i % 2}:{i // 2}") for i in range(30))
    assert first_s < 60
