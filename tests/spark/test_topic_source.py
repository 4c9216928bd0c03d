"""The ``wharf`` source against a real broker daemon: batch reads and Structured Streaming."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import BrokerProcess, Daemons
from tests.spark.wire import committed_offsets, send, wait_until_visible

pytestmark = pytest.mark.spark

QUEUES = 4


@pytest.fixture
def broker(daemons: Daemons, tmp_path: Path) -> Iterator[BrokerProcess]:
    with daemons.broker(tmp_path / "broker", settings={"defaultTopicQueueNums": QUEUES}) as b:
        yield b


def source(spark, broker: BrokerProcess, topic: str, **options: object):
    reader = spark.read.format("wharf").option("endpoints", broker.endpoint)
    reader = reader.option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


def fill(broker: BrokerProcess, topic: str, per_queue: int, prefix: str = "m") -> dict:
    """``per_queue`` messages into every queue; returns {queue: [(offset, body, msg id)]}."""
    sent: dict[int, list[tuple[int, bytes, str]]] = {}
    for q in range(QUEUES):
        bodies = [f"{prefix}-{q}-{i}".encode() * (1 + i % 3) for i in range(per_queue)]
        results = send(broker.endpoint, topic, bodies, queue_id=q, tags=f"t{q % 2}", keys=[f"k{q}"])
        sent[q] = [(r.queue_offset, b, r.msg_id) for r, b in zip(results, bodies, strict=True)]
    wait_until_visible(broker.endpoint, topic, QUEUES * per_queue)
    return sent


def by_queue(rows) -> dict[int, list[tuple[int, bytes, str]]]:
    out: dict[int, list[tuple[int, bytes, str]]] = {}
    for r in sorted(rows, key=lambda r: (r.queueId, r.offset)):
        out.setdefault(r.queueId, []).append((r.offset, bytes(r.body), r.msgId))
    return out


def test_batch_read_equals_what_was_sent(spark, broker: BrokerProcess) -> None:
    sent = fill(broker, "orders", per_queue=60)
    compressed = send(broker.endpoint, "orders", [b"z" * 500], queue_id=0, compress=True)
    sent[0].append((compressed[0].queue_offset, b"z" * 500, compressed[0].msg_id))
    wait_until_visible(broker.endpoint, "orders", QUEUES * 60 + 1)

    rows = source(spark, broker, "orders").collect()

    assert len(rows) == QUEUES * 60 + 1
    assert by_queue(rows) == sent  # counts, bodies, msg ids and per-queue order
    first = next(r for r in rows if r.queueId == 1 and r.offset == 0)
    assert (first.topic, first.tags, list(first.keys)) == ("orders", "t1", ["k1"])
    assert first.storeTimestamp is not None and first.bornTimestamp is not None
    assert "properties" not in rows[0].asDict()


def test_offset_ranges_tags_properties_and_min_partitions(spark, broker: BrokerProcess) -> None:
    sent = fill(broker, "orders", per_queue=40)
    send(broker.endpoint, "orders", [b"p"], queue_id=3, properties={"region": "eu"})
    wait_until_visible(broker.endpoint, "orders", QUEUES * 40 + 1)

    ranged = source(
        spark, broker, "orders",
        startingOffsets='{"orders": {"0": 10, "2": -2}}',
        endingOffsets='{"orders": {"0": 15, "1": 5, "2": 3, "3": 0}}',
    ).collect()  # fmt: skip
    assert by_queue(ranged) == {0: sent[0][10:15], 1: sent[1][:5], 2: sent[2][:3]}

    tagged = source(spark, broker, "orders", tagExpression="t1").collect()
    assert {r.queueId for r in tagged} == {1, 3}
    assert len(tagged) == 2 * 40  # the untagged message in queue 3 does not match

    df = source(spark, broker, "orders", minPartitions=10, includeProperties="true")
    assert df.rdd.getNumPartitions() >= 10
    rows = df.collect()
    assert len(rows) == QUEUES * 40 + 1
    assert next(r for r in rows if r.body == b"p").properties == {"region": "eu"}


def test_starting_timestamp_uses_the_broker_search(spark, broker: BrokerProcess) -> None:
    fill(broker, "orders", per_queue=5, prefix="old")
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    fill(broker, "orders", per_queue=7, prefix="new")  # visible count is cumulative: fine

    rows = source(spark, broker, "orders", startingTimestamp=cut).collect()
    assert len(rows) == QUEUES * 7
    assert all(bytes(r.body).startswith(b"new") for r in rows)


def run_available_now(spark, broker, topic: str, out: Path, checkpoint: Path, limit: int):
    stream = (
        spark.readStream.format("wharf")
        .option("endpoints", broker.endpoint)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(limit))
        .load()
    )
    query = (
        stream.selectExpr("queueId", "offset", "body")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(90)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_stream_restart_from_checkpoint_neither_loses_nor_duplicates(
    spark, broker: BrokerProcess, tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    sent = fill(broker, "events", per_queue=30)

    batches = run_available_now(spark, broker, "events", out, checkpoint, limit=50)
    assert sum(batches) == QUEUES * 30
    assert max(batches) <= 50 and len(batches) >= 3  # availableNow honours the limit

    more = fill(broker, "events", per_queue=10, prefix="later")
    for q in range(QUEUES):
        sent[q].extend(more[q])
    batches = run_available_now(spark, broker, "events", out, checkpoint, limit=50)
    assert sum(batches) == QUEUES * 10  # only the new rows are read after the restart

    rows = spark.read.parquet(str(out)).collect()
    keys = [(r.queueId, r.offset) for r in rows]
    assert len(keys) == len(set(keys)) == QUEUES * 40
    got = {(r.queueId, r.offset): bytes(r.body) for r in rows}
    assert got == {(q, off): body for q, items in sent.items() for off, body, _ in items}


def test_stream_reader_admission_control_and_available_now_target(broker: BrokerProcess) -> None:
    """Drive the driver-side stream reader directly (as Spark's runner does), no Spark job."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
    from wharf.client.spark.columns import topic_schema
    from wharf.client.spark.options import parse_read_options
    from wharf.client.spark.topic_readers import TopicStreamReader

    for q, count in enumerate([30, 10, 0, 0]):
        if count:
            send(broker.endpoint, "lag", [b"x"] * count, queue_id=q)
    wait_until_visible(broker.endpoint, "lag", 40)
    opts = parse_read_options(
        {"endpoints": broker.endpoint, "topic": "lag", "startingOffsets": "earliest",
         "maxOffsetsPerTrigger": "8", "progressGroup": "lag-mirror"},
        streaming=True,
    )  # fmt: skip
    reader = TopicStreamReader(opts, topic_schema(False))
    assert reader.getDefaultReadLimit() == ReadMaxRows(8)

    start = reader.initialOffset()
    assert start == {"lag": {"0": 0, "1": 0, "2": 0, "3": 0}}
    reader.prepareForTriggerAvailableNow()
    send(broker.endpoint, "lag", [b"late"] * 5, queue_id=2)  # after the target: not this run
    wait_until_visible(broker.endpoint, "lag", 45)

    end = reader.latestOffset(start, ReadMaxRows(8))
    assert end == {"lag": {"0": 6, "1": 2, "2": 0, "3": 0}}  # 8 rows split 30:10
    ranges = reader.partitions(start, end)
    assert [(r.queue_id, r.start, r.end) for r in ranges] == [(0, 0, 6), (1, 0, 2)]

    reader.commit(end)  # mirrored to the progress group (monitoring only)
    assert committed_offsets(broker.endpoint, "lag-mirror", "lag") == {0: 6, 1: 2, 2: 0, 3: 0}

    everything = reader.latestOffset(end, ReadAllAvailable())
    assert everything == {"lag": {"0": 30, "1": 10, "2": 0, "3": 0}}  # capped at the target
    assert reader.latestOffset(everything, ReadAllAvailable()) == everything  # run ends
