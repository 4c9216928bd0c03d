"""The ``wharf`` sink against a real broker: batch and streaming writes, exactly once through
half messages (a killed task's, an aborted job's and a failed micro-batch's rows never become
visible; retries and re-runs add no rows), and the idempotent non-transactional mode."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import BrokerProcess, Daemons
from tests.spark.wire import open_halves, read_topic, send, wait_until_visible

pytestmark = pytest.mark.spark


@pytest.fixture
def broker(daemons: Daemons, tmp_path: Path) -> Iterator[BrokerProcess]:
    with daemons.broker(tmp_path / "broker", settings={"defaultTopicQueueNums": 2}) as b:
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


def test_idempotent_mode_a_retried_task_does_not_duplicate_what_its_first_attempt_stored(
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
            .option("transactional", "false")
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


def _halves_then(endpoint: str, topic: str, at_least: int, report: str, die: bool) -> None:
    """Inside a task: wait until ``at_least`` of the topic's rows are stored as open half
    messages, write what a reader sees then to ``report``, then kill this Python worker with
    SIGKILL (``die``: an executor task's death) or raise."""
    import json
    import os
    import signal
    import time

    from tests.spark.wire import open_halves, queue_offsets

    deadline = time.monotonic() + 60
    halves: list[str] = []
    while time.monotonic() < deadline:
        halves = open_halves(endpoint, topic)
        if len(halves) >= at_least:
            break
        time.sleep(0.05)
    visible = sum(hi - lo for lo, hi in queue_offsets(endpoint, topic).values())
    with open(report, "w") as f:
        json.dump({"halves": len(halves), "visible": visible}, f)
    if die:
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("injected failure")


def test_a_killed_task_s_rows_never_show_and_its_retry_adds_each_row_once(
    spark, broker: BrokerProcess, tmp_path: Path
) -> None:
    """Attempt 0 stores 50+ rows as half messages (a reader sees none of them), then its
    Python worker is killed with SIGKILL; local[2,2] retries the task. After the commit the
    topic holds every row once, all from attempt 1, and no half message is left open."""
    from pyspark.sql.functions import udf

    endpoint, report = broker.endpoint, str(tmp_path / "seen.json")

    def body_of(i):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        if attempt == 0 and i == 150:
            _halves_then(endpoint, "exact", 50, report, die=True)
        return f"{i}:{attempt}:".ljust(4096, "x")  # 4 KiB: rows reach the writer (see above)

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "25")
    try:
        body = udf(body_of, "string", useArrow=False)
        df = spark.range(0, 400, 1, numPartitions=1).select(body("id").alias("body"))
        (
            df.write.format("wharf")
            .option("endpoints", endpoint)
            .option("topic", "exact")
            .option("batchSize", "25")
            .mode("append")
            .save()
        )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    seen = json.loads(Path(report).read_text())
    assert seen["halves"] >= 50 and seen["visible"] == 0  # stored, and invisible
    wait_until_visible(endpoint, "exact", 400)
    stored = [v.body.decode().split(":")[:2] for v in all_views(broker, "exact")]
    assert sorted(int(row) for row, _ in stored) == list(range(400))  # every row exactly once
    assert {attempt for _, attempt in stored} == {"1"}  # nothing of the killed attempt
    assert open_halves(endpoint, "exact") == []  # the killed attempt's halves rolled back


def test_an_aborted_job_leaves_nothing_and_its_re_run_writes_each_row_once(
    spark, broker: BrokerProcess, tmp_path: Path
) -> None:
    """Partition 1 fails in every attempt after rows of the job are stored as half messages:
    the job aborts and rolls everything back. Re-run with the same writerId, it writes each
    row once."""
    from pyspark.sql.functions import udf

    endpoint, report = broker.endpoint, str(tmp_path / "seen.json")
    poison = tmp_path / "poison"
    poison.touch()
    poison_path = str(poison)

    def body_of(i):  # type: ignore[no-untyped-def]
        import os

        if i == 399 and os.path.exists(poison_path):
            _halves_then(endpoint, "aborted", 50, report, die=False)
        return f"row {i}".ljust(4096, "x")

    def write() -> None:
        body = udf(body_of, "string", useArrow=False)
        df = spark.range(0, 400, 1, numPartitions=2).select(body("id").alias("body"))
        (
            df.write.format("wharf")
            .option("endpoints", endpoint)
            .option("topic", "aborted")
            .option("batchSize", "25")
            .option("writerId", "job-7")
            .mode("append")
            .save()
        )

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "25")
    try:
        with pytest.raises(Exception, match="injected failure"):
            write()
        seen = json.loads(Path(report).read_text())
        assert seen["halves"] >= 50 and seen["visible"] == 0
        # Nothing visible. (Halves may still be open: a failed attempt's writer can store its
        # last chunk after the driver's abort; the re-run's commit rolls those back.)
        assert all_views(broker, "aborted") == []
        poison.unlink()
        write()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    wait_until_visible(endpoint, "aborted", 400)
    bodies = sorted(v.body.decode().rstrip("x") for v in all_views(broker, "aborted"))
    assert bodies == sorted(f"row {i}" for i in range(400))
    assert open_halves(endpoint, "aborted") == []


def test_a_failed_micro_batch_shows_nothing_until_its_re_run_commits_it_once(
    spark, broker: BrokerProcess, tmp_path: Path
) -> None:
    """Batch 1 of a stream fails in every attempt of one task, after the other task stored
    its rows as half messages (the query dies mid-batch): the output holds exactly batch 0. Restarted from its checkpoint, the query re-runs batch 1 and the output
    holds every input row once."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql.functions import udf

    bodies = [f"event {i}".encode() for i in range(250)]
    send(broker.endpoint, "in", bodies)
    wait_until_visible(broker.endpoint, "in", 250)
    checkpoint = tmp_path / "checkpoint"
    poison = tmp_path / "poison"
    poison.touch()
    poison_path = str(poison)

    endpoint, report = broker.endpoint, str(tmp_path / "seen.json")

    def same(body):  # type: ignore[no-untyped-def]
        import os

        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        if batch == "1" and ctx.partitionId() == 1 and os.path.exists(poison_path):
            # The other task of batch 1 has stored its rows as half messages meanwhile.
            _halves_then(endpoint, "out", 25, report, die=False)
        return body

    def run():  # type: ignore[no-untyped-def]
        stream = (
            spark.readStream.format("wharf")
            .option("endpoints", broker.endpoint)
            .option("topic", "in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "100")
            .load()
        )
        query = (
            stream.select(udf(same, "binary", useArrow=False)("body").alias("body"))
            .writeStream.format("wharf")
            .option("endpoints", broker.endpoint)
            .option("topic", "out")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(StreamingQueryException):  # the failed run: checked below
            query.awaitTermination(90)
        return query

    failed = run()
    assert failed.exception() is not None
    first = [p["numInputRows"] for p in failed.recentProgress if p["batchId"] == 0]
    assert first and first[0] > 0
    out = all_views(broker, "out")
    assert len(out) == first[0]  # batch 0 only: nothing of the failed batch 1
    seen = json.loads(Path(report).read_text())
    assert seen["halves"] >= 25 and seen["visible"] == first[0]  # stored, and invisible
    assert open_halves(broker.endpoint, "out") == []

    poison.unlink()
    query = run()
    assert query.exception() is None
    views = all_views(broker, "out")
    assert sorted(v.body for v in views) == sorted(bodies)  # each row exactly once
    assert open_halves(broker.endpoint, "out") == []
