"""Apache's RocketMQ 4.9 Java client (``rocketmq-client:4.9.8``) and ``mqadmin`` through a
real ``wharf-namesrv`` with two broker groups (broker-a, broker-b of cluster JC, each with its
remoting port, SYNC_FLUSH): ``namesrvAddr`` is the NameServer's remoting port, as in a
RocketMQ deployment. The clients run in ``Rmq4Members`` JVMs the test steers line by line
(tests/javaclients.py's Steered): one for the whole module, and a second one that is SIGKILLed.

In order (one module: the daemons and the first JVM start once; the tests share them):
sends spread over both groups' queues and one push consumer gets them all; mqadmin
queryMsgById, queryMsgByUniqueKey, consumerConnection and consumerStatus while that consumer
is up; a group that a member joins, leaves (shutdown) and a member in another JVM joins and
dies in (SIGKILL), under a steady producer; broker-a SIGKILLed under the producer, restarted
on its address, every SEND_OK read back by a consumer."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from wharf.client.admin import Admin

from tests import javaclients
from tests.broker.remoting.test_server import Client
from tests.harness import BrokerProcess, Daemons, NamesrvProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MAIN = "dev.wharf.javatests.Rmq4Members"
GROUPS = ("broker-a", "broker-b")
TOPICS = ("J_SPREAD", "J_REBAL", "J_KILL9")
QUEUES = 4  # per group: 8 queues a topic
ALL_QUEUES = {f"{g}:{q}" for g in GROUPS for q in range(QUEUES)}


class Cluster:
    def __init__(
        self, namesrv: NamesrvProcess, remoting: str, brokers: dict[str, BrokerProcess]
    ) -> None:
        self.namesrv, self.remoting, self.brokers = namesrv, remoting, brokers


async def _route(namesrv: str, topic: str) -> dict[str, Any] | None:
    host, _, port = namesrv.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        client = Client(reader, writer)
        client.send(105, {"topic": topic})  # GET_ROUTEINFO_BY_TOPIC
        reply = await client.reply()
        return json.loads(reply.body) if reply.code == 0 else None
    finally:
        writer.close()


def _wait_routed(namesrv: str, topic: str, groups: int = 2, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        route = asyncio.run(_route(namesrv, topic))
        if route is not None and len(route["queueDatas"]) == groups:
            return
        assert time.monotonic() < deadline, f"{topic} not routed by both groups: {route}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    """wharf-namesrv with a remoting port; broker-a and broker-b registered with it, each on a
    fixed remoting port (broker-a comes back on its address after the kill -9), SYNC_FLUSH;
    auto-create off (TBW102 is not routed through a NameServer) and the topics made on both."""
    root = tmp_path_factory.mktemp("java-cluster")
    namesrv = module_daemons.namesrv(root / "ns", {"remotingListen": "127.0.0.1:0"})
    remoting = json.loads((namesrv.root / "ready.json").read_text())["remoting"]
    brokers = {
        name: module_daemons.broker(
            root / name,
            settings={
                "namesrvAddr": namesrv.endpoint,
                "brokerName": name,
                "brokerClusterName": "JC",
                "autoCreateTopicEnable": False,
                "brokerHeartbeatInterval": 200,
                "flushDiskType": "SYNC_FLUSH",
            },
            extra_args=["--remoting-listen", f"127.0.0.1:{free_port()}"],
            start=False,
        )
        for name in GROUPS
    }
    with ThreadPoolExecutor(max_workers=len(brokers)) as pool:  # each start waits its ready file
        list(pool.map(BrokerProcess.start, brokers.values()))

    async def create() -> None:
        for broker in brokers.values():
            async with Admin(broker.endpoint) as admin:
                for topic in TOPICS:
                    await admin.create_topic(topic, queue_nums=QUEUES)

    asyncio.run(create())
    for topic in TOPICS:
        _wait_routed(remoting, topic)
    return Cluster(namesrv, remoting, brokers)


@pytest.fixture(scope="module")
def jvm(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[javaclients.Steered]:
    """The module's client JVM: the producer and every member but the killed one."""
    steered = javaclients.Steered(tmp_path_factory.mktemp("jvm-a"), MAIN, cluster.remoting)
    yield steered
    steered.close()


