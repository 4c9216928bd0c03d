"""The RocketMQ 4.x Node.js client ali-ons (npm ``ali-ons@3.12.0``, installed into
tests/broker/remoting/node/node_modules by the Makefile's REMOTING_NODE_STAMP, a prerequisite of
`make test` and `make test-slow`) against the real daemon's remoting port, which is also its
NameServer. ``node scenario.js`` runs in a subprocess and prints what it sent and received.

Covered: sync sends (``producer.send``, SEND_MESSAGE_V2 with short field names) with tags, keys
and user properties, from a producer signing with ONS-style accessKey/secretKey (ignored: no ACL);
a push Consumer (``subscribe(topic, '*')``) receiving every message exactly as sent (body, tags,
keys, user properties, queue, queue offset, offset message id), produced before its start and
after its ``ready()``; a handler that throws once gets its message again through
``%RETRY%<group>`` (``reconsumeTimes`` 1, the original topic), and only that one; a tag
subscription (``subscribe(topic, 'TagB')``) gets only its tag; ``msg.shardingKey`` sends all go
to the queue its md5 picks, in send order; a 6 KB body (compressed by ali-ons, sysFlag 1) comes
back whole; a second run of the group resumes from its committed offsets (no redelivery).

What ali-ons cannot do (no scenario here): oneway and batch sends, a send to an explicitly chosen
queue (no selector: only ``shardingKey``, hashed with md5 over the writable queues, and a key
that hashes to queue 0 is not pinned at all, because ali-ons treats queue id 0 as "no choice"),
an orderly push consumer (it never locks queues: 41/42), a pull consumer, transactions.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.broker.daemon_helpers import FAST_RETRIES
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow
NODE_DIR = Path(__file__).with_name("node")
SCRIPT = NODE_DIR / "scenario.js"
REMOTING = ["--remoting-listen", "127.0.0.1:0"]
QUEUES = 4
SETTINGS = {"defaultTopicQueueNums": QUEUES, "messageDelayLevel": FAST_RETRIES}
# Properties the client or the broker adds (ali-ons' decoder also turns the trailing property
# separator into an empty name, as it does against Apache RocketMQ).
SYSTEM_PROPS = {
    "",
    "TAGS",
    "KEYS",
    "UNIQ_KEY",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "RETRY_TOPIC",
    "ORIGIN_MESSAGE_ID",
    "REAL_TOPIC",
    "REAL_QID",
    "DELAY",
    "WAIT",
    "CLUSTER",
    "RECONSUME_TIME",
    "MAX_RECONSUME_TIMES",
}


def run_node(broker: BrokerProcess, home: Path, scenario: str, **args: Any) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
        pytest.skip(
            "ali-ons is not installed: install node and npm, then run "
            "`make tests/broker/remoting/node/node_modules/.installed-stamp` (done by make test)"
        )
    home.mkdir(exist_ok=True)
    proc = subprocess.run(
        [node, str(SCRIPT), broker.remoting_endpoint, scenario, json.dumps(args)],
        capture_output=True,
        text=True,
        cwd=NODE_DIR,
        env={**os.environ, "HOME": str(home)},
        timeout=150,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n--- client log ---\n{proc.stderr[-6000:]}"
    out = dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert out["error"] is None, f"{out}\n--- client log ---\n{proc.stderr[-6000:]}"
    return out


def _spec(i: int, prefix: str = "m", **extra: Any) -> dict[str, Any]:
    return {
        "body": f"{prefix}-{i}",
        "tags": f"Tag{i % 3}",
        "keys": [f"key-{i}", f"order-{i}"],
        "props": {"myprop": f"v{i}", "other": f"o{i}"},
        **extra,
    }


def _user_props(props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if k not in SYSTEM_PROPS}


def _assert_as_sent(message: dict[str, Any], spec: dict[str, Any], topic: str) -> None:
    assert message["topic"] == topic
    assert message["tags"] == spec["tags"]
    assert message["keys"] == " ".join(spec["keys"])
    assert _user_props(message["props"]) == spec["props"]


def test_sync_sends_are_received_exactly_as_sent(daemons: Daemons, tmp_path: Path) -> None:
    broker = daemons.broker(settings=SETTINGS, extra_args=REMOTING)
    home = tmp_path / "home"
    specs = [_spec(i) for i in range(12)]
    out = run_node(broker, home, "send", group="PG_SYNC", topic="T_SYNC", messages=specs,
                   accessKey="AK_IGNORED", secretKey="SK_IGNORED")  # fmt: skip
    sent = out["sent"]
    assert [s["body"] for s in sent] == [s["body"] for s in specs]
    assert {s["sendStatus"] for s in sent} == {"SEND_OK"}
    assert all(len(s["msgId"]) == 32 for s in sent) and len({s["msgId"] for s in sent}) == 12
    queues = {s["queueId"] for s in sent}
    assert queues <= set(range(QUEUES)) and len(queues) > 1  # spread over the queues
    # Produced first, then a new group: it starts at 0 (RocketMQ's broker rule) and gets all,
    # and two sent after its ready(); m-5's handler throws once: back from %RETRY%CG_SYNC.
    after = [_spec(i, "after") for i in range(2)]
    got = run_node(broker, home, "consume", group="CG_SYNC", topic="T_SYNC", expression="*",
                   bodies=[s["body"] for s in specs + after], failOnce=["m-5"],
                   sendAfterReady=after, timeout=90, settleMs=2000)  # fmt: skip
    received = got["received"]
    sent += got["sent"]
    by_body = {s["body"]: s for s in specs + after}
    sent_by_body = {s["body"]: s for s in sent}
    assert sorted(m["body"] for m in received) == sorted([*by_body, "m-5"])  # m-5 twice only
    for message in received:
        _assert_as_sent(message, by_body[message["body"]], "T_SYNC")
        if message["reconsumeTimes"] == 0:  # where and under which id the producer was told
            was = sent_by_body[message["body"]]
            assert (message["queueId"], message["queueOffset"], message["msgId"]) == (
                was["queueId"],
                was["queueOffset"],
                was["msgId"],
            )
    retried = [m for m in received if m["body"] == "m-5"]
    assert [m["reconsumeTimes"] for m in retried] == [0, 1]
    again = retried[1]
    assert again["props"]["RETRY_TOPIC"] == "T_SYNC"
    assert again["props"]["REAL_TOPIC"] == "%RETRY%CG_SYNC"
    assert again["props"]["ORIGIN_MESSAGE_ID"] == sent_by_body["m-5"]["msgId"]
    assert again["props"]["UNIQ_KEY"] == retried[0]["props"]["UNIQ_KEY"]
    # The handler's own failure and nothing else until the script closes the consumer (what
    # ali-ons reports during close() is its own shutdown: scenario.js keeps it apart).
    unexpected = [e for e in got["clientErrors"] if "fail once: m-5" not in e]
    assert not unexpected, got["clientErrors"]

    # The group again: its offsets were committed (pull commit bit, UPDATE_CONSUMER_OFFSET,
    # ali-ons' -1 for the untouched retry queue ignored), so only the new messages come.
    more = [_spec(i, "resume") for i in range(2)]
    got = run_node(broker, home, "consume", group="CG_SYNC", topic="T_SYNC", expression="*",
                   bodies=[s["body"] for s in more], sendAfterReady=more, timeout=60,
                   settleMs=3000)  # fmt: skip
    assert sorted(m["body"] for m in got["received"]) == ["resume-0", "resume-1"]
    assert got["clientErrors"] == []


def _queue_of(sharding_key: str) -> int:
    """ali-ons' TopicPublishInfo.selectOneMessageQueue: md5, first 4 bytes big-endian."""
    return int.from_bytes(hashlib.md5(sharding_key.encode()).digest()[:4], "big") % QUEUES


