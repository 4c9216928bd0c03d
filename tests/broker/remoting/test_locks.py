"""LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42), the queue locks of orderly push consumers: the
lock table (contention, re-lock, 60 s expiry, unlock by the holder only), the two codes on a
real daemon with the raw client, and the real C++ client's orderly PushConsumer (PyPI
``rocketmq`` 0.4.4), which locks its queues before pulling them: it gets every message in
queue order while holding all the queues, and another client's lock is refused meanwhile."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from wharf.broker.frontends.remoting.locks import LOCK_MAX_LIVE_MS, QueueLocks
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode

from tests.broker.remoting.test_cpp_client import RMQ4_PYTHON
from tests.broker.remoting.test_server import Client, _send_fields
from tests.harness import BrokerProcess, Daemons

SCRIPT = Path(__file__).with_name("cpp_orderly_script.py")


def test_lock_table() -> None:
    now = [0]
    locks = QueueLocks(clock_ms=lambda: now[0])
    q0, q1, q2 = ("t", "b", 0), ("t", "b", 1), ("t", "b", 2)
    assert locks.try_lock("G", [q0, q1], "A") == [q0, q1]
    assert locks.try_lock("G", [q0, q1, q2], "B") == [q2]  # held by A: refused
    assert locks.try_lock("OTHER", [q0], "B") == [q0]  # per group
    assert locks.holder("G", q0) == "A"
    now[0] = LOCK_MAX_LIVE_MS - 1
    assert locks.try_lock("G", [q0], "A") == [q0]  # re-lock: A's lock lives on from now
    now[0] = LOCK_MAX_LIVE_MS + 1
    assert locks.holder("G", q1) is None  # expired
    assert locks.try_lock("G", [q0, q1], "B") == [q1]  # q0 re-locked at 59.999 s: still A's
    locks.unlock("G", [q0], "B")  # not B's: stays
    assert locks.holder("G", q0) == "A"
    locks.unlock("G", [q0], "A")
    assert locks.try_lock("G", [q0], "B") == [q0]
    now[0] = 10 * LOCK_MAX_LIVE_MS
    assert locks.expire() == 4
    assert locks.holder("G", q2) is None


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker(
        "remoting-locks",
        settings={"defaultTopicQueueNums": 4},
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    )


async def _broker_name(client: Client, topic: str) -> str:
    reply = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return str(json.loads(reply.body)["brokerDatas"][0]["brokerName"])


def _body(group: str, client_id: str, queues: list[dict[str, Any]]) -> bytes:
    return json.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": queues}).encode()


async def _lock(client: Client, group: str, client_id: str, queues: list[dict[str, Any]]) -> Any:
    reply = await client.call(RequestCode.LOCK_BATCH_MQ, body=_body(group, client_id, queues))
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return sorted(json.loads(reply.body)["lockOKMQSet"], key=lambda q: q["queueId"])


async def test_lock_and_unlock_batch(client: Client) -> None:
    name = await _broker_name(client, "lock-t")
    queues = [{"topic": "lock-t", "brokerName": name, "queueId": i} for i in range(4)]
    assert await _lock(client, "CG_L", "A", queues[:2]) == queues[:2]
    assert await _lock(client, "CG_L", "B", queues) == queues[2:]
    assert await _lock(client, "CG_L", "A", queues) == queues[:2]  # re-lock its own
    unlock = await client.call(RequestCode.UNLOCK_BATCH_MQ, body=_body("CG_L", "A", queues[:1]))
    assert unlock.code == ResponseCode.SUCCESS, unlock.remark
    assert await _lock(client, "CG_L", "B", queues) == [queues[0], *queues[2:]]
    # queueId as text (jsoncpp writes numbers; be lenient as fastjson is), a trailing newline.
    text = [{"topic": "lock-t", "brokerName": name, "queueId": "1"}]
    reply = await client.call(RequestCode.LOCK_BATCH_MQ, body=_body("CG_L", "A", text) + b"\n")
    assert json.loads(reply.body)["lockOKMQSet"] == [queues[1]]
    bad = await client.call(RequestCode.LOCK_BATCH_MQ, body=b'{"consumerGroup":"CG_L"}')
    assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark


@pytest.mark.slow
async def test_cpp_orderly_consumer_locks_its_queues(
    client: Client, broker: BrokerProcess, tmp_path: Path
) -> None:
    if not RMQ4_PYTHON.exists():
        pytest.skip("the RocketMQ 4.x C++ client's venv is missing: run `make rmq4-client`")
    topic, per_queue = "orderly-t", 5
    for i in range(per_queue):
        for queue_id in range(4):
            reply = await client.call(
                RequestCode.SEND_MESSAGE, _send_fields(topic, queue_id), f"q{queue_id}-{i}".encode()
            )
            assert reply.code == ResponseCode.SUCCESS, reply.remark
    name = await _broker_name(client, topic)
    queues = [{"topic": topic, "brokerName": name, "queueId": i} for i in range(4)]
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    args = {"group": "CG_ORDERLY", "topic": topic, "expect": 4 * per_queue, "timeout": 40}
    proc = await asyncio.create_subprocess_exec(
        str(RMQ4_PYTHON), str(SCRIPT), broker.remoting_endpoint, json.dumps(args),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, (await proc.stderr.read()).decode() if proc.stderr else ""
        received = json.loads(line)["received"]
        for queue_id in range(4):
            bodies = [m["body"] for m in received if m["queue_id"] == queue_id]
            assert bodies == [f"q{queue_id}-{i}" for i in range(per_queue)]
        # The consumer holds every queue: another client of the group is refused them all.
        assert await _lock(client, "CG_ORDERLY", "someone-else", queues) == []
        proc.stdin.write(b"\n")
        await proc.stdin.drain()
        assert json.loads(await asyncio.wait_for(proc.stdout.readline(), 60)) == {"done": True}
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