def _bodies(events: list[dict[str, Any]], prefix: str) -> list[str]:
    return [e["body"] for e in events if e["body"].startswith(prefix + "-")]


def _got(jvms: list[javaclients.Steered], prefix: str) -> list[dict[str, Any]]:
    return [e for j in jvms for e in j.of("got") if e["body"].startswith(prefix + "-")]


def _misplaced(sent: list[dict[str, Any]], got: list[dict[str, Any]]) -> list[str]:
    """Each acknowledged (queue, offset) that was not read holding the body sent there: what
    the broker answered SEND_OK for is where it is read (empty when all are). A body may be read
    at another position too: the client's retry of a send whose answer was lost."""
    read = {(g["queue"], g["offset"]): g["body"] for g in got}
    return [
        f"{e['queue']}@{e['offset']}: sent {e['body']}, read {read.get((e['queue'], e['offset']))}"
        for e in sent
        if read.get((e["queue"], e["offset"])) != e["body"]
    ]


# --- sends over both groups ---------------------------------------------------------------


@pytest.fixture(scope="module")
def spread(jvm: javaclients.Steered) -> list[dict[str, Any]]:
    """s1 of CG_SPREAD up, 40 sends to J_SPREAD through the NameServer, all received; their
    ``sent`` lines. s1 stays up for mqadmin."""
    jvm.send("join CG_SPREAD J_SPREAD s1")
    jvm.send("produce J_SPREAD 40 0 s")
    jvm.wait_for(lambda: bool(jvm.of("produced", prefix="s")), 60)
    jvm.wait_for(lambda: len(set(_bodies(jvm.of("got", member="s1"), "s"))) >= 40, 60)
    time.sleep(1)  # a duplicate would show up by now
    return [e for e in jvm.of("sent") if e["body"].startswith("s-")]


def test_sends_spread_over_both_groups_and_one_push_consumer_gets_every_one(
    jvm: javaclients.Steered, spread: list[dict[str, Any]]
) -> None:
    sent = spread
    assert [e["status"] for e in sent] == ["SEND_OK"] * 40, jvm.of("send_failed")
    # The producer's round robin over the route's 8 queues, 4 on each group.
    assert Counter(e["queue"] for e in sent) == dict.fromkeys(ALL_QUEUES, 5)
    got = jvm.of("got", member="s1")
    assert sorted(_bodies(got, "s")) == sorted(f"s-{i}" for i in range(40))  # each once
    assert _misplaced(sent, got) == []


# --- mqadmin while a consumer is up -------------------------------------------------------


