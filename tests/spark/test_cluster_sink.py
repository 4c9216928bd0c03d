"""The ``wharf`` sink over a cluster (option ``namesrv``): rows spread over both broker groups'
queues, each group's half messages committed by its own EndTransactions; a task attempt killed
after storing halves on both groups leaves nothing visible, and after its retry every row is
stored exactly once (none from the killed attempt, no half left open on either group). A
``queueId`` numbers the groups' write queues one after the other."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from wharf.client.admin import Admin
from wharf.client.errors import NotFoundError

from tests.harness import BrokerProcess, Daemons
from tests.spark.wire import open_halves, queue_offsets, read_topic, wait_until_visible

pytestmark = pytest.mark.spark
GROUPS = ("broker-a", "broker-b")


@pytest.fixture
def cluster(daemons: Daemons, tmp_path: Path) -> Iterator[tuple[str, dict[str, BrokerProcess]]]:
    """One NameServer, two groups; topics "exact" and "placed" (2 queues on each group)."""
    with daemons.namesrv(tmp_path / "ns") as ns:
        brokers: dict[str, BrokerProcess] = {}
        try:
            for name in GROUPS:
                brokers[name] = daemons.broker(
                    tmp_path / name,
                    settings={"namesrvAddr": ns.endpoint, "brokerClusterName": "C",
                              "brokerName": name, "autoCreateTopicEnable": False,
                              "brokerHeartbeatInterval": 200},
                )  # fmt: skip

            async def groups(admin: Admin, topic: str | None) -> int:
                """Groups the NameServer lists (for ``topic``); 0 until a broker registers it:
                a new topic reaches the NameServer with its brokers' next registration."""
                try:
                    return len(await admin.masters(topic))
                except NotFoundError:
                    return 0

            async def create() -> None:
                async with Admin(namesrv=ns.endpoint) as admin:
                    for _ in range(50):  # until both brokers registered
                        if await groups(admin, None) == 2:
                            break
                        await asyncio.sleep(0.1)
                    for topic in ("exact", "placed"):
                        await admin.create_topic(topic, queue_nums=2)
                    for _ in range(50):  # until the route lists both groups
                        if await groups(admin, "placed") == 2:
                            break
                        await asyncio.sleep(0.1)

            asyncio.run(create())
            yield ns.endpoint, brokers
        finally:
            for broker in brokers.values():
                broker.stop()


def _halves_on_groups_then_die(endpoints: list[str], at_least: int, report: str) -> None:
    """Inside a task: wait until every group holds open halves of "exact" and ``at_least`` in
    all, record what a reader sees, then SIGKILL this Python worker."""
    import os
    import signal

    deadline = time.monotonic() + 60
    counts = [0] * len(endpoints)
    while time.monotonic() < deadline:
        counts = [len(open_halves(e, "exact")) for e in endpoints]
        if min(counts) > 0 and sum(counts) >= at_least:
            break
        time.sleep(0.05)
    visible = sum(hi - lo for e in endpoints for lo, hi in queue_offsets(e, "exact").values())
    with open(report, "w") as f:
        json.dump({"halves": counts, "visible": visible}, f)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_task_over_two_groups_shows_nothing_and_its_retry_writes_each_row_once(
    spark, cluster, tmp_path: Path
) -> None:
    from pyspark.sql.functions import udf

    namesrv, brokers = cluster
    endpoints = [brokers[n].endpoint for n in GROUPS]
    report = str(tmp_path / "seen.json")

    def body_of(i):  # type: ignore[no-untyped-def]  (hints would make pyspark guess a pandas UDF)
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        if attempt == 0 and i == 150:
            _halves_on_groups_then_die(endpoints, 50, report)
        return f"{i}:{attempt}:".ljust(4096, "x")  # 4 KiB: rows reach the writer

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "25")
    try:
        body = udf(body_of, "string", useArrow=False)
        df = spark.range(0, 400, 1, numPartitions=1).select(body("id").alias("body"))
        (
            df.write.format("wharf")
            .option("namesrv", namesrv)
            .option("topic", "exact")
            .option("batchSize", "25")
            .mode("append")
            .save()
        )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    seen = json.loads(Path(report).read_text())
    assert min(seen["halves"]) > 0 and sum(seen["halves"]) >= 50  # halves on both groups
    assert seen["visible"] == 0  # stored, and invisible
    for endpoint in endpoints:  # partition 0's rows alternate: even rows on a, odd on b
        wait_until_visible(endpoint, "exact", 200)
    stored = {
        name: [v.body.decode().split(":")[:2] for vs in read_topic(e, "exact").values() for v in vs]
        for name, e in zip(GROUPS, endpoints, strict=True)
    }
    every = [int(row) for rows in stored.values() for row, _ in rows]
    assert sorted(every) == list(range(400))  # every row exactly once across the groups
    assert sorted(int(r) for r, _ in stored["broker-a"]) == list(range(0, 400, 2))
    assert {a for rows in stored.values() for _, a in rows} == {"1"}  # nothing of the killed one
    assert [open_halves(e, "exact") for e in endpoints] == [[], []]  # all rolled back


