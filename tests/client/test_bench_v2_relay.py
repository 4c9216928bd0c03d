"""The relay of ``tests/bench/v2_ceiling`` (``multicore/relay.py``) carries the official 5.x
client whole: sends (sync, async, FIFO, a refusal), Telemetry, and a simple consumer's
receive / change-invisible / ack / redelivery, every call forwarded to the broker's wire port;
with ``--canned-sends`` the client's sends succeed and the broker stores none of them. (The
ceiling program's figures are only as good as this: a relay that lost calls would be fast.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.bench.multicore.relay import launch
from tests.broker.v2.test_official_client import (
    CONSUMER_SCRIPT,
    MAX_MESSAGE_SIZE,
    QUEUES,
    pull_all,
    run_client,
    run_script,
)
from tests.harness import BrokerProcess, Daemons, free_port

pytestmark = pytest.mark.slow


@contextmanager
def relayed(
    daemons: Daemons, root: Path, canned_sends: bool = False
) -> Iterator[tuple[BrokerProcess, str]]:
    front = f"127.0.0.1:{free_port()}"
    settings = {
        "maxMessageSize": MAX_MESSAGE_SIZE, "defaultTopicQueueNums": QUEUES,
        "wireListen": "127.0.0.1:0", "advertisedAddress": front,
    }  # fmt: skip
    with daemons.broker(root / "broker", settings=settings) as broker:
        wire = broker.wire_endpoint.removeprefix("wire://")
        relay = launch(wire, front, root / "relay.ready", canned_sends, timeout=30)
        try:
            yield broker, front
        finally:
            relay.terminate()
            relay.wait(30)


def test_the_official_client_sends_and_consumes_through_the_relay(
    daemons: Daemons, tmp_path: Path
) -> None:
    with relayed(daemons, tmp_path) as (broker, front):
        out = run_client(front, tmp_path / "home", "orders", "fifo-orders")
        assert out["max_body_size"] == MAX_MESSAGE_SIZE  # the broker's Telemetry settings
        stored = {v.msg_id: v for q in pull_all(broker.endpoint, "orders").values() for v in q}
        assert sorted(stored) == sorted(sent["id"] for sent in out["sent"])
        assert {stored[s["id"]].body for s in out["sent"]} == {
            s["body"].encode() for s in out["sent"]
        }
        assert out["too_large_server"]["code"] == 41301  # the broker's refusal, relayed
        assert out["push_consumer_started"] is True

        got = run_script(CONSUMER_SCRIPT, front, tmp_path / "home2", "PopTopic", "pop-group")
        assert sorted(m["body"] for m in got["first"]) == [f"pop-{i}" for i in range(6)]
        assert got["handle_changed"] is True
        assert [m["attempt"] for m in got["again"]] == [2]  # redelivered after its 2 s


def test_canned_sends_answer_the_client_and_store_nothing(daemons: Daemons, tmp_path: Path) -> None:
    with relayed(daemons, tmp_path, canned_sends=True) as (broker, front):
        out = run_client(front, tmp_path / "home", "orders", "fifo-orders")
        assert len(out["sent"]) == 10 and all(sent["id"] for sent in out["sent"])
        assert sum(len(q) for q in pull_all(broker.endpoint, "orders").values()) == 0
