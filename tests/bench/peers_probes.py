"""How ``peers.py`` (and ``peers_groups.py``) talk to a broker outside its clients: whether it
serves yet, and the topics a phase needs, over the protocol each path uses (Kafka Metadata and
CreateTopics; RocketMQ remoting GET_BROKER_CLUSTER_INFO, GET_ROUTEINFO_BY_TOPIC and
UPDATE_AND_CREATE_TOPIC, as mqadmin sends them). The probes are raw requests, one short
connection each: a client library made and dropped every 50 ms crashed a process under load."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Callable

from tests.bench.remoting import RemotingPipe

QUEUES = 8


_METADATA_V1 = struct.pack(">hhih5si", 3, 1, 1, 5, b"probe", 0)  # no topics: brokers only


def kafka_serving(bootstrap: str, brokers: int = 1) -> bool:
    """A Metadata v1 request answers with at least ``brokers`` brokers (raw bytes)."""
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0) as sock:
            sock.settimeout(2.0)
            sock.sendall(struct.pack(">i", len(_METADATA_V1)) + _METADATA_V1)
            head = b""
            while len(head) < 12:  # size, correlation id, brokers' count
                chunk = sock.recv(12 - len(head))
                if not chunk:
                    return False
                head += chunk
    except OSError:
        return False
    _size, correlation, listed = struct.unpack(">iii", head)
    return correlation == 1 and listed >= brokers


async def _remoting(address: str, code: int, fields: dict[str, str]) -> tuple[int, bytes, str]:
    pipe = await asyncio.wait_for(RemotingPipe.open(address), 1.0)
    try:
        reply = await asyncio.wait_for(pipe.request(code, fields), 5.0)
        return reply.code, reply.body or b"", reply.remark or ""
    finally:
        pipe.close()


def remoting_serving(namesrv: str) -> bool:
    """GET_BROKER_CLUSTER_INFO (106) at the NameServer clients are given lists a broker."""
    try:
        code, body, _ = asyncio.run(_remoting(namesrv, 106, {}))
    except (OSError, TimeoutError, ConnectionError):
        return False
    return code == 0 and b"brokerAddrs" in body


def remoting_groups(namesrv: str) -> int:
    """How many broker groups GET_BROKER_CLUSTER_INFO (106) lists (0: no answer). Wharf's
    NameServer answers strict JSON (fastjson's bare integer keys quoted)."""
    try:
        code, body, _ = asyncio.run(_remoting(namesrv, 106, {}))
    except (OSError, TimeoutError, ConnectionError):
        return 0
    return len(json.loads(body).get("brokerAddrTable", {})) if code == 0 else 0


def routed_queues(namesrv: str, topic: str) -> int:
    """The write queues of every group GET_ROUTEINFO_BY_TOPIC (105) routes (0: not routed)."""
    try:
        code, body, _ = asyncio.run(_remoting(namesrv, 105, {"topic": topic}))
    except (OSError, TimeoutError, ConnectionError):
        return 0
    if code != 0:
        return 0
    return sum(int(q["writeQueueNums"]) for q in json.loads(body).get("queueDatas", []))


def port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def create_rmq_topic(broker: str, topic: str, queues: int = QUEUES) -> None:
    """UPDATE_AND_CREATE_TOPIC (17) at the broker, as mqadmin updateTopic sends it."""
    fields = {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
        "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0", "order": "false",
    }  # fmt: skip
    code, _, remark = asyncio.run(_remoting(broker, 17, fields))
    if code != 0:
        raise RuntimeError(f"create topic {topic} at {broker}: code {code} {remark}")


def stored_messages(broker: str, topic: str, queues: int) -> int:
    """Messages a fresh topic holds on one broker: GET_MAX_OFFSET (30) summed over its queues."""

    async def total() -> int:
        pipe = await asyncio.wait_for(RemotingPipe.open(broker), 1.0)
        try:
            replies = [
                await asyncio.wait_for(pipe.request(30, {"topic": topic, "queueId": str(q)}), 5.0)
                for q in range(queues)
            ]
        finally:
            pipe.close()
        if any(r.code != 0 for r in replies):
            raise RuntimeError(f"max offset of {topic} at {broker}: {[r.remark for r in replies]}")
        return sum(int(r.ext_fields["offset"]) for r in replies)

    return asyncio.run(total())


def create_kafka_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Topics by name and partition count, one admin client (CreateTopics)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    new = [NewTopic(name, partitions, 1) for name, partitions in topics.items()]
    for future in admin.create_topics(new).values():
        future.result(30)


def wait_until(check: Callable[[], bool], timeout: float, what: str, alive: Callable[[], bool]
               ) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"{what} exited before serving")
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} not serving after {timeout} s")
