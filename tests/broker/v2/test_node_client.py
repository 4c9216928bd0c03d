"""The OFFICIAL RocketMQ Node.js client (npm rocketmq-client-nodejs@1.0.8, installed into
tests/broker/v2/node/node_modules by `make rmq-client`, a prerequisite of `make test`) against
the real daemon, run as `node scenarios.js` in a subprocess, with topics and groups made by the
`wharf` CLI. What it sent is read back through Wharf's own wharf.v1 pull: 10 normal messages
(5 awaited one by one, 5 in flight together) with their bodies, tags, keys, exact user
properties and client message ids; 12 FIFO messages over 3 message groups, each group in one
queue in send order. Its SimpleConsumer receives all 6 messages sent (equal bodies, tags, keys,
properties, attempt 1, MD5 digest not flagged corrupted), and after ChangeInvisibleDuration to
2 s only that message comes back, with attempt 2 and the same id; its old handle is refused
(INVALID_RECEIPT_HANDLE 40013). A FIFO group gets each message group in order and never two of
one group in a batch. A DELAY message comes at its time with its delivery timestamp; one
recalled by its handle never comes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.v2.test_official_client import QUEUES, pull_all
from tests.broker.v2.test_official_scenarios import wharf_cli
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow
NODE_DIR = Path(__file__).with_name("node")
SCRIPT = NODE_DIR / "scenarios.js"
INVALID_RECEIPT_HANDLE = 40013


def run_node(endpoint: str, home: Path, scenario: str, topic: str, group: str) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
        pytest.fail("the Node.js client is missing: install node and npm, run `make rmq-client`")
    home.mkdir(exist_ok=True)
    proc = subprocess.run(
        [node, str(SCRIPT), endpoint, scenario, topic, group],
        capture_output=True,
        text=True,
        cwd=NODE_DIR,
        env={**os.environ, "HOME": str(home)},
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n--- client log ---\n{proc.stderr[-6000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def broker(daemons: Daemons, tmp_path: Path) -> Iterator[BrokerProcess]:
    with daemons.broker(tmp_path / "broker", settings={"defaultTopicQueueNums": QUEUES}) as b:
        yield b


def test_node_producer_sends_what_wharf_pulls_back(broker: BrokerProcess, tmp_path: Path) -> None:
    wharf_cli(broker.endpoint, "topic", "create", "orders", "--message-type", "NORMAL")
    wharf_cli(broker.endpoint, "topic", "create", "orders-fifo", "--message-type", "FIFO")
    out = run_node(broker.endpoint, tmp_path / "home", "produce", "orders", "-")

    pulled = pull_all(broker.endpoint, "orders")
    views = {v.msg_id: v for queue in pulled.values() for v in queue}
    assert len(out["sent"]) == 10
    assert sorted(views) == sorted(m["id"] for m in out["sent"])  # each stored once, client ids
    for sent in out["sent"]:
        view = views[sent["id"]]
        assert view.topic == "orders"
        assert view.body == sent["body"].encode()
        assert view.tags == sent["tag"]
        assert sorted(view.keys) == sorted(sent["keys"])
        assert dict(view.properties) == sent["props"]  # exactly the user properties
    assert [m["body"] for m in out["sent"]] == [f"sync-{i}" for i in range(5)] + [
        f"async-{i}" for i in range(5)
    ]
    assert sum(1 for q in pulled.values() if q) > 1  # normal sends spread over the queues

    fifo = pull_all(broker.endpoint, "orders-fifo")
    queue_of_group: dict[str, int] = {}
    order_in_queue: dict[str, list[str]] = {}
    for queue_id, queue in fifo.items():
        for view in queue:
            group = view.properties["__SHARDINGKEY"]
            assert queue_of_group.setdefault(group, queue_id) == queue_id  # one queue per group
            order_in_queue.setdefault(group, []).append(view.body.decode())
    assert sorted(queue_of_group) == ["group-0", "group-1", "group-2"]
    for group, bodies in order_in_queue.items():
        assert bodies == [m["body"] for m in out["fifo"] if m["group"] == group]  # send order
    assert sorted(v.msg_id for q in fifo.values() for v in q) == sorted(
        m["id"] for m in out["fifo"]
    )


def test_node_simple_consumer_receives_acks_and_gets_redeliveries(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    wharf_cli(broker.endpoint, "topic", "create", "PopTopic", "--message-type", "NORMAL")
    out = run_node(broker.endpoint, tmp_path / "home", "simple", "PopTopic", "pop-group")
    first = {m["body"]: m for m in out["first"]}
    # Everything sent is received once, with its id, tag, keys and properties, attempt 1.
    assert len(out["first"]) == 6
    assert sorted(first) == [f"pop-{i}" for i in range(6)]
    for i in range(6):
        assert first[f"pop-{i}"] == {
            "id": out["sent"][i], "body": f"pop-{i}", "tag": "TagA" if i % 2 == 0 else "TagB",
            "keys": [f"key-{i}"], "props": {"n": str(i)}, "group": None, "attempt": 1,
            "corrupted": False,
        }  # fmt: skip
    # ChangeInvisibleDuration gave a new handle; the un-acked message came back after its 2 s
    # with attempt 2, and only it (pop-3 is still invisible, the others were acked).
    assert out["handle_changed"] is True
    assert [(m["body"], m["attempt"], m["id"]) for m in out["again"]] == [
        ("pop-2", 2, out["sent"][2])
    ]
    assert out["again"][0]["props"] == {"n": "2"} and out["again"][0]["corrupted"] is False
    # The handle of the delivery before the change is refused.
    assert out["stale_ack"] is not None
    assert out["stale_ack"]["code"] == INVALID_RECEIPT_HANDLE, out["stale_ack"]
    assert out["after"] == []


def test_node_fifo_group_receives_each_message_group_in_order(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    wharf_cli(broker.endpoint, "topic", "create", "fifo_orders", "--message-type", "FIFO")
    assert "fifo=yes" in wharf_cli(broker.endpoint, "group", "create", "fifo_group", "--fifo")
    out = run_node(broker.endpoint, tmp_path / "home", "fifo", "fifo_orders", "fifo_group")
    for batch in out["batches"]:
        groups = [group for group, _, _ in batch]
        assert len(groups) == len(set(groups)), batch  # never two of one group in flight
    received = [(group, body) for batch in out["batches"] for group, body, _ in batch]
    assert len(received) == 12
    for group in ("a", "b", "c"):
        assert [b for g, b in received if g == group] == [f"{group}-{i}" for i in range(4)]
    assert {attempt for batch in out["batches"] for *_, attempt in batch} == {1}
    assert len(set(out["sent"])) == 12


def test_node_delay_message_comes_at_its_time_and_a_recalled_one_never(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    wharf_cli(broker.endpoint, "topic", "create", "Later", "--message-type", "DELAY")
    out = run_node(broker.endpoint, tmp_path / "home", "delay", "Later", "later-group")
    assert out["sent"]["recalled"]  # RecallMessage answered with the recalled message's id
    assert len(out["got"]) == 1, out
    got = out["got"][0]
    assert (got["id"], got["body"], got["attempt"]) == (out["sent"]["later"], "later", 1)
    # The delivery time as sent, in ms (the proxy's GrpcConverter hands it back too).
    assert got["delivery_timestamp"] == out["deliver_at"]
    assert out["received_at"] >= out["deliver_at"]
    assert out["after"] == []
