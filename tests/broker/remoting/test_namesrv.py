"""The Wharf NameServer's RocketMQ 4.x remoting port (``wharf-namesrv --remoting-listen``):
routes of every registered group named by its brokers' remoting addresses, over a RouteTable
(units) and over real daemons: a NameServer with two groups with remoting ports and one
without, asked by this suite's raw client (105, 106, 206, 101) and used by the real C++ 4.x
client as its ``namesrvAddr``, whose sends land on both groups and are all consumed."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.broker.kit.remoting.frame import FrameDecoder, RemotingCommand, encode
from wharf.broker.namesrv.config import ConfigError, load_namesrv_settings
from wharf.broker.namesrv.remoting import NamesrvRemoting
from wharf.broker.namesrv.routes import RouteTable, TopicQueues
from wharf.client.admin import Admin
from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

from tests.broker.daemon_helpers import FAST_RETRIES
from tests.broker.remoting.shares import stop_when_all_seen
from tests.harness import REPO_ROOT, BrokerProcess, Daemons, NamesrvProcess

RMQ4_PYTHON = REPO_ROOT / ".venv-rmq4" / "bin" / "python"
SCRIPT = Path(__file__).with_name("cpp_client_script.py")
TOPIC = "T_NS"
FAILOVER_TOPIC = "T_NS_FO"  # the broker-kill test's own: the others count TOPIC's messages
NODE_TOPIC = "T_NS_NODE"  # ali-ons' own
MIX_TOPIC = "T_NS_MIX"  # the orderly / batch / delay test's own
SPLIT_TOPIC = "T_NS_SPLIT"  # the two consumers' own
BROADCAST_TOPIC = "T_NS_BC"  # the broadcasting consumers' own
TIMEOUT = 10.0


def _request(code: int, **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, opaque=7, ext_fields=fields)


def _body(reply: RemotingCommand) -> Any:
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return json.loads(reply.body)


# --- over a RouteTable ----------------------------------------------------------------------


async def test_routes_name_remoting_addresses_and_leave_out_brokers_without_one() -> None:
    table = RouteTable()
    held = {"T": TopicQueues(2, 2, 6)}
    table.register(("C", "a", 0), "g:10", 1, dict(held), remoting_address="r:10")
    table.register(("C", "a", 1), "g:11", 1, dict(held), remoting_address="r:11")
    table.register(("C", "b", 0), "g:20", 1, dict(held))  # no remoting port: left out
    table.register(("C", "c", 0), "g:30", 1, dict(held))  # master without one, slave with one
    table.register(("C", "c", 1), "g:31", 1, dict(held), remoting_address="r:31")
    ns = NamesrvRemoting(table)
    conn: Any = None

    route = _body(await ns.get_route(conn, _request(105, topic="T")))
    assert route["brokerDatas"] == [
        {"brokerAddrs": {"0": "r:10", "1": "r:11"}, "brokerName": "a", "cluster": "C"},
        {"brokerAddrs": {"1": "r:31"}, "brokerName": "c", "cluster": "C"},
    ]
    assert route["filterServerTable"] == {}
    assert [(q["brokerName"], q["perm"], q["readQueueNums"], q["writeQueueNums"])
            for q in route["queueDatas"]] == [("a", 6, 2, 2), ("c", 4, 2, 2)]  # fmt: skip

    unknown = await ns.get_route(conn, _request(105, topic="nope"))
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    assert unknown.remark == "No topic route info in name server for the topic: nope"
    assert (await ns.get_route(conn, _request(105))).code == ResponseCode.SYSTEM_ERROR
    # %RETRY%<group> before any broker holds it: one queue on each master with a remoting port.
    retry = _body(await ns.get_route(conn, _request(105, topic="%RETRY%CG")))
    assert [b["brokerName"] for b in retry["brokerDatas"]] == ["a"]
    assert retry["queueDatas"] == [
        {"brokerName": "a", "perm": 6, "readQueueNums": 1, "topicSysFlag": 0, "writeQueueNums": 1}
    ]

    info = _body(await ns.get_cluster_info(conn, _request(106)))
    assert sorted(info["brokerAddrTable"]) == ["a", "c"]
    assert info["clusterAddrTable"] == {"C": ["a", "c"]}
    # 304 (the Java client's getSystemTopicList, the Dashboard's topic page): cluster and group
    # names, and a broker to ask 305 (a master's address first).
    system = _body(await ns.get_system_topic_list(conn, _request(304)))
    assert system == {"brokerAddr": "r:10", "topicList": ["C", "a", "c"]}
    table.register(("C", "b", 0), "g:20", 2, {"U": TopicQueues(1, 1, 6)}, remoting_address="")
    assert _body(await ns.get_topic_list(conn, _request(206))) == {"topicList": ["T"]}
    kv = await ns.get_kv_config(conn, _request(101, namespace="ORDER_TOPIC_CONFIG", key="T"))
    assert kv.code == ResponseCode.QUERY_NOT_FOUND

    # A broker that registers its remoting port later moves the topic's route.
    before = table.topic_version("U")
    table.register(("C", "b", 0), "g:20", 2, {"U": TopicQueues(1, 1, 6)}, remoting_address="r:20")
    assert table.topic_version("U") > before
    route = _body(await ns.get_route(conn, _request(105, topic="U")))
    assert route["brokerDatas"] == [
        {"brokerAddrs": {"0": "r:20"}, "brokerName": "b", "cluster": "C"}
    ]


async def test_delete_topic_in_namesrv_drops_its_route_until_a_broker_registers_it() -> None:
    """216 DELETE_TOPIC_IN_NAMESRV (mqadmin deleteTopic's second step): the route is gone at
    once, the other topics stay, and a broker registering the topic again brings it back."""
    table = RouteTable()
    table.register(("C", "a", 0), "g:10", 1, {"T": TopicQueues(2, 2, 6),
                   "K": TopicQueues(1, 1, 6)}, remoting_address="r:10")  # fmt: skip
    table.register(("C", "b", 0), "g:20", 1, {"T": TopicQueues(2, 2, 6)}, remoting_address="r:20")
    ns = NamesrvRemoting(table)
    conn: Any = None
    deleted = await ns.delete_topic(conn, _request(216, topic="T"))
    assert deleted.code == ResponseCode.SUCCESS
    assert (await ns.get_route(conn, _request(105, topic="T"))).code == (
        ResponseCode.TOPIC_NOT_EXIST
    )
    assert _body(await ns.get_route(conn, _request(105, topic="K")))["queueDatas"]
    assert (await ns.delete_topic(conn, _request(216, topic="never"))).code == (
        ResponseCode.SUCCESS
    )
    assert (await ns.delete_topic(conn, _request(216))).code == ResponseCode.SYSTEM_ERROR
    table.register(("C", "b", 0), "g:20", 2, {"T": TopicQueues(4, 4, 6)}, remoting_address="r:20")
    route = _body(await ns.get_route(conn, _request(105, topic="T")))
    assert [q["brokerName"] for q in route["queueDatas"]] == ["b"]


async def test_wipe_and_add_write_perm_of_a_group() -> None:
    """205 WIPE_WRITE_PERM_OF_BROKER / 327 ADD_WRITE_PERM_OF_BROKER as the 4.9.8 client sends
    them (MQClientAPIImpl.wipeWritePermOfBroker: version 409, {brokerName}): the group's queues
    lose the write bit in every route (wipeTopicCount: the topics it holds), heartbeats and
    unchanged registrations keep it so, a registration with a changed topic table (Apache:
    createAndUpdateQueueData) or 327 brings it back; an unknown name: 0, nothing changes."""
    table = RouteTable()
    held = {"T": TopicQueues(2, 2, 6), "R": TopicQueues(1, 1, 4)}
    table.register(("C", "a", 0), "g:10", 1, dict(held), remoting_address="r:10")
    table.register(("C", "a", 1), "g:11", 1, dict(held), remoting_address="r:11")
    table.register(("C", "b", 0), "g:20", 1, {"T": TopicQueues(2, 2, 6)}, remoting_address="r:20")
    ns = NamesrvRemoting(table)
    conn: Any = SimpleNamespace(peer="127.0.0.1:1")
    handlers = ns.handlers()

    async def call(code: int, **fields: str) -> RemotingCommand:
        request = RemotingCommand(code=code, opaque=7, version=409, ext_fields=fields)
        reply = await handlers[code](conn, request)
        assert reply.opaque == 7 and reply.is_response
        return reply

    async def perms(topic: str = "T") -> dict[str, int]:
        route = _body(await call(105, topic=topic))
        return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}

    changes: list[set[str]] = []
    table.watch(changes.append)
    wiped = await call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="a")
    assert wiped.code == ResponseCode.SUCCESS
    assert wiped.ext_fields == {"wipeTopicCount": "2"}
    assert changes == [{"T", "R"}]  # gRPC clients refresh those routes at once
    assert await perms() == {"a": 4, "b": 6}
    assert await perms("R") == {"a": 4}
    unknown = await call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="zz")
    assert unknown.ext_fields == {"wipeTopicCount": "0"}
    assert table.heartbeat(("C", "a", 0), 1)
    table.register(("C", "a", 0), "g:10", 1, dict(held), remoting_address="r:10")  # unchanged
    table.register(("C", "a", 1), "g:11", 2, dict(held), remoting_address="r:11")  # a slave
    assert await perms() == {"a": 4, "b": 6}
    added = await call(RequestCode.ADD_WRITE_PERM_OF_BROKER, brokerName="a")
    assert added.ext_fields == {"addTopicCount": "2"}
    assert await perms() == {"a": 6, "b": 6}
    assert await perms("R") == {"a": 4}  # the topic's own perm (Apache would say 6)
    await call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="a")
    table.register(("C", "a", 0), "g:10", 2, dict(held), remoting_address="r:10")  # changed
    assert await perms() == {"a": 6, "b": 6}
    missing = await call(RequestCode.WIPE_WRITE_PERM_OF_BROKER)
    assert missing.code == ResponseCode.SYSTEM_ERROR


def test_remoting_listen_setting() -> None:
    config = load_namesrv_settings(None, {"WHARF_NAMESRV_REMOTING_LISTEN": "0.0.0.0:0"})
    assert config.remoting_listen == "0.0.0.0:0"
    assert load_namesrv_settings().remoting_listen == ""  # off by default
    with pytest.raises(ConfigError, match="HOST:PORT"):
        load_namesrv_settings(None, None, {"remoting_listen": "9877"})
    both = load_namesrv_settings(  # ACL on the remoting port: tests/broker/remoting/test_acl.py
        None, None, {"remoting_listen": "127.0.0.1:0", "acl_enable": "true", "acl_file": "a"}
    )
    assert both.acl_enable and both.remoting_listen == "127.0.0.1:0"


# --- real daemons ---------------------------------------------------------------------------


class Cluster:
    def __init__(self, namesrv: NamesrvProcess, remoting: str, brokers: dict[str, BrokerProcess]):
        self.namesrv, self.remoting, self.brokers = namesrv, remoting, brokers


async def _call(
    address: str, code: int, fields: dict[str, Any] | None = None, version: int = 0
) -> RemotingCommand:
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        request = RemotingCommand(
            code=code,
            opaque=1,
            version=version,
            ext_fields={k: str(v) for k, v in (fields or {}).items()},
        )
        writer.write(encode(request))
        decoder = FrameDecoder()
        while True:
            data = await asyncio.wait_for(reader.read(65536), TIMEOUT)
            assert data, "connection closed"
            for reply in decoder.feed(data):
                assert reply.is_response and reply.opaque == 1
                return reply
    finally:
        writer.close()


@pytest.fixture(scope="module")
def cluster(module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    """A NameServer with a remoting port; broker-a and broker-b with remoting ports, broker-c
    without; auto-create off and ``T_NS`` (2 queues) on each group."""
    root = tmp_path_factory.mktemp("ns-remoting")
    namesrv = module_daemons.namesrv(root / "ns", {"remotingListen": "127.0.0.1:0"}, start=False)
    brokers: dict[str, BrokerProcess] = {}
    namesrv.start()
    remoting = json.loads((namesrv.root / "ready.json").read_text())["remoting"]
    for name in ("broker-a", "broker-b", "broker-c"):
        brokers[name] = module_daemons.broker(
            root / name,
            settings={
                "namesrvAddr": namesrv.endpoint,
                "brokerName": name,
                "brokerClusterName": "C",
                "autoCreateTopicEnable": False,
                "brokerHeartbeatInterval": 200,
                "messageDelayLevel": FAST_RETRIES,  # retries after 1 s, not 10
            },
            extra_args=["--remoting-listen", "127.0.0.1:0"] if name != "broker-c" else [],
        )

    async def create() -> None:
        for broker in brokers.values():
            async with Admin(broker.endpoint) as admin:
                await admin.create_topic(TOPIC, queue_nums=2)
                await admin.create_topic(FAILOVER_TOPIC, queue_nums=2)  # its own test
                await admin.create_topic(NODE_TOPIC, queue_nums=2)
                await admin.create_topic(MIX_TOPIC, queue_nums=2)
                await admin.create_topic(SPLIT_TOPIC, queue_nums=2)
                await admin.create_topic(BROADCAST_TOPIC, queue_nums=2)

    asyncio.run(create())
    deadline = time.monotonic() + 10
    # Until both groups re-registered with every topic: each creation is answered once on disk,
    # so a group's registrations can carry the first topics before the last ones.
    for topic in (TOPIC, FAILOVER_TOPIC, NODE_TOPIC, MIX_TOPIC, SPLIT_TOPIC, BROADCAST_TOPIC):
        asyncio.run(_until_routed(remoting, topic, deadline))
    return Cluster(namesrv, remoting, brokers)


async def _until_routed(remoting: str, topic: str, deadline: float) -> None:
    """Until the NameServer routes ``topic`` to both groups (a queue data each), polled every
    0.1 s; fails past ``deadline`` (time.monotonic)."""
    while True:
        reply = await _call(remoting, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if reply.code == 0 and len(json.loads(reply.body)["queueDatas"]) == 2:
            return
        assert time.monotonic() < deadline, f"{topic} not routed: {reply}"
        await asyncio.sleep(0.1)


async def test_wipe_write_perm_through_the_namesrv_remoting_port(cluster: Cluster) -> None:
    """mqadmin wipeWritePerm -b broker-a -n <the NameServer's remoting port>, as the 4.9.8
    client sends it: broker-a's queues are routed read-only while its heartbeats go on, then
    addWritePerm gives the write bit back."""
    remoting = cluster.remoting

    async def perms() -> dict[str, int]:
        route = _body(await _call(remoting, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}))
        return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}

    fields = {"brokerName": "broker-a"}
    wiped = await _call(remoting, RequestCode.WIPE_WRITE_PERM_OF_BROKER, fields, version=409)
    try:
        assert wiped.code == ResponseCode.SUCCESS, wiped.remark
        assert int(wiped.ext_fields["wipeTopicCount"]) >= 6  # the topics broker-a registered
        assert await perms() == {"broker-a": 4, "broker-b": 6}
        await asyncio.sleep(0.6)  # heartbeats every 200 ms: they do not undo it
        assert await perms() == {"broker-a": 4, "broker-b": 6}
    finally:
        added = await _call(remoting, RequestCode.ADD_WRITE_PERM_OF_BROKER, fields, version=409)
    assert added.code == ResponseCode.SUCCESS, added.remark
    assert added.ext_fields["addTopicCount"] == wiped.ext_fields["wipeTopicCount"]
    assert await perms() == {"broker-a": 6, "broker-b": 6}


async def test_raw_client_gets_the_route_of_both_groups(cluster: Cluster) -> None:
    a, b = cluster.brokers["broker-a"], cluster.brokers["broker-b"]
    assert a.remoting_endpoint and b.remoting_endpoint
    route = _body(
        await _call(cluster.remoting, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    )
    assert route["brokerDatas"] == [
        {"brokerAddrs": {"0": a.remoting_endpoint}, "brokerName": "broker-a", "cluster": "C"},
        {"brokerAddrs": {"0": b.remoting_endpoint}, "brokerName": "broker-b", "cluster": "C"},
    ]  # broker-c holds the topic too, but has no remoting port
    assert route["queueDatas"] == [
        {"brokerName": n, "perm": 6, "readQueueNums": 2, "topicSysFlag": 0, "writeQueueNums": 2}
        for n in ("broker-a", "broker-b")
    ]
    info = _body(await _call(cluster.remoting, RequestCode.GET_BROKER_CLUSTER_INFO))
    assert info["clusterAddrTable"] == {"C": ["broker-a", "broker-b"]}
    assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": b.remoting_endpoint}
    topics = _body(await _call(cluster.remoting, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert TOPIC in topics["topicList"]
    kv = await _call(cluster.remoting, RequestCode.GET_KV_CONFIG, {"namespace": "N", "key": "K"})
    assert kv.code == ResponseCode.QUERY_NOT_FOUND
    assert (await _call(cluster.remoting, RequestCode.SEND_MESSAGE)).code == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    )
    # gRPC GetClusterInfo names the remoting address each broker registered ("" without one).
    async with grpc.aio.insecure_channel(cluster.namesrv.endpoint) as channel:
        listing = await namesrv_pb2_grpc.NameServiceStub(channel).GetClusterInfo(
            namesrv_pb2.GetClusterInfoRequest()
        )
    assert {x.broker_name: x.remoting_address for x in listing.brokers} == {
        "broker-a": a.remoting_endpoint,
        "broker-b": b.remoting_endpoint,
        "broker-c": "",
    }


def _run_cpp(namesrv: str, home: Path, command: str, **args: Any) -> dict[str, Any]:
    if not RMQ4_PYTHON.exists():
        pytest.skip("the RocketMQ 4.x C++ client's venv is missing: run `make rmq4-client`")
    home.mkdir(exist_ok=True)  # the library logs to ~/logs/rocketmq-cpp/
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(RMQ4_PYTHON), str(SCRIPT), namesrv, command, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
        check=False,
    )
    logs = "\n".join(p.read_text(errors="replace") for p in home.glob("logs/rocketmq-cpp/*"))
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n--- client log ---\n{logs[-4000:]}"
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


async def _stored(broker: BrokerProcess, topic: str = TOPIC) -> int:
    """Messages of ``topic`` in the broker's two queues (GET_MAX_OFFSET on its remoting port)."""
    total = 0
    for queue_id in (0, 1):
        fields = {"topic": topic, "queueId": queue_id}
        reply = await _call(broker.remoting_endpoint, RequestCode.GET_MAX_OFFSET, fields)
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        total += int(reply.ext_fields["offset"])
    return total


@pytest.mark.slow
async def test_cpp_client_through_the_namesrv_sends_to_both_groups(
    cluster: Cluster, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    specs = [{"body": f"ns-{i}", "tags": "TagA", "keys": f"k{i}"} for i in range(20)]
    out = await asyncio.to_thread(
        _run_cpp, cluster.remoting, home, "send", group="PG_NS", topic=TOPIC, messages=specs
    )
    assert out["error"] is None
    assert [r["status"] for r in out["sent"]] == [0] * len(specs)  # SendStatus.OK
    a, b = cluster.brokers["broker-a"], cluster.brokers["broker-b"]
    deadline = time.monotonic() + 5  # a send is acknowledged before its queue unit is written
    while sum(stored := (await _stored(a), await _stored(b))) < len(specs):
        assert time.monotonic() < deadline, stored
        await asyncio.sleep(0.1)
    # The C++ producer goes round the route's 4 writable queues: 2 on each group.
    assert sum(stored) == len(specs) and min(stored) > 0, stored

    got = await asyncio.to_thread(
        _run_cpp, cluster.remoting, home, "consume", group="CG_NS", topic=TOPIC,
        expect=len(specs), bodies=[s["body"] for s in specs], timeout=40, settle_s=1,
    )  # fmt: skip
    received = got["received"]
    assert sorted(m["body"] for m in received) == sorted(s["body"] for s in specs)
    assert all(m["topic"] == TOPIC and m["tags"] == "TagA" for m in received)


@pytest.mark.slow
async def test_cpp_producer_goes_on_to_the_other_group_when_a_broker_is_killed(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The 4.x client's own retry on another broker: broker-a is killed (SIGKILL) while a C++
    producer sends through the NameServer; its sends after that land on broker-b (a failed one
    is retried there), and every acknowledged message is consumed once broker-a is back."""
    home = tmp_path / "home"
    specs = [{"body": f"fo-{i}", "tags": "TagF", "keys": f"f{i}"} for i in range(30)]
    a = cluster.brokers["broker-a"]
    send = functools.partial(
        _run_cpp, cluster.remoting, home, "send", group="PG_FO", topic=FAILOVER_TOPIC,
        messages=specs, pause_s=0.2, timeout_ms=3000,
    )  # fmt: skip
    sending = asyncio.create_task(asyncio.to_thread(send))
    await asyncio.sleep(2.0)  # ~10 sent, over both groups
    await asyncio.to_thread(a.kill)
    out = await sending
    acknowledged = [
        s["body"] for s, r in zip(specs, out["sent"], strict=False) if r and r["status"] == 0
    ]
    # About 20 sends came after the kill: they went on to broker-b (each at most retried).
    assert len(acknowledged) >= 25, (len(acknowledged), out["error"])
    await asyncio.to_thread(a.start)
    deadline = time.monotonic() + 20  # broker-a registered again: the route names both groups
    while True:
        route = await _call(
            cluster.remoting, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": FAILOVER_TOPIC}
        )
        if route.code == ResponseCode.SUCCESS and len(_body(route)["brokerDatas"]) == 2:
            break
        assert time.monotonic() < deadline, "broker-a never came back into the route"
        await asyncio.sleep(0.2)
    got = await asyncio.to_thread(
        _run_cpp, cluster.remoting, home, "consume", group="CG_FO", topic=FAILOVER_TOPIC,
        expect=len(acknowledged), bodies=acknowledged, timeout=40, settle_s=1,
        expression="TagF",
    )  # fmt: skip
    received = sorted({m["body"] for m in got["received"]})
    assert received == sorted(acknowledged)


@pytest.mark.slow
async def test_ali_ons_through_the_namesrv_sends_to_both_groups_and_retries(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Node's ali-ons with the NameServer as ``nameSrv``: its sends land on both groups, a
    push consumer gets every message, and one whose handler throws once comes back through
    ``%RETRY%<group>`` (routed by the NameServer before any broker held it)."""
    from tests.broker.remoting.test_node_client import _spec, run_node

    endpoint: Any = SimpleNamespace(remoting_endpoint=cluster.remoting)
    home = tmp_path / "home"
    specs = [_spec(i, "node") for i in range(12)]
    bodies = [s["body"] for s in specs]
    out = await asyncio.to_thread(
        run_node, endpoint, home, "send", group="PG_NODE", topic=NODE_TOPIC, messages=specs
    )
    assert [s["sendStatus"] for s in out["sent"]] == ["SEND_OK"] * len(specs)
    a, b = cluster.brokers["broker-a"], cluster.brokers["broker-b"]
    deadline = time.monotonic() + 5
    while sum(stored := (await _stored(a, NODE_TOPIC), await _stored(b, NODE_TOPIC))) < 12:
        assert time.monotonic() < deadline, stored
        await asyncio.sleep(0.1)
    assert min(stored) > 0, stored  # both groups
    got = await asyncio.to_thread(
        run_node, endpoint, home, "consume", group="CG_NODE", topic=NODE_TOPIC,
        expression="*", bodies=bodies, failOnce=["node-5"], timeout=90, settleMs=2000,
    )  # fmt: skip
    assert sorted(m["body"] for m in got["received"]) == sorted([*bodies, "node-5"])
    retried = [m for m in got["received"] if m["body"] == "node-5"]
    assert [m["reconsumeTimes"] for m in retried] == [0, 1]
    assert retried[1]["props"]["REAL_TOPIC"] == "%RETRY%CG_NODE"


@pytest.mark.slow
async def test_cpp_orderly_batch_and_delayed_sends_through_the_namesrv(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Through the NameServer over two groups (4 queues: 2 on each): orderly sends keep their
    order in the queue the selector picked, a batch comes back message by message, a delay
    level of 1 s delivers no sooner."""
    home = tmp_path / "home"

    def run(command: str, **args: Any) -> dict[str, Any]:
        return _run_cpp(cluster.remoting, home, command, group="PG_MIX", topic=MIX_TOPIC, **args)

    orderly = [{"body": f"orderly-{i}", "tags": "TagM"} for i in range(5)]
    out = await asyncio.to_thread(run, "send", messages=orderly, mode="orderly", arg=3)
    assert out["error"] is None
    offsets = [r["offset"] for r in out["sent"]]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5
    batch = [{"body": f"batch-{i}", "tags": "TagM"} for i in range(3)]
    out = await asyncio.to_thread(run, "send", messages=batch, mode="batch")
    assert out["error"] is None and out["sent"][0]["status"] == 0
    delayed = [{"body": "delayed", "tags": "TagM", "delay": 1}]
    out = await asyncio.to_thread(run, "send", messages=delayed)
    assert out["error"] is None and out["sent"][0]["status"] == 0
    every = orderly + batch + delayed
    got = await asyncio.to_thread(
        _run_cpp, cluster.remoting, home, "consume", group="CG_MIX", topic=MIX_TOPIC,
        expect=len(every), bodies=[s["body"] for s in every], timeout=40, settle_s=1,
    )  # fmt: skip
    received = got["received"]
    assert sorted(m["body"] for m in received) == sorted(s["body"] for s in every)  # once each
    in_order = [m for m in received if m["body"].startswith("orderly")]
    assert len({m["queue_id"] for m in in_order}) == 1  # one queue: the selector's
    assert [m["body"] for m in sorted(in_order, key=lambda m: m["offset"])] == [
        s["body"] for s in orderly
    ]
    late = next(m for m in received if m["body"] == "delayed")
    assert late["store_ms"] - late["born_ms"] >= 950, late


async def _members(cluster: Cluster, group: str) -> int:
    """Members of ``group`` both groups' masters know (GET_CONSUMER_LIST_BY_GROUP)."""
    counts = []
    for name in ("broker-a", "broker-b"):
        reply = await _call(
            cluster.brokers[name].remoting_endpoint,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP,
            {"consumerGroup": group},
        )
        ok = reply.code == ResponseCode.SUCCESS
        counts.append(len(json.loads(reply.body)["consumerIdList"]) if ok else 0)
    return min(counts)


@pytest.mark.slow
async def test_two_cpp_consumers_through_the_namesrv_split_the_queues_of_both_groups(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two C++ PushConsumers of one group through the NameServer: the 4 queues of the two
    groups are split between them (both get messages) and each message reaches exactly one."""
    specs = [{"body": f"split-{i}", "tags": "TagS"} for i in range(24)]
    bodies = [s["body"] for s in specs]

    def consume(i: int) -> dict[str, Any]:
        return _run_cpp(
            cluster.remoting, tmp_path / f"h{i}", "consume", group="CG_SPLIT",
            topic=SPLIT_TOPIC, expect=len(bodies) + 1, timeout=30, settle_s=0,
            progress=str(tmp_path / f"progress{i}"), stop_file=str(tmp_path / "stop"),
        )  # fmt: skip

    consumers = [asyncio.create_task(asyncio.to_thread(consume, i)) for i in (1, 2)]
    deadline = time.monotonic() + 20
    while await _members(cluster, "CG_SPLIT") < 2:
        assert time.monotonic() < deadline, "the two consumers never both joined"
        await asyncio.sleep(0.2)
    await asyncio.sleep(3)  # their rebalance after the membership change
    out = await asyncio.to_thread(
        _run_cpp, cluster.remoting, tmp_path / "h0", "send", group="PG_SPLIT",
        topic=SPLIT_TOPIC, messages=specs,
    )  # fmt: skip
    assert out["error"] is None and all(r["status"] == 0 for r in out["sent"])
    progress = [tmp_path / f"progress{i}" for i in (1, 2)]
    await asyncio.to_thread(stop_when_all_seen, progress, bodies, tmp_path / "stop", 30)
    got = [(await task)["received"] for task in consumers]
    assert sorted(m["body"] for part in got for m in part) == sorted(bodies)  # once each
    assert all(got), [len(part) for part in got]  # both consumers had queues


@pytest.mark.slow
async def test_broadcasting_cpp_consumers_through_the_namesrv_each_get_every_message(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two BROADCASTING C++ PushConsumers of one group through the NameServer: each reads
    all 4 queues of the two groups (offsets kept by the client) and gets every message."""
    specs = [{"body": f"bcast-{i}", "tags": "TagB"} for i in range(12)]
    bodies = [s["body"] for s in specs]

    def consume(i: int) -> dict[str, Any]:
        return _run_cpp(
            cluster.remoting, tmp_path / f"h{i}", "consume", group="CG_BCAST",
            topic=BROADCAST_TOPIC, broadcasting=True, expect=len(bodies), bodies=bodies,
            timeout=30, settle_s=1,
        )  # fmt: skip

    consumers = [asyncio.create_task(asyncio.to_thread(consume, i)) for i in (1, 2)]
    deadline = time.monotonic() + 20
    while await _members(cluster, "CG_BCAST") < 2:
        assert time.monotonic() < deadline, "the two consumers never both joined"
        await asyncio.sleep(0.2)
    await asyncio.sleep(3)  # each has every queue and its starting offsets
    # The C++ producer fails at once when the NameServer has no route for the topic (seen in
    # one loaded CI-form run, 2026-11-30; an earlier test kills and restarts broker-a): the
    # subject here is broadcasting, so wait until both groups route the topic.
    await _until_routed(cluster.remoting, BROADCAST_TOPIC, deadline + 10)
    out = await asyncio.to_thread(
        _run_cpp, cluster.remoting, tmp_path / "h0", "send", group="PG_BCAST",
        topic=BROADCAST_TOPIC, messages=specs,
    )  # fmt: skip
    assert out["error"] is None and all(r["status"] == 0 for r in out["sent"])
    for task in consumers:
        received = (await task)["received"]
        assert sorted(m["body"] for m in received) == sorted(bodies)
