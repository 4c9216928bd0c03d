"""End to end on the fast wire paths: what the records-sending sink stores and what the
raw-record source returns, checked against an independent reader (tests/spark/wire.py)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import BrokerProcess, Daemons
from tests.spark.wire import read_topic, send, wait_until_visible

pytestmark = pytest.mark.spark


@pytest.fixture
def broker(daemons: Daemons, tmp_path: Path) -> Iterator[BrokerProcess]:
    with daemons.broker(tmp_path / "broker", settings={"defaultTopicQueueNums": 1}) as b:
        yield b


def source(spark, broker: BrokerProcess, topic: str, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.read.format("wharf").option("endpoints", broker.endpoint).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_source_keeps_only_exact_tags_when_tag_hashes_collide(spark, broker: BrokerProcess) -> None:
    """ "Aa" and "BB" share a Java String hash: the broker's raw-record filter lets both
    through, the source must drop the other tag."""
    for i in range(6):
        send(broker.endpoint, "clash", [f"{i}".encode()], tags="Aa" if i % 2 == 0 else "BB")
    wait_until_visible(broker.endpoint, "clash", 6)

    only_aa = source(spark, broker, "clash", tagExpression="Aa").collect()
    assert sorted((r.offset, bytes(r.body), r.tags) for r in only_aa) == [
        (0, b"0", "Aa"),
        (2, b"2", "Aa"),
        (4, b"4", "Aa"),
    ]
    both = source(spark, broker, "clash", tagExpression="BB || Aa").collect()
    assert sorted(r.offset for r in both) == list(range(6))


def test_sink_compresses_big_bodies_and_the_source_returns_them_whole(
    spark, broker: BrokerProcess
) -> None:
    big = b"a compressible line of text\n" * 1000  # 28 KB: over the 4 KiB threshold
    rows = [
        (big, "big", ["k-big"], {"part": "1"}),
        (b"small", None, None, None),
        (big[::-1], "big", [], {"UNIQ_KEY": "forged", "part": "2"}),
    ]
    df = spark.createDataFrame(
        rows, "body binary, tags string, keys array<string>, properties map<string,string>"
    ).coalesce(1)
    df.write.format("wharf").option("endpoints", broker.endpoint).option("topic", "zipped").option(
        "writerId", "w1"
    ).mode("append").save()
    wait_until_visible(broker.endpoint, "zipped", 3)

    # As stored (the broker's MessageView path, not the connector): compressed on the wire.
    views = read_topic(broker.endpoint, "zipped")[0]
    assert [v.compressed for v in views] == [True, False, True]
    assert zlib.decompress(views[0].body) == big and len(views[0].body) < len(big) // 10
    assert [v.msg_id for v in views] == [f"spark-w1.0.0.{i}" for i in range(3)]
    # The deterministic id wins; TRAN_HALF_OFFSET: committed through a transaction (the default).
    assert dict(views[2].properties) == {"part": "2", "TRAN_HALF_OFFSET": "2"}

    read = source(spark, broker, "zipped", includeProperties="true").collect()
    got = {r.offset: r for r in read}
    assert [bytes(got[i].body) for i in range(3)] == [big, b"small", big[::-1]]
    assert (got[0].tags, list(got[0].keys), got[0].properties) == (
        "big", ["k-big"], {"part": "1", "TRAN_HALF_OFFSET": "0"}
    )  # fmt: skip
    assert (got[1].tags, list(got[1].keys), got[1].properties) == (
        "", [], {"TRAN_HALF_OFFSET": "1"}
    )  # fmt: skip
    assert [got[i].msgId for i in range(3)] == [f"spark-w1.0.0.{i}" for i in range(3)]


def test_a_narrower_schema_reads_only_its_columns(spark, broker: BrokerProcess) -> None:
    send(broker.endpoint, "narrow", [b"a", b"b", b"c"], tags="t", keys=["k"])
    wait_until_visible(broker.endpoint, "narrow", 3)
    for arrow in ("true", "false"):
        df = (
            spark.read.format("wharf")
            .schema("offset long, body binary, keys array<string>")
            .option("endpoints", broker.endpoint)
            .option("topic", "narrow")
            .option("arrowBatches", arrow)
            .load()
        )
        rows = sorted((r.offset, bytes(r.body), list(r.keys)) for r in df.collect())
        assert rows == [(0, b"a", ["k"]), (1, b"b", ["k"]), (2, b"c", ["k"])], arrow


def test_records_calls_move_on_to_the_next_endpoint_when_one_is_down(
    broker: BrokerProcess,
) -> None:
    from wharf.client.record_encoder import RecordEncoder
    from wharf.client.records import messages_from_reply
    from wharf.client.spark.rpc import BrokerRpc

    encoder = RecordEncoder()
    records = [encoder.encode("failover", f"r{i}".encode(), f"id-{i}") for i in range(3)]
    # Port 1 on loopback refuses connections: UNAVAILABLE, then the live broker answers.
    with BrokerRpc(["127.0.0.1:1", broker.endpoint], timeout_s=10) as rpc:
        reply = rpc.send_records("failover", 0, records, "g")
        assert (reply.count, reply.first_queue_offset) == (3, 0)
        assert rpc.endpoint == broker.endpoint
    wait_until_visible(broker.endpoint, "failover", 3)
    with BrokerRpc(["127.0.0.1:1", broker.endpoint], timeout_s=10) as rpc:
        pulled = rpc.pull_records("g", "failover", 0, 0, 10, "*")
    assert [m.msg_id for m in messages_from_reply(pulled, "*")] == ["id-0", "id-1", "id-2"]
