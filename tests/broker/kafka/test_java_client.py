"""Kafka's own Java client (``org.apache.kafka:kafka-clients``, the version in
``tests/java/pom.xml``) against the real daemon's Kafka port, driven by the project's
``KafkaScenarios`` program (``make java-clients``; skipped without a JDK or that build).

One JVM runs every scenario at once, each on its own topics and groups, one JSON line each:
the default (idempotent) producer with acks=all under each compression codec; a consumer
group of two under the cooperative-sticky and under the eager range assignor (a alone, then
b joins; commitSync after each poll; the admin client lists and describes the group); assign
+ seek, seekToBeginning/End, commitSync of an offset resumed by a new member; the admin
client's topics (create, list, describe, list offsets, delete). A second run produces with
acks=all on a SYNC_FLUSH broker that is SIGKILLed under it: every acknowledged record is read
back after the restart."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests import javaclients
from tests.harness import BrokerProcess, Daemons

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MAIN = "dev.wharf.javatests.KafkaScenarios"
KAFKA_LISTEN = ["--kafka-listen", "127.0.0.1:0"]
CODECS = ["none", "gzip", "lz4", "zstd", "snappy"]


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker("java-kafka", extra_args=KAFKA_LISTEN)


@pytest.fixture(scope="module")
def scenarios(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("java-kafka-home")
    start = time.monotonic()
    proc = javaclients.run(home, MAIN, broker.kafka_endpoint, "all", timeout=200)
    return javaclients.results(proc, time.monotonic() - start)


def test_the_idempotent_producer_with_acks_all_and_every_codec(scenarios: dict[str, Any]) -> None:
    out = javaclients.scenario(scenarios, "produce")
    assert list(out["sent"]) == CODECS
    acked = {(s["partition"], s["offset"]) for acks in out["sent"].values() for s in acks}
    assert len(acked) == 50  # every send acknowledged at an offset of its own
    by_place = {(m["partition"], m["offset"]): m for m in out["received"]}
    assert len(out["received"]) == 50 and set(by_place) == acked  # each once, where acked
    for codec, acks in out["sent"].items():
        for i, s in enumerate(acks):
            m = by_place[(s["partition"], s["offset"])]
            # the 300-byte pad is compared by the program (the value ends with it)
            assert (m["key"], m["value"]) == (f"k-{codec}-{i}", f"{codec}-{i}")
            assert m["headers"] == {"codec": codec}
    for partition in (0, 1):
        offsets = sorted(o for p, o in acked if p == partition)
        assert offsets == list(range(len(offsets)))  # dense from 0: one record, one offset


@pytest.mark.parametrize(
    ("name", "group", "assignor", "revoked_from_a"),
    [
        # Cooperative: a gives up only what b gets; eager: a gives up everything, then both
        # are assigned anew.
        ("group_cooperative", "G_COOP", "cooperative-sticky", [2, 3]),
        ("group_eager", "G_EAGER", "range", [0, 1, 2, 3]),
    ],
)
def test_a_group_of_two_shares_the_partitions_and_reads_each_record_once(
    scenarios: dict[str, Any], name: str, group: str, assignor: str, revoked_from_a: list[int]
) -> None:
    out = javaclients.scenario(scenarios, name)
    assert out["errors"] == []
    assert out["a_alone"] and out["a_read_first"] and out["split"]
    received = out["received"]
    values = Counter(m["value"] for member in received.values() for m in member)
    assert values == Counter(f"r-{i}" for i in range(40))  # every record, once
    assert {m["value"] for m in received["a"]} >= {f"r-{i}" for i in range(20)}
    assert received["b"], "b read nothing"
    described = out["described"]
    assert described["state"] == "Stable" and described["assignor"] == assignor
    members = described["members"]
    assert sorted(members) == [f"{group}-a", f"{group}-b"]
    assert sorted(members[f"{group}-a"] + members[f"{group}-b"]) == [0, 1, 2, 3]
    assert members[f"{group}-a"] and members[f"{group}-b"]
    assert group in out["listed"]
    # b's records are on b's partitions only; what each member saw of the second round
    # came from the partitions it held then.
    assert {m["partition"] for m in received["b"]} <= set(members[f"{group}-b"])
    events_a = out["events"]["a"]
    assert events_a[0] == ["assigned", [0, 1, 2, 3]]
    assert events_a[1] == ["revoked", revoked_from_a]
    assert out["committed"] == {str(p): 10 for p in range(4)}  # commitSync: 10 per partition
    assert out["commits"] >= 2


def test_seek_positions_and_a_committed_offset_resumed_by_a_new_member(
    scenarios: dict[str, Any],
) -> None:
    out = javaclients.scenario(scenarios, "seek")
    assert out["from_five"] == [[i, f"s-{i}"] for i in range(5, 10)]
    assert (out["beginning"], out["end"]) == (0, 10)
    # Offset metadata strings are not kept (broker/frontends/kafka/README.md, "Groups"): "" back.
    assert out["committed"] == [7, ""]
    assert out["resumed"] == [[i, f"s-{i}"] for i in range(7, 10)]


def test_admin_client_topics_and_offsets(scenarios: dict[str, Any]) -> None:
    out = javaclients.scenario(scenarios, "admin")
    assert out["nodes"] == [0]  # a single broker is node 0
    assert out["create_again"] == "TopicExistsException"
    assert out["listed"] is True
    assert out["described"] == [[p, 0, 1, 1] for p in range(3)]  # leader 0, replica = ISR
    assert out["earliest"] == [[p, 0] for p in range(3)]
    assert out["latest"] == [[p, 2] for p in range(3)]
    assert out["deleted"] is True


def test_the_scenarios_take_one_jvm(scenarios: dict[str, Any]) -> None:
    proc = scenarios["_proc"]
    names = {"produce", "group_cooperative", "group_eager", "seek", "admin"}
    assert names <= set(scenarios), proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert scenarios["_seconds"] < 60


# --- kill -9 ------------------------------------------------------------------------------

KILL_TOPIC = "JK_KILL9"
KILL_AFTER = 2_000  # acknowledgements seen before the SIGKILL: the producer is mid-stream


def test_acks_all_on_sync_flush_loses_nothing_across_kill_9(
    daemons: Daemons, tmp_path: Path
) -> None:
    """The Java producer sends with acks=all as fast as acknowledgements come; after 2,000
    of them the broker is SIGKILLed with sends in flight. Each acknowledgement was printed as
    it arrived: every one is read back after the restart, at its partition and offset."""
    broker = daemons.broker(
        tmp_path / "broker", settings={"flushDiskType": "SYNC_FLUSH"}, extra_args=KAFKA_LISTEN
    )
    admin = AdminClient({"bootstrap.servers": broker.kafka_endpoint})
    admin.create_topics([NewTopic(KILL_TOPIC, 2, 1)])[KILL_TOPIC].result(15)
    del admin  # else librdkafka keeps dialling the killed broker's port, logging each try
    home = tmp_path / "java-home"
    proc = subprocess.Popen(
        javaclients.command(home, MAIN, broker.kafka_endpoint, "kill9", KILL_TOPIC),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=javaclients.env(home),
    )  # fmt: skip
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    acked: dict[tuple[int, int], str] = {}
    summary = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("ACK "):
            _, partition, offset, n = line.split()
            acked[(int(partition), int(offset))] = f"v{n}"
            if len(acked) == KILL_AFTER:
                broker.kill()  # SIGKILL: no flush, no clean shutdown
        else:
            summary += line
    proc.wait(timeout=60)
    assert not broker.running, f"the producer ended before {KILL_AFTER} acks: {summary}"
    assert '"failed":' in summary and '"failed":0' not in summary, summary  # sends were cut
    broker.start()
    got = _read_all(broker.kafka_endpoint)
    missing = {k: v for k, v in acked.items() if got.get(k) != v}
    assert not missing, (
        f"{len(missing)} of {len(acked)} acknowledged records lost or moved: "
        f"{sorted(missing.items())[:5]}\n{summary}\n{''.join(stderr)[-2000:]}"
    )


def _read_all(bootstrap: str) -> dict[tuple[int, int], str]:
    """Both partitions up to their high watermarks (records stored but never acknowledged,
    cut off by the kill, may be there too: counting records is not enough)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kill9-reader",
                         "enable.auto.commit": False})  # fmt: skip
    ends = {p: consumer.get_watermark_offsets(TopicPartition(KILL_TOPIC, p), 10)[1] for p in (0, 1)}
    consumer.assign([TopicPartition(KILL_TOPIC, p, 0) for p in ends])
    got: dict[tuple[int, int], str] = {}
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and any(
            (p, end - 1) not in got for p, end in ends.items() if end
        ):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                partition, offset, value = msg.partition(), msg.offset(), msg.value()
                assert partition is not None and offset is not None and value is not None
                got[(partition, offset)] = value.decode()
    finally:
        consumer.close()
    return got
