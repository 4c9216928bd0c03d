"""The OFFICIAL RocketMQ Python client (rocketmq-python-client==5.1.2, in .venv-rmq/ made by
`make rmq-client`, a prerequisite of `make test`) against the real daemon, in a subprocess:
sync and async sends with tag, keys and properties, FIFO sends with message groups and a
too-large body, and a PushConsumer's start-up; then everything is read back through Wharf's own wharf.v1 pull and compared
(topic, body, tag, keys, properties, message id, FIFO: one queue per message group)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.harness import REPO_ROOT, Daemons

pytestmark = pytest.mark.slow
RMQ_PYTHON = REPO_ROOT / ".venv-rmq" / "bin" / "python"
SCRIPT = Path(__file__).with_name("rmq_producer_script.py")
MAX_MESSAGE_SIZE = 64 * 1024
QUEUES = 4
PAYLOAD_TOO_LARGE = 41301


def run_client(endpoint: str, home: Path, *args: str) -> dict[str, Any]:
    return run_script(SCRIPT, endpoint, home, *args)


def run_script(script: Path, endpoint: str, home: Path, *args: str) -> dict[str, Any]:
    if not RMQ_PYTHON.exists():
        pytest.skip("the official client's venv is missing: run `make rmq-client`")
    home.mkdir(exist_ok=True)  # the client logs to ~/logs/rocketmq_python/
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(RMQ_PYTHON), str(script), endpoint, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
        check=False,
    )
    logs = "\n".join(p.read_text() for p in home.glob("logs/rocketmq_python/*.log"))
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n--- client log ---\n{logs[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pull_all(endpoint: str, topic: str) -> dict[int, list[Any]]:
    with grpc.insecure_channel(endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        queues: dict[int, list[Any]] = {}
        for queue_id in range(QUEUES):
            reply = stub.PullMessage(
                messaging_pb2.PullMessageRequest(
                    consumer_group="check",
                    topic=topic,
                    queue_id=queue_id,
                    queue_offset=0,
                    max_messages=100,
                )
            )
            queues[queue_id] = list(reply.messages)
        return queues


def test_official_python_producer_sends_what_wharf_pulls_back(
    daemons: Daemons, tmp_path: Path
) -> None:
    broker = daemons.broker(
        settings={"maxMessageSize": MAX_MESSAGE_SIZE, "defaultTopicQueueNums": QUEUES}
    )
    out = run_client(broker.endpoint, tmp_path / "home", "orders", "fifo-orders")

    # Telemetry: the producer took the broker's body limit from the settings reply.
    assert out["max_body_size"] == MAX_MESSAGE_SIZE

    pulled = pull_all(broker.endpoint, "orders")
    views = {v.msg_id: v for queue in pulled.values() for v in queue}
    assert len(views) == len(out["sent"]) == 10  # each stored once
    for sent in out["sent"]:
        view = views[sent["id"]]
        assert view.topic == "orders"
        assert view.body == sent["body"].encode()
        assert view.tags == sent["tag"]
        assert sorted(view.keys) == sorted(sent["keys"])
        assert dict(view.properties) == sent["props"]  # exactly the user properties
    assert sum(1 for q in pulled.values() if q) > 1  # normal sends spread over the queues

    fifo = pull_all(broker.endpoint, "fifo-orders")
    queue_of_group: dict[str, int] = {}
    order_in_queue: dict[str, list[str]] = {}
    for queue_id, queue in fifo.items():
        for view in queue:
            group = view.properties["__SHARDINGKEY"]
            assert queue_of_group.setdefault(group, queue_id) == queue_id  # one queue per group
            order_in_queue.setdefault(group, []).append(view.body.decode())
    assert sorted(queue_of_group) == ["group-0", "group-1", "group-2"]
    for group, bodies in order_in_queue.items():
        expected = [m["body"] for m in out["fifo"] if m["group"] == group]
        assert bodies == expected  # send order kept within the group
    assert {v.msg_id for q in fifo.values() for v in q} == {m["id"] for m in out["fifo"]}

    # Too large: refused by the client with the broker's limit, and by the broker itself.
    assert out["too_large_client"] is not None
    assert str(MAX_MESSAGE_SIZE) in out["too_large_client"]["message"]
    server = out["too_large_server"]
    assert server is not None and server["code"] == PAYLOAD_TOO_LARGE, server
    assert sum(len(q) for q in pull_all(broker.endpoint, "orders").values()) == 10

    assert out["push_consumer_started"] is True


CONSUMER_SCRIPT = Path(__file__).with_name("rmq_consumer_script.py")


def test_official_simple_consumer_receives_acks_and_gets_redeliveries(
    daemons: Daemons, tmp_path: Path
) -> None:
    settings = {"defaultTopicQueueNums": QUEUES}
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        out = run_script(
            CONSUMER_SCRIPT, broker.endpoint, tmp_path / "home", "PopTopic", "pop-group"
        )
    first = {m["body"]: m for m in out["first"]}
    # Everything sent is received once, with its id, tag, keys and properties, attempt 1.
    assert sorted(first) == [f"pop-{i}" for i in range(6)]
    assert [first[f"pop-{i}"]["id"] for i in range(6)] == out["sent"]
    assert first["pop-2"] == {
        "id": out["sent"][2], "body": "pop-2", "tag": "TagA", "keys": ["key-2"],
        "props": {"n": "2"}, "attempt": 1, "corrupted": False,
    }  # fmt: skip
    assert first["pop-3"]["tag"] == "TagB"
    # ChangeInvisibleDuration gave a new handle; the un-acked message came back after its 2 s
    # with attempt 2, and only it (pop-3 is still invisible, the others were acked).
    assert out["handle_changed"] is True
    assert [(m["body"], m["attempt"], m["id"]) for m in out["again"]] == [
        ("pop-2", 2, out["sent"][2])
    ]
    # The handle of the earlier delivery is refused (INVALID_RECEIPT_HANDLE, 40013).
    assert out["stale_ack"] is not None and out["stale_ack"]["code"] == 40013
    assert out["after"] == []