def test_mqadmin_queries_and_consumer_commands_through_the_namesrv(
    jvm: javaclients.Steered,
    cluster: Cluster,
    spread: list[dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """queryMsgById (an offset id names its broker), queryMsgByUniqueKey (asked of every group
    of the topic's route), consumerConnection and consumerStatus (the broker asks the live
    consumer, 307) with ``-n`` the NameServer, while s1 is up."""
    [s1] = jvm.of("joined", member="s1")
    [sent] = [e for e in spread if e["body"] == "s-5"]
    home = tmp_path_factory.mktemp("mqadmin-home")
    mqadmin = javaclients.mqadmin(home, cluster.remoting)
    commands = {
        "byId": ["queryMsgById", "-i", sent["offset_msg_id"]],
        "byUniqueKey": ["queryMsgByUniqueKey", "-i", sent["msg_id"], "-t", "J_SPREAD"],
        "connection": ["consumerConnection", "-g", "CG_SPREAD"],
        "status": ["consumerStatus", "-g", "CG_SPREAD"],
    }
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:  # ~4 s of JVM each, 2 cores
            futures = {name: pool.submit(mqadmin, *args) for name, args in commands.items()}
            out = {name: f.result() for name, f in futures.items()}
    finally:
        jvm.send("leave s1")  # its pulls would only load the rebalance test's VM

    broker, _, queue_id = sent["queue"].partition(":")
    store_host = cluster.brokers[broker].remoting_endpoint
    for name in ("byId", "byUniqueKey"):
        fields = _fields(out[name])
        assert fields["Topic"] == "J_SPREAD", out[name]
        assert fields["Keys"] == "[s-5]" and fields["Tags"] == "[TagM]", out[name]
        assert (fields["Queue ID"], fields["Queue Offset"]) == (queue_id, str(sent["offset"]))
        assert fields["Store Host"] == store_host, out[name]
        # Stored as Apache's 4.9.8 broker stores a send: CLUSTER added, WAIT=true left out.
        properties = dict(p.split("=", 1) for p in fields["Properties"].strip("{}").split(", "))
        assert properties == {
            "KEYS": "s-5", "TAGS": "TagM", "UNIQ_KEY": sent["msg_id"], "CLUSTER": "JC"
        }, out[name]  # fmt: skip
        # The track: the group consumed it (the broker's committed offset is past it, and
        # its address is the one the NameServer's cluster info names for the group).
        assert "MessageTrack [consumerGroup=CG_SPREAD, trackType=CONSUMED," in out[name], out[name]

    connection = out["connection"]
    rows = [line.split() for line in connection.splitlines() if line.startswith(s1["client_id"])]
    assert len(rows) == 1 and rows[0][2:] == ["JAVA", "V4_9_8"], connection
    assert re.search(r"^J_SPREAD\s+\*$", connection, re.M), connection
    for line in ("ConsumeType: CONSUME_PASSIVELY", "MessageModel: CLUSTERING",
                 "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET"):  # fmt: skip
        assert line in connection, connection

    status = out["status"]
    [row] = re.findall(rf"^1\s+{re.escape(s1['client_id'])}\s+(\S+)\s+(\S+)$", status, re.M)
    assert row[0] == "V4_9_8", status
    assert "Same subscription in the same group of consumer" in status, status
    assert "Rebalance OK" in status, status
    # The consumer's own running info (307, relayed by a broker), written by consumerStatus
    # to <ms>/<clientId>: its subscription and its 8 queues on both groups.
    running = (home / row[1]).read_text()
    queues = set(re.findall(r"^J_SPREAD\s+(broker-[ab])\s+(\d)\s", running, re.M))
    assert {f"{b}:{q}" for b, q in queues} == ALL_QUEUES, running


def _fields(printed: str) -> dict[str, str]:
    """queryMsgById's ``Name:   value`` lines."""
    return {
        k.strip(): v.strip()
        for k, sep, v in (line.partition(": ") for line in printed.splitlines())
        if sep and not k.startswith(" ")
    }


# --- rebalance ----------------------------------------------------------------------------

# A change is settled (the queues re-spread) within this from its effect: the broker tells
# every member at once (NOTIFY_CONSUMER_IDS_CHANGED on a heartbeat, an unregister, a closed
# connection); measured 0.004-0.2 s; the clients' own timer would take up to 20 s (their
# rebalance interval).
REBALANCE_S = 5.0
# Redeliveries come right after a change (measured within 0.1 s): the messages a member had
# consumed but whose offsets it had not sent yet (each 1 s) or was consuming as it lost the
# queue. Shorter than a phase, so a redelivery between changes is caught.
DUPLICATE_WINDOW_S = 2.5
PHASE_S = 4.0  # consuming between two changes


class Holdings:
    """Who holds which queue of a topic, from the members' ``alloc`` lines (each rebalance's
    result: a push consumer drops what it no longer has at once), until they left or died."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.ends: dict[str, float] = {}  # member -> when it left or was killed (ms)

    def latest(self, jvms: list[javaclients.Steered]) -> dict[str, set[str]]:
        """Each live member's queues by its last allocation."""
        out: dict[str, set[str]] = {}
        for j in jvms:
            for e in j.of("alloc", topic=self.topic):
                if e["member"] not in self.ends:
                    out[e["member"]] = set(e["queues"])
        return out

    def spread(self, jvms: list[javaclients.Steered], members: set[str]) -> bool:
        """The live members are exactly ``members`` and hold every queue once between them."""
        latest = self.latest(jvms)
        held = [q for queues in latest.values() for q in queues]
        return set(latest) == members and sorted(held) == sorted(ALL_QUEUES)

    def overlaps(self, jvms: list[javaclients.Steered], until_ms: float) -> dict[str, float]:
        """Per queue, the longest time (s) two members held it at once."""
        intervals: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
        for j in jvms:
            by_member: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for e in j.of("alloc", topic=self.topic):
                by_member[e["member"]].append(e)
            for member, allocs in by_member.items():
                end_of_member = self.ends.get(member, until_ms)
                since: dict[str, float] = {}
                for e in [*allocs, {"ms": end_of_member, "queues": []}]:
                    now = min(e["ms"], end_of_member)
                    for q in list(since):
                        if q not in e["queues"]:
                            intervals[q].append((member, since.pop(q), now))
                    for q in e["queues"]:
                        since.setdefault(q, now)
        out: dict[str, float] = {}
        for q, spans in intervals.items():
            worst = 0.0
            for i, (m1, a1, b1) in enumerate(spans):
                for m2, a2, b2 in spans[i + 1 :]:
                    if m1 != m2:
                        worst = max(worst, (min(b1, b2) - max(a1, a2)) / 1000)
            out[q] = worst
        return out


@pytest.fixture(scope="module")
def second_jvm(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[javaclients.Steered]:
    """Another client JVM (a member that is SIGKILLed), started early so its ~2 s start does
    not fall between two changes."""
    steered = javaclients.Steered(tmp_path_factory.mktemp("jvm-b"), MAIN, cluster.remoting)
    yield steered
    steered.close()


def test_a_group_rebalances_when_members_join_leave_and_are_killed(
    jvm: javaclients.Steered, second_jvm: javaclients.Steered
) -> None:
    """A steady producer (50 msg/s over 8 queues on two groups) and CG_REBAL: m1 alone, m2
    joins (same JVM), m2 shuts down, m3 joins from another JVM, that JVM is SIGKILLed. After
    each change the live members hold every queue once between them within REBALANCE_S; two
    members never hold one queue at once for longer than that; every acknowledged message is
    consumed, where the send put it, and a message consumed twice was consumed again only in
    the DUPLICATE_WINDOW_S after a change (offsets not yet committed by the member that had the
    queue: at-least-once)."""
    jvms = [jvm, second_jvm]
    holdings = Holdings("J_REBAL")
    # What changed -> (when the test asked for it, when it took effect), in ms: a member's
    # start() returned (it has sent its heartbeats: the broker notifies at once), its
    # shutdown() returned (offsets persisted, unregistered), its JVM was killed.
    changes: dict[str, tuple[float, float]] = {}
    settled: dict[str, float] = {}  # what changed -> seconds from its effect to the re-spread

    def change(name: str, members: set[str], step: Callable[[], float]) -> None:
        asked = time.time() * 1000
        changes[name] = (asked, step())
        jvm.wait_for(lambda: holdings.spread(jvms, members), 30)
        settled[name] = time.time() - changes[name][1] / 1000
        time.sleep(PHASE_S)

    def join(steered: javaclients.Steered, member: str) -> Callable[[], float]:
        def step() -> float:
            steered.send(f"join CG_REBAL J_REBAL {member}")
            steered.wait_for(lambda: bool(steered.of("joined", member=member)), 30)
            return float(steered.of("joined", member=member)[0]["ms"])

        return step

    def m2_leaves() -> float:
        jvm.send("leave m2")
        jvm.wait_for(lambda: bool(jvm.of("left", member="m2")), 30)
        holdings.ends["m2"] = jvm.of("left", member="m2")[0]["ms"]
        return holdings.ends["m2"]

    def m3_killed() -> float:
        second_jvm.kill()
        holdings.ends["m3"] = time.time() * 1000
        return holdings.ends["m3"]

    jvm.send("produce J_REBAL 100000 20 r")
    jvm.wait_for(lambda: any(e["body"].startswith("r-") for e in jvm.of("sent")), 30)
    change("m1 joins", {"m1"}, join(jvm, "m1"))
    change("m2 joins", {"m1", "m2"}, join(jvm, "m2"))
    change("m2 leaves", {"m1"}, m2_leaves)
    change("m3 joins", {"m1", "m3"}, join(second_jvm, "m3"))
    assert _got([second_jvm], "r"), "m3 consumed nothing while it held queues"
    change("m3 killed", {"m1"}, m3_killed)
    jvm.send("stop r")
    jvm.wait_for(lambda: bool(jvm.of("produced", prefix="r")), 30)
    # What was acknowledged must be consumed; a send that timed out (a loaded VM) may or may
    # not have been stored.
    tried = {e["body"] for kind in ("sent", "send_failed") for e in jvm.of(kind)}
    sent = [e for e in jvm.of("sent", status="SEND_OK") if e["body"].startswith("r-")]
    jvm.wait_for(lambda: {g["body"] for g in _got(jvms, "r")} >= {e["body"] for e in sent}, 30)
    time.sleep(1)  # a late duplicate shows up too
    end = time.time() * 1000

    got = _got(jvms, "r")
    # Sending went on through every change, and each member consumed some of it.
    assert sent[-1]["ms"] > changes["m3 killed"][1] + 1000
    assert {g["member"] for g in got} == {"m1", "m2", "m3"}
    assert {g["body"] for g in got} <= tried
    assert _misplaced(sent, got) == []
    slow = {name: s for name, s in settled.items() if s > REBALANCE_S}
    assert not slow, (slow, settled)
    shared = {q: s for q, s in holdings.overlaps(jvms, end).items() if s > REBALANCE_S}
    assert not shared, shared
    # Duplicates: each reception after a body's first falls in a window around a change.
    first_seen: set[str] = set()
    late: list[str] = []
    for g in sorted(got, key=lambda g: g["ms"]):
        if g["body"] in first_seen and not any(
            asked <= g["ms"] <= effect + DUPLICATE_WINDOW_S * 1000
            for asked, effect in changes.values()
        ):
            late.append(f"{g['body']} again by {g['member']} at {g['ms']}")
        first_seen.add(g["body"])
    assert not late, (late[:10], changes)


# --- kill -9 of a SYNC_FLUSH broker -------------------------------------------------------

KILL_AFTER = 300  # acknowledgements before the SIGKILL: the producer is mid-stream


def test_a_sync_flush_broker_killed_under_the_producer_keeps_every_send_ok(
    jvm: javaclients.Steered, cluster: Cluster
) -> None:
    """SYNC_FLUSH answers SEND_OK once the record is on disk. The producer sends one message
    at a time, as fast as answers come, over both groups; after KILL_AFTER answers broker-a is
    SIGKILLed with a send in flight, the producer goes on over broker-b (the client retries a
    failed send on another group), broker-a restarts on its address and is sent to again; then
    a new group reads both groups from their first offsets: every SEND_OK is there, at the
    queue and offset its answer named."""
    broker_a = cluster.brokers["broker-a"]

    def acked() -> list[dict[str, Any]]:  # other outcomes (a timeout) promise nothing
        return [e for e in jvm.of("sent", status="SEND_OK") if e["body"].startswith("k-")]

    jvm.send("produce J_KILL9 1000000 0 k")
    jvm.wait_for(lambda: len(acked()) >= KILL_AFTER, 60)
    broker_a.kill()  # SIGKILL: no flush, no clean shutdown
    killed_ms = time.time() * 1000
    jvm.wait_for(lambda: sum(e["ms"] > killed_ms for e in acked()) >= 100, 30)
    broker_a.start()
    back_ms = time.time() * 1000
    jvm.wait_for(
        lambda: any(e["ms"] > back_ms and e["queue"].startswith("broker-a:") for e in acked()), 30
    )
    jvm.send("stop k")
    jvm.wait_for(lambda: bool(jvm.of("produced", prefix="k")), 30)
    sent = acked()
    before = [e for e in sent if e["ms"] < killed_ms and e["queue"].startswith("broker-a:")]
    assert len(before) >= KILL_AFTER // 4, len(before)  # broker-a had its share before the kill

    jvm.send("join CG_KILL9 J_KILL9 k1")
    wanted = {e["body"] for e in sent}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not wanted <= set(_bodies(jvm.of("got"), "k")):
        time.sleep(0.2)
    missing = _misplaced(sent, [g for g in jvm.of("got", member="k1")])
    assert not missing, (
        f"{len(missing)} of {len(sent)} acknowledged messages lost or moved: {missing[:5]}; "
        f"failed sends: {len(jvm.of('send_failed'))}"
    )
