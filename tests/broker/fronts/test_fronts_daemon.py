"""``v2Fronts`` end to end: the broker starts its front processes, the official 5.x client
sends and consumes through them, concurrent sends are merged (the front's stop line counts
them) and each gets its own stored message, a killed front is restarted, a broker killed with
-9 takes its fronts along, and a setting the fronts cannot serve stops the broker with a
message naming it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path

import grpc
import pytest
from wharf.rocketmq.v2 import definition_pb2, service_pb2, service_pb2_grpc

from tests.broker.v2.test_official_client import (
    CONSUMER_SCRIPT,
    MAX_MESSAGE_SIZE,
    QUEUES,
    pull_all,
    run_client,
    run_script,
)
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow
SETTINGS = {"maxMessageSize": MAX_MESSAGE_SIZE, "defaultTopicQueueNums": QUEUES,
            "wireListen": "127.0.0.1:0", "v2Fronts": 1, "v2FrontsListen": "127.0.0.1:0"}  # fmt: skip


def fronts_of(broker: BrokerProcess) -> tuple[str, list[int]]:
    """The fronts' address (the ready file) and their process ids (the broker's children)."""
    return broker.fronts_endpoint, broker.children()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def wait_for(check, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


async def concurrent_sends(
    address: str, topic: str, count: int
) -> list[service_pb2.SendMessageResponse]:
    headers = (("x-mq-client-id", "fronts-test"), ("x-mq-language", "PYTHON"))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)

        async def one(i: int) -> service_pb2.SendMessageResponse:
            request = service_pb2.SendMessageRequest()
            m = request.messages.add(body=f"m-{i}".encode())
            m.topic.name = topic
            m.system_properties.message_id = f"fronts-{i:04d}"
            m.system_properties.message_type = definition_pb2.NORMAL
            m.system_properties.body_encoding = definition_pb2.IDENTITY
            return await stub.SendMessage(request, metadata=headers, timeout=30)

        return await asyncio.gather(*(one(i) for i in range(count)))


def test_the_official_client_sends_and_consumes_through_a_front(
    daemons: Daemons, tmp_path: Path
) -> None:
    with daemons.broker(tmp_path / "broker", settings=SETTINGS) as broker:
        front, pids = fronts_of(broker)
        assert len(pids) == 1 and front != broker.endpoint
        out = run_client(front, tmp_path / "home", "orders", "fifo-orders")
        assert out["max_body_size"] == MAX_MESSAGE_SIZE  # the broker's Telemetry settings
        stored = {v.msg_id: v for q in pull_all(broker.endpoint, "orders").values() for v in q}
        assert sorted(stored) == sorted(sent["id"] for sent in out["sent"])
        assert out["too_large_server"]["code"] == 41301  # the broker's refusal, forwarded
        got = run_script(CONSUMER_SCRIPT, front, tmp_path / "home2", "PopTopic", "pop-group")
        assert sorted(m["body"] for m in got["first"]) == [f"pop-{i}" for i in range(6)]
        assert [m["attempt"] for m in got["again"]] == [2]  # redelivered after its 2 s

        replies = asyncio.run(concurrent_sends(front, "burst", 200))
        assert all(r.status.code == definition_pb2.OK for r in replies)
        assert len({(r.entries[0].offset, r.entries[0].message_id) for r in replies}) == 200
        bodies = sorted(v.body for q in pull_all(broker.endpoint, "burst").values() for v in q)
        assert bodies == sorted(f"m-{i}".encode() for i in range(200))
    merged = re.findall(r"front \d+ stopped: (\d+) sends in (\d+) requests", broker.log())
    assert merged, broker.log()[-3000:]
    sends, requests = map(int, merged[-1])
    assert sends >= 200 and requests < sends  # 200 concurrent calls shared requests


def test_a_killed_front_comes_back_and_a_killed_broker_takes_its_fronts_along(
    daemons: Daemons, tmp_path: Path
) -> None:
    broker = daemons.broker(tmp_path / "broker", settings={**SETTINGS, "v2Fronts": 2})
    front, pids = fronts_of(broker)
    assert len(pids) == 2
    os.kill(pids[0], signal.SIGKILL)
    wait_for(lambda: len(fronts_of(broker)[1]) == 2 and pids[0] not in fronts_of(broker)[1])
    assert "exited with -9; restarting" in broker.log()
    wait_for(lambda: all(r.status.code == definition_pb2.OK
                         for r in asyncio.run(concurrent_sends(front, "after", 20))))  # fmt: skip
    survivors = fronts_of(broker)[1]
    broker.kill()
    wait_for(lambda: not any(alive(pid) for pid in survivors), timeout=10)


def test_fronts_with_acl_stop_the_broker_naming_the_settings(
    daemons: Daemons, tmp_path: Path
) -> None:
    broker = daemons.broker(tmp_path / "broker", start=False,
                            settings={**SETTINGS, "aclEnable": True})  # fmt: skip
    with pytest.raises(RuntimeError, match="exited with 1"):
        broker.start(timeout=30)
    assert "v2Fronts cannot serve with aclEnable" in broker.log()