def test_tag_subscription_and_sharding_key(daemons: Daemons, tmp_path: Path) -> None:
    broker = daemons.broker(settings=SETTINGS, extra_args=REMOTING)
    home = tmp_path / "home"
    # A key md5 maps to a queue other than 0 (ali-ons does not pin queue 0).
    key = next(k for k in (f"order-{n}" for n in range(100)) if _queue_of(k) != 0)
    sharded = [_spec(i, "sharded", tags="TagB", shardingKey=key) for i in range(6)]
    loose = [_spec(i, "loose", tags=("TagA", "TagB")[i % 2]) for i in range(6)]
    loose.append({**_spec(6, "big", tags="TagB"), "body": "big-" + "x" * 6000})  # zlib (sysFlag 1)
    out = run_node(broker, home, "send", group="PG_ORD", topic="T_ORD",
                   messages=sharded + loose)  # fmt: skip
    sent = out["sent"][: len(sharded)]
    assert {s["queueId"] for s in sent} == {_queue_of(key)}
    offsets = [s["queueOffset"] for s in sent]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(sharded)

    wanted = [s for s in sharded + loose if s["tags"] == "TagB"]
    got = run_node(broker, home, "consume", group="CG_ORD", topic="T_ORD", expression="TagB",
                   bodies=[s["body"] for s in wanted], timeout=60, settleMs=2000)  # fmt: skip
    received = got["received"]
    assert sorted(m["body"] for m in received) == sorted(s["body"] for s in wanted)  # no TagA
    by_body = {s["body"]: s for s in wanted}
    for message in received:  # the sharding key travels as the property __SHARDING_KEY
        spec = by_body[message["body"]]
        props = {**spec["props"], **({"__SHARDING_KEY": key} if "shardingKey" in spec else {})}
        _assert_as_sent(message, {**spec, "props": props}, "T_ORD")
    in_queue = [m for m in received if m["body"].startswith("sharded")]
    assert {m["queueId"] for m in in_queue} == {_queue_of(key)}
    assert [m["body"] for m in sorted(in_queue, key=lambda m: m["queueOffset"])] == [
        s["body"] for s in sharded
    ]
    assert [m["body"] for m in in_queue] == [s["body"] for s in sharded]  # delivered in order
    assert got["clientErrors"] == []
