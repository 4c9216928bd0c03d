"""The ``wharf`` sink against a real broker: batch and streaming writes, and the idempotence
that lifts it beyond at-least-once (task retries and re-run micro-batches add no rows)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import BrokerProcess
from tests.spark.wire import read_topic, send, wait_until_visible

pytestmark = pytest.mark.spark


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "broker", settings={"defaultTopicQueueNums": 2}) as b:
        yield b


def all_views(broker: BrokerProcess, topic: str) -> list:
    return [v for views in read_topic(broker.endpoint, topic).values() for v in views]


def test_batch_write_arrives_in_the_topic_with_every_column(spark, broker: BrokerProcess) -> None:
    rows = [
        ("orders", f"order {i}", f"tag{i % 2}", [f"key{i}"], {"i": str(i)}, i % 2)
        for i in range(300)
    ]
    schema = (
        "topic string, body string, tags string, keys array<string>, "
        "properties map<string,string>, queueId int"
    )
    df = spark.createDataFrame(rows, schema).repartition(2)
    df.write.format("wharf").option("endpoints", broker.endpoint).mode("append").save()

    wait_until_visible(broker.endpoint, "orders", 300)
    stored = read_topic(broker.endpoint, "orders")
    assert {q: len(v) for q, v in stored.items()} == {0: 150, 1: 150}
    got = {v.body.decode(): v for views in stored.values() for v in views}
    assert set(got) == {f"order {i}" for i in range(300)}
    for i in (0, 7, 299):
        view = got[f"order {i}"]
        assert (view.queue_id, view.tags, list(view.keys)) == (i % 2, f"tag{i % 2}", [f"key{i}"])
        assert view.properties["i"] == str(i)
    ids = [v.msg_id for v in got.values()]
    assert len(set(ids)) == 300 and all(i.startswith("spark-") for i in ids)


def test_topic_option_and_binary_bodies(spark, broker: BrokerProcess) -> None:
    df = spark.createDataFrame([(bytes([i % 256]) * 10,) for i in range(50)], "body binary")
    (
        df.write.format("wharf")
        .option("endpoints", broker.endpoint)
        .option("topic", "blobs")
        .option("batchSize", "16")
        .mode("append")
        .save()
    )
    wait_until_visible(broker.endpoint, "blobs", 50)
    bodies = sorted(v.body for v in all_views(broker, "blobs"))
    assert bodies == sorted(bytes([i % 256]) * 10 for i in range(50))


def test_bad_sink_input_is_refused_before_any_task_runs(spark, broker: BrokerProcess) -> None:
    writer = spark.createDataFrame([("x", "y")], "topic string, payload string").write
    with pytest.raises(Exception, match="'payload' is not written by the wharf sink"):
        writer.format("wharf").option("endpoints", broker.endpoint).mode("append").save()
    body_only = spark.createDataFrame([("y",)], "body string").write.format("wharf")
    with pytest.raises(Exception, match="needs a 'topic' column or the 'topic' option"):
        body_only.option("endpoints", broker.endpoint).mode("append").save()
    with pytest.raises(Exception, match="only appends"):
        body_only.option("endpoints", broker.endpoint).option("topic", "t").mode("overwrite").save()


def test_a_retried_task_does_not_duplicate_what_its_first_attempt_stored(
    spark, broker: BrokerProcess
) -> None:
    """Attempt 0 stores its first chunks, then fails; the session's local[2,2] retries it.
    Bodies carry the attempt number, which proves both attempts wrote."""
    from pyspark.sql.functions import udf

    endpoint = broker.endpoint

    def body_of(i):  # type: ignore[no-untyped-def]  (hints would make pyspark guess a pandas UDF)
        import time

        import grpc
        from pyspark import TaskContext
        from wharf.v1 import messaging_pb2, messaging_pb2_grpc

        attempt = TaskContext.get().attemptNumber()
        if attempt == 0 and i == 150:
            # Fail only once the writer has stored some chunks. Bodies are 4 KiB so that the
            # rows before this one fill the JVM's 64 KiB socket buffer and reach the writer.
            with grpc.insecure_channel(endpoint) as channel:
                stub = messaging_pb2_grpc.MessagingServiceStub(channel)
                request = messaging_pb2.GetQueueOffsetsRequest(topic="retried")
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    try:
                        queues = stub.GetQueueOffsets(request, timeout=5).queues
                        if sum(q.max_offset for q in queues) >= 50:
                            break
                    except grpc.RpcError:
                        pass  # the topic is created by the first send
                    time.sleep(0.05)
            raise RuntimeError("injected failure of the first attempt")
        return f"{i}:{attempt}:".ljust(4096, "x")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "25")
    try:
        body = udf(body_of, "string", useArrow=False)
        df = spark.range(0, 400, 1, numPartitions=1).select(body("id").alias("body"))
        (
            df.write.format("wharf")
            .option("endpoints", broker.endpoint)
            .option("topic", "retried")
            .option("batchSize", "25")
            .mode("append")
            .save()
        )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    wait_until_visible(broker.endpoint, "retried", 400)
    stored = [v.body.decode().split(":")[:2] for v in all_views(broker, "retried")]
    assert sorted(int(row) for row, _ in stored) == list(range(400))  # every row exactly once
    attempts = {attempt for _, attempt in stored}
    assert attempts == {"0", "1"}, "both attempts must have stored rows for this test to count"


def stream_copy(spark, broker: BrokerProcess, checkpoint: Path):
    stream = (
        spark.readStream.format("wharf")
        .option("endpoints", broker.endpoint)
        .option("topic", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
    )
    query = (
        stream.selectExpr("body", "tags")
        .writeStream.format("wharf")
        .option("endpoints", broker.endpoint)
        .option("topic", "out")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(90)
    assert query.exception() is None
    return query


def test_stream_write_and_a_re_run_batch_add_no_duplicates(
    spark, broker: BrokerProcess, tmp_path: Path
) -> None:
    bodies = [f"event {i}".encode() for i in range(250)]
    send(broker.endpoint, "in", bodies, tags="e")
    wait_until_visible(broker.endpoint, "in", 250)
    checkpoint = tmp_path / "checkpoint"

    stream_copy(spark, broker, checkpoint)
    wait_until_visible(broker.endpoint, "out", 250)
    assert sorted(v.body for v in all_views(broker, "out")) == sorted(bodies)

    # Simulate a driver crash after the last batch was written but before Spark recorded
    # its commit: Spark re-runs that batch (same query id, same batch id) on restart.
    commits = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    last_batch = int(commits[-1].name)
    commits[-1].unlink()
    (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    query = stream_copy(spark, broker, checkpoint)
    rerun = [p for p in query.recentProgress if p["batchId"] == last_batch]
    assert rerun and rerun[0]["numInputRows"] > 0  # the batch really ran again

    views = all_views(broker, "out")
    assert sorted(v.body for v in views) == sorted(bodies)  # still exactly once
    assert all(v.tags == "e" for v in views)
