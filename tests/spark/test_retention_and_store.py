"""Against a real daemon: failOnDataLoss once retention deleted a range, and the offline
``wharf-store`` scan of the daemon's own store directory (same view, corruption reported)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from wharf.client.spark.offsets import DataLossError, QueueRange
from wharf.client.spark.options import parse_read_options

from tests.harness import BrokerProcess, Daemons
from tests.spark.segments import flip_body_byte
from tests.spark.wire import queue_offsets, read_topic, send, wait_until_visible

pytestmark = pytest.mark.spark

EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


def retention_broker(daemons: Daemons, root: Path) -> BrokerProcess:
    """Tiny segments and retention that deletes every full segment within a fraction of a
    second: fileReservedTime=0 hours, deleteWhen covering every hour, a 200 ms cleanup pass
    that deletes every expired segment at once. With the defaults (10 segments a pass, 100 ms
    apart) the ~25 segments went in three passes ~1.1 s apart, and ``wait_for_retention``'s
    1 s of a still minimum could fall between two: a read then met the next pass (CI,
    2026-11-27: offsets [160, 192) gone while the queue's minimum still said 160)."""
    return daemons.broker(
        root,
        settings={
            "defaultTopicQueueNums": 1,
            "mappedFileSizeCommitLog": 4096,
            "maxMessageSize": 1024,
            "mappedFileSizeConsumeQueue": 20 * 10,
            "fileReservedTime": 0,
            "deleteWhen": EVERY_HOUR,
            "cleanResourceInterval": 200,
            "deleteFileBatchMax": 1000,
            "deleteCommitLogFilesInterval": 0,
        },
        start=False,
    )


def wait_for_retention(endpoint: str, topic: str, count: int, timeout: float = 30.0) -> int:
    """Wait until all ``count`` messages are dispatched and retention moved the min offset,
    then until it stops moving (1 s unchanged: every full segment deleted): the reads below
    would otherwise race the next 200 ms pass."""
    deadline = time.monotonic() + timeout
    low, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        offsets = queue_offsets(endpoint, topic)
        if offsets and offsets[0][1] == count and offsets[0][0] > 0:
            if offsets[0][0] != low:
                low, since = offsets[0][0], time.monotonic()
            elif time.monotonic() - since >= 1.0:
                return low
        time.sleep(0.1)
    raise TimeoutError(f"retention did not settle: {queue_offsets(endpoint, topic)}")


def test_fail_on_data_loss_after_retention_deleted_a_range(
    daemons: Daemons, spark, tmp_path: Path
) -> None:
    with retention_broker(daemons, tmp_path / "broker") as broker:
        bodies = [f"{i:05d}".encode() * 40 for i in range(200)]
        send(broker.endpoint, "ledger", bodies, queue_id=0, batch=8)  # a batch fits a segment
        low = wait_for_retention(broker.endpoint, "ledger", 200)

        def read(**options: str):  # type: ignore[no-untyped-def]
            reader = (
                spark.read.format("wharf")
                .option("endpoints", broker.endpoint)
                .option("topic", "ledger")
                .option("startingOffsets", '{"ledger": {"0": 0}}')
            )
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load()

        with pytest.raises(Exception, match=r"offsets \[0, \d+\) of ledger/0 were removed"):
            read().collect()

        rows = read(failOnDataLoss="false").select("offset", "body").collect()
        low_now = queue_offsets(broker.endpoint, "ledger")[0][0]
        offsets = sorted(r.offset for r in rows)
        assert offsets == list(range(offsets[0], 200)) and low <= offsets[0] <= low_now
        assert all(bytes(r.body) == f"{r.offset:05d}".encode() * 40 for r in rows)

        # The executor-side check: a range planned before retention moved the min offset.
        planned = QueueRange("ledger", 0, 0, 200)
        base = {"endpoints": broker.endpoint, "topic": "ledger"}

        from wharf.client.spark.columns import topic_schema
        from wharf.client.spark.pull_reader import read_queue_range
        from wharf.client.spark.topic_readers import TopicStreamReader

        schema = topic_schema(False)
        strict = parse_read_options(base, streaming=False)
        with pytest.raises(DataLossError, match="removed by retention"):
            list(read_queue_range(strict, schema, planned))
        lenient = parse_read_options({**base, "failOnDataLoss": "false"}, streaming=False)
        batches = list(read_queue_range(lenient, schema, planned))
        assert sum(b.num_rows for b in batches) == 200 - low_now

        # A stream whose checkpoint still points at offset 0 (as after a long pause).
        checkpointed, latest = {"ledger": {"0": 0}}, {"ledger": {"0": 200}}
        with pytest.raises(DataLossError, match="removed by retention"):
            TopicStreamReader(parse_read_options(base, True), schema).partitions(
                checkpointed, latest
            )
        streaming = parse_read_options({**base, "failOnDataLoss": "false"}, True)
        ranges = TopicStreamReader(streaming, schema).partitions(checkpointed, latest)
        assert [(r.start, r.end) for r in ranges] == [(low_now, 200)]


def test_offline_scan_matches_the_daemon_and_reports_a_corrupted_record(
    daemons: Daemons, spark, tmp_path: Path
) -> None:
    broker = daemons.broker(
        tmp_path / "broker",
        settings={
            "defaultTopicQueueNums": 2,
            "mappedFileSizeCommitLog": 8192,
            "maxMessageSize": 2048,
        },
        start=False,
    )
    with broker:
        for q in range(2):
            send(broker.endpoint, "audit", [f"a{q}-{i}".encode() * 9 for i in range(80)],
                 queue_id=q, tags=f"t{q}", keys=[f"k{q}"], properties={"q": str(q)}, batch=16)  # fmt: skip
        send(broker.endpoint, "audit", [b"squeezed" * 64], queue_id=1, compress=True)
        wait_until_visible(broker.endpoint, "audit", 161)
        views = [v for vs in read_topic(broker.endpoint, "audit").values() for v in vs]
        daemon = (
            spark.read.format("wharf")
            .option("endpoints", broker.endpoint)
            .option("topic", "audit")
            .option("includeProperties", "true")
            .load()
            .collect()
        )
    # Stopped: the directory is now a plain copy of broker data.
    store = broker.store_dir
    assert len(list((store / "commitlog").iterdir())) > 2

    def key(r) -> tuple:  # type: ignore[no-untyped-def]
        return (
            r.topic, r.queueId, r.offset, bytes(r.body), r.tags, tuple(r.keys),
            tuple(sorted(r.properties.items())), r.msgId, r.bornTimestamp, r.storeTimestamp,
        )  # fmt: skip

    scan = spark.read.format("wharf-store").option("topic", "audit").load(str(store))
    offline = scan.collect()
    assert sorted(map(key, offline)) == sorted(map(key, daemon))
    assert len(offline) == 161

    victim = next(v for v in views if v.queue_id == 1 and v.queue_offset == 42)
    flip_body_byte(store, victim.commit_log_offset)
    with pytest.raises(
        Exception, match=f"corrupt record at commit log offset {victim.commit_log_offset}"
    ):
        spark.read.format("wharf-store").load(str(store)).collect()
    reported = (
        spark.read.format("wharf-store")
        .option("corruptRecords", "report")
        .load(str(store))
        .where("corruptReason IS NOT NULL")
        .collect()
    )
    assert [(r.commitLogOffset, r.queueId, r.offset, r.corruptReason) for r in reported] == [
        (victim.commit_log_offset, 1, 42, "body CRC mismatch")
    ]
