"""The ``wharf`` source over a cluster (option ``namesrv``): a topic that spans two broker
groups is read as one partition per (group, queue), batch and streaming, every message once,
with the streaming offsets keyed "<topic>@<broker>" in the checkpoint."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from wharf.v1 import admin_pb2, admin_pb2_grpc

from tests.harness import BrokerProcess, Daemons
from tests.spark.wire import send, wait_until_visible

pytestmark = pytest.mark.spark


@pytest.fixture
def cluster(daemons: Daemons, tmp_path: Path) -> Iterator[tuple[str, dict[str, BrokerProcess]]]:
    with daemons.namesrv(tmp_path / "ns") as ns:
        brokers = {}
        try:
            for name in ("broker-a", "broker-b"):
                brokers[name] = daemons.broker(
                    tmp_path / name,
                    settings={"namesrvAddr": ns.endpoint, "brokerClusterName": "C",
                              "brokerName": name, "autoCreateTopicEnable": False},
                )  # fmt: skip
                with grpc.insecure_channel(brokers[name].endpoint) as channel:
                    admin_pb2_grpc.AdminServiceStub(channel).CreateTopic(
                        admin_pb2.CreateTopicRequest(
                            name="spread", read_queue_nums=2, write_queue_nums=2, perm=6
                        ),
                        timeout=10,
                    )
            time.sleep(1.5)  # the NameServer learns the topic within a heartbeat
            yield ns.endpoint, brokers
        finally:
            for broker in brokers.values():
                broker.stop()


def test_a_topic_spanning_two_groups_is_read_once_batch_and_streaming(
    spark, cluster, tmp_path: Path
) -> None:
    namesrv, brokers = cluster
    on_a = [f"a-{i}".encode() for i in range(30)]
    on_b = [f"b-{i}".encode() for i in range(20)]
    for name, bodies in (("broker-a", on_a), ("broker-b", on_b)):
        for queue_id in (0, 1):  # both queues of each group hold messages
            send(brokers[name].endpoint, "spread", bodies[queue_id::2], queue_id=queue_id)
    wait_until_visible(brokers["broker-a"].endpoint, "spread", 30)
    wait_until_visible(brokers["broker-b"].endpoint, "spread", 20)

    df = spark.read.format("wharf").option("namesrv", namesrv).option("topic", "spread").load()
    assert df.rdd.getNumPartitions() == 4  # one per (group, queue)
    rows = df.select("topic", "body").collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(on_a + on_b)
    assert {r.topic for r in rows} == {"spread"}

    checkpoint = tmp_path / "checkpoint"
    query = (
        spark.readStream.format("wharf")
        .option("namesrv", namesrv)
        .option("topic", "spread")
        .option("startingOffsets", "earliest")
        .load()
        .select("body")
        .writeStream.format("memory")
        .queryName("spread_copy")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(90)
    assert query.exception() is None
    copied = [bytes(r.body) for r in spark.sql("select body from spread_copy").collect()]
    assert sorted(copied) == sorted(on_a + on_b)
    offsets = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[-1])
    assert set(offsets) == {"spread@broker-a", "spread@broker-b"}