def test_queue_ids_number_the_groups_queues_in_turn(spark, cluster) -> None:
    namesrv, brokers = cluster
    rows = [(f"row {i}", i % 4) for i in range(40)]
    df = spark.createDataFrame(rows, "body string, queueId int").repartition(2)
    df.write.format("wharf").option("namesrv", namesrv).option("topic", "placed").mode(
        "append"
    ).save()
    for name in GROUPS:
        wait_until_visible(brokers[name].endpoint, "placed", 20)
    placed = {
        (name, q): sorted(int(v.body.decode().split()[1]) for v in views)
        for name in GROUPS
        for q, views in read_topic(brokers[name].endpoint, "placed").items()
    }
    assert placed == {
        ("broker-a", 0): list(range(0, 40, 4)),
        ("broker-a", 1): list(range(1, 40, 4)),
        ("broker-b", 0): list(range(2, 40, 4)),
        ("broker-b", 1): list(range(3, 40, 4)),
    }
    bad = spark.createDataFrame([("x", 4)], "body string, queueId int")
    with pytest.raises(Exception, match="beyond the 4 write queues"):
        bad.write.format("wharf").option("namesrv", namesrv).option("topic", "placed").mode(
            "append"
        ).save()


def test_a_group_s_new_master_address_is_followed_without_a_failed_call(cluster) -> None:
    """The source/sink client caches broker name -> master address; a pushed route change
    (broker-a restarted on another port) makes it look the address up again."""
    from wharf.client.spark.cluster_rpc import ClusterRpc

    namesrv, brokers = cluster
    with ClusterRpc(namesrv, timeout_s=5.0) as rpc:
        assert len(rpc.queue_bounds("placed")) == 4
        assert rpc.search_offset("placed@broker-a", 0, 0) == 0
        old = brokers["broker-a"].endpoint
        brokers["broker-a"].stop()
        brokers["broker-a"].start()
        new = brokers["broker-a"].endpoint
        assert new != old
        deadline = time.monotonic() + 5
        while _master_of(namesrv, "placed", "broker-a") != new:  # registered again
            assert time.monotonic() < deadline, "broker-a did not register again"
            time.sleep(0.02)
        while rpc._masters.get("broker-a") != new and time.monotonic() < deadline:
            # the watch forgets the old address; the next call looks the new one up
            if "broker-a" not in rpc._masters:
                assert rpc.search_offset("placed@broker-a", 0, 0) == 0
            time.sleep(0.02)
        assert rpc._masters.get("broker-a") == new
        assert rpc.search_offset("placed@broker-a", 1, 0) == 0


def _master_of(namesrv: str, topic: str, broker: str) -> str:
    import grpc
    from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

    with grpc.insecure_channel(namesrv) as channel:
        stub = namesrv_pb2_grpc.NameServiceStub(channel)
        try:
            reply = stub.QueryRoute(namesrv_pb2.QueryTopicRouteRequest(topic=topic), timeout=5)
        except grpc.RpcError:
            return ""
    return next((b.addresses.get(0, "") for b in reply.brokers if b.broker_name == broker), "")
