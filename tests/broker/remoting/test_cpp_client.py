"""The RocketMQ 4.x C++ client (PyPI ``rocketmq==0.4.4``, Apache's librocketmq, in .venv-rmq4/
made by `make rmq4-client`, a prerequisite of `make test`) against the real daemon's remoting
port, which is also its NameServer: sync sends with tags, keys and user properties received by
a PushConsumer exactly as sent (retry of a failed one included), oneway, orderly and batch
sends, delay levels, two consumers of one group splitting the queues, broadcasting consumers
each getting everything, and a kill -9 between sends that loses nothing acknowledged. The
client runs in a subprocess (cpp_client_script.py): the library is Python-2-era ctypes with its
own threads. It has no pull consumer and no transactional producer (transactions: the raw
client of test_transactions.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode

from tests.broker.daemon_helpers import FAST_RETRIES
from tests.broker.remoting.shares import stop_when_all_seen
from tests.broker.remoting.test_server import Client
from tests.harness import REPO_ROOT, BrokerProcess, Daemons

pytestmark = pytest.mark.slow
RMQ4_PYTHON = REPO_ROOT / ".venv-rmq4" / "bin" / "python"
SCRIPT = Path(__file__).with_name("cpp_client_script.py")
REMOTING = ["--remoting-listen", "127.0.0.1:0"]
SETTINGS = {"defaultTopicQueueNums": 4, "messageDelayLevel": FAST_RETRIES}


def run(broker: BrokerProcess, home: Path, command: str, **args: Any) -> dict[str, Any]:
    if not RMQ4_PYTHON.exists():
        pytest.skip("the RocketMQ 4.x C++ client's venv is missing: run `make rmq4-client`")
    home.mkdir(exist_ok=True)  # the library logs to ~/logs/rocketmq-cpp/
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(RMQ4_PYTHON), str(SCRIPT), broker.remoting_endpoint, command, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=150,
        check=False,
    )
    logs = "\n".join(p.read_text(errors="replace") for p in home.glob("logs/rocketmq-cpp/*"))
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n--- client log ---\n{logs[-4000:]}"
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _spec(i: int, prefix: str = "m") -> dict[str, Any]:
    return {
        "body": f"{prefix}-{i}",
        "tags": f"Tag{i % 3}",
        "keys": f"key-{i} order-{i}",
        "props": {"myprop": f"v{i}", "other": f"o{i}"},
    }


def test_sync_sends_are_received_exactly_as_sent(daemons: Daemons, tmp_path: Path) -> None:
    broker = daemons.broker(settings=SETTINGS, extra_args=REMOTING)
    specs = [_spec(i) for i in range(12)]
    out = run(broker, tmp_path / "home", "send", group="PG_SYNC", topic="T_SYNC", messages=specs)
    assert out["error"] is None
    assert [r["status"] for r in out["sent"]] == [0] * len(specs)  # SendStatus.OK
    assert all(len(r["msg_id"]) == 32 for r in out["sent"])
    # Produced first, then a new group: it starts at 0 (RocketMQ's broker rule) and gets all;
    # one message fails once and comes back from %RETRY%CG_SYNC (reconsume_times 1). The C++
    # client sends back the rest of that callback batch too: those come back twice (allowed).
    got = run(broker, tmp_path / "home", "consume", group="CG_SYNC", topic="T_SYNC",
              bodies=[s["body"] for s in specs], timeout=90, settle_s=1,
              props=["myprop", "other"], fail_once=["m-5"])  # fmt: skip
    received = got["received"]
    assert {m["body"] for m in received} == {s["body"] for s in specs}
    by_body = {s["body"]: s for s in specs}
    for message in received:  # every copy as sent, the retried ones included
        spec = by_body[message["body"]]
        assert message["topic"] == "T_SYNC"
        assert message["tags"] == spec["tags"]
        assert message["keys"] == spec["keys"]
        assert message["props"] == spec["props"]
    assert [m["reconsume_times"] for m in received if m["body"] == "m-5"] == [1]
    assert len({m["queue_id"] for m in received if m["reconsume_times"] == 0}) > 1


def test_oneway_orderly_and_batch_sends(daemons: Daemons, tmp_path: Path) -> None:
    broker = daemons.broker(settings=SETTINGS, extra_args=REMOTING)
    home = tmp_path / "home"
    oneway = [_spec(i, "oneway") for i in range(3)]
    out = run(broker, home, "send", group="PG_MIX", topic="T_MIX", messages=oneway,
              mode="oneway", linger_s=1)  # fmt: skip
    assert out["error"] is None and out["sent"] == [None] * 3
    orderly = [_spec(i, "orderly") for i in range(5)]
    out = run(broker, home, "send", group="PG_MIX", topic="T_MIX", messages=orderly,
              mode="orderly", arg=7)  # fmt: skip
    assert out["error"] is None
    offsets = [r["offset"] for r in out["sent"]]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5
    batch = [_spec(i, "batch") for i in range(3)]
    out = run(broker, home, "send", group="PG_MIX", topic="T_MIX", messages=batch, mode="batch")
    assert out["error"] is None and out["sent"][0]["status"] == 0

    every = oneway + orderly + batch
    got = run(broker, home, "consume", group="CG_MIX", topic="T_MIX", expect=len(every),
              bodies=[s["body"] for s in every], timeout=60, settle_s=1,
              props=["myprop", "other"])  # fmt: skip
    received = got["received"]
    assert sorted(m["body"] for m in received) == sorted(s["body"] for s in every)  # once each
    by_body = {m["body"]: m for m in received}
    for spec in every:  # the batch's messages come back one by one, each with its own fields
        assert (by_body[spec["body"]]["tags"], by_body[spec["body"]]["keys"]) == (
            spec["tags"],
            spec["keys"],
        )
        assert by_body[spec["body"]]["props"] == spec["props"]
    in_order = [m for m in received if m["body"].startswith("orderly")]
    assert {m["queue_id"] for m in in_order} == {7 % 4}  # the queue the selector chose
    assert [m["body"] for m in sorted(in_order, key=lambda m: m["offset"])] == [
        s["body"] for s in orderly
    ]


def test_kill_9_between_sends_loses_nothing_acknowledged(daemons: Daemons, tmp_path: Path) -> None:
    broker = daemons.broker(settings=SETTINGS, extra_args=REMOTING)
    home = tmp_path / "home"
    acknowledged: list[str] = []
    for round_ in range(2):
        specs = [_spec(i, f"crash{round_}") for i in range(6)]
        out = run(broker, home, "send", group="PG_CRASH", topic="T_CRASH", messages=specs)
        assert out["error"] is None
        acknowledged += [
            s["body"] for s, r in zip(specs, out["sent"], strict=True) if r["status"] == 0
        ]
        broker.kill()  # SIGKILL right after the acknowledgements
        broker.start()  # same store; the remoting port may change
    assert len(acknowledged) == 12
    got = run(broker, home, "consume", group="CG_CRASH", topic="T_CRASH",
              expect=len(acknowledged), bodies=acknowledged,
              timeout=60, settle_s=1)  # fmt: skip
    assert sorted(m["body"] for m in got["received"]) == sorted(acknowledged)


def test_delay_levels_deliver_after_their_delay(daemons: Daemons, tmp_path: Path) -> None:
    """``Message.set_delay_time_level``: the broker holds the message for its level's delay
    (here levels of 1 s and 3 s), then the consumer gets it on its own topic, never before; a
    message without a level comes at once."""
    broker = daemons.broker(
        settings={**SETTINGS, "messageDelayLevel": "1s 3s"}, extra_args=REMOTING
    )
    home = tmp_path / "home"
    specs = [
        {"body": "now", "tags": "T"},
        {"body": "after-1s", "tags": "T", "delay": 1},
        {"body": "after-3s", "tags": "T", "delay": 2},
    ]
    out = run(broker, home, "send", group="PG_DELAY", topic="T_DELAY", messages=specs)
    assert out["error"] is None and [r["status"] for r in out["sent"]] == [0, 0, 0]
    got = run(broker, home, "consume", group="CG_DELAY", topic="T_DELAY", expect=3,
              props=["DELAY", "REAL_TOPIC"], timeout=60, settle_s=1)  # fmt: skip
    by_body = {m["body"]: m for m in got["received"]}
    assert sorted(by_body) == ["after-1s", "after-3s", "now"] and len(got["received"]) == 3
    for body, delay_ms in (("after-1s", 1000), ("after-3s", 3000)):
        message = by_body[body]
        # On its own topic; DELAY cleared on delivery, as RocketMQ's schedule service does.
        assert message["topic"] == "T_DELAY" and not message["props"]["DELAY"]
        # Stored again on its topic once due: at least the delay after it was born (the
        # clocks are the same machine's; 50 ms for the millisecond roundings).
        assert message["store_ms"] - message["born_ms"] >= delay_ms - 50, message
        assert message["received_ms"] - message["born_ms"] >= delay_ms - 50, message
    assert by_body["now"]["store_ms"] - by_body["now"]["born_ms"] < 1000


def test_two_consumers_of_one_group_split_the_queues(daemons: Daemons, tmp_path: Path) -> None:
    """Two C++ PushConsumers of one group: once both are members (the broker tells the first
    with NOTIFY_CONSUMER_IDS_CHANGED and it rebalances), messages sent to all four queues reach
    exactly one of them each, every queue read by one consumer only."""
    broker = daemons.broker(settings=SETTINGS, extra_args=REMOTING)
    specs = [_spec(i, "split") for i in range(24)]
    bodies = [s["body"] for s in specs]
    # The topic and its queues exist before the consumers subscribe.
    assert run(broker, tmp_path / "h0", "send", group="PG_SPLIT", topic="T_SPLIT",
               messages=[_spec(0, "warm")])["error"] is None  # fmt: skip
    with ThreadPoolExecutor(2) as pool:
        consumers = [
            pool.submit(
                run,
                broker,
                tmp_path / f"h{i + 1}",
                "consume",
                group="CG_SPLIT",
                topic="T_SPLIT",
                expect=len(bodies) + 1,
                timeout=30,
                settle_s=0,
                progress=str(tmp_path / f"progress{i}"),
                stop_file=str(tmp_path / "stop"),
            )
            for i in range(2)
        ]
        deadline = time.monotonic() + 20
        while _members(broker, "CG_SPLIT") < 2:
            assert time.monotonic() < deadline, "the two consumers never both joined"
            time.sleep(0.2)
        time.sleep(3)  # their rebalance after the membership change
        out = run(broker, tmp_path / "h0", "send", group="PG_SPLIT", topic="T_SPLIT",
                  messages=specs)  # fmt: skip
        assert out["error"] is None and all(r["status"] == 0 for r in out["sent"])
        progress = [tmp_path / f"progress{i}" for i in range(2)]
        stop_when_all_seen(progress, bodies, tmp_path / "stop", timeout=30)
        received = [c.result()["received"] for c in consumers]
    got = [[m for m in r if m["body"].startswith("split-")] for r in received]
    assert sorted(m["body"] for part in got for m in part) == sorted(bodies)  # once each
    queues = [{m["queue_id"] for m in part} for part in got]
    assert all(got) and not queues[0] & queues[1], queues  # both busy, no queue shared


def _members(broker: BrokerProcess, group: str) -> int:
    """Members of ``group`` the broker knows (GET_CONSUMER_LIST_BY_GROUP over remoting)."""

    async def ask() -> int:
        host, _, port = broker.remoting_endpoint.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            reply = await Client(reader, writer).call(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}
            )
            if reply.code != ResponseCode.SUCCESS:
                return 0
            return len(json.loads(reply.body)["consumerIdList"])
        finally:
            writer.close()

    return asyncio.run(ask())


def test_broadcasting_consumers_each_get_every_message(daemons: Daemons, tmp_path: Path) -> None:
    """Two BROADCASTING PushConsumers of one group (offsets kept by the client, RocketMQ's
    broadcasting model): each receives every message sent once both are subscribed."""
    broker = daemons.broker(settings=SETTINGS, extra_args=REMOTING)
    specs = [_spec(i, "bcast") for i in range(12)]
    bodies = [s["body"] for s in specs]
    assert run(broker, tmp_path / "h0", "send", group="PG_BC", topic="T_BC",
               messages=[_spec(0, "warm")])["error"] is None  # fmt: skip
    with ThreadPoolExecutor(2) as pool:
        consumers = [
            pool.submit(
                run,
                broker,
                tmp_path / f"h{i + 1}",
                "consume",
                group="CG_BC",
                topic="T_BC",
                broadcasting=True,
                expect=len(bodies),
                bodies=bodies,
                timeout=30,
                settle_s=1,
            )
            for i in range(2)
        ]
        deadline = time.monotonic() + 20
        while _members(broker, "CG_BC") < 2:
            assert time.monotonic() < deadline, "the two consumers never both joined"
            time.sleep(0.2)
        time.sleep(3)  # each has its queues (all of them) and its starting offsets
        out = run(broker, tmp_path / "h0", "send", group="PG_BC", topic="T_BC", messages=specs)
        assert out["error"] is None and all(r["status"] == 0 for r in out["sent"])
        received = [c.result()["received"] for c in consumers]
    for part in received:
        assert sorted(m["body"] for m in part if m["body"].startswith("bcast-")) == sorted(bodies)
