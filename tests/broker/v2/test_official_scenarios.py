"""The OFFICIAL RocketMQ Python client (5.1.2, .venv-rmq/) against the daemon, with topics and
groups made by the `wharf` CLI as a user would: FIFO order per message group in a FIFO group,
dead letters after max attempts (SimpleConsumer) and by the client's own forward (FIFO
PushConsumer), the PushConsumer consuming everything once, and a kill -9 / SIGTERM restart of
the broker between receive and ack (the un-acked come back with attempt 2, the acked never)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.broker.v2.test_official_client import QUEUES, pull_all, run_script
from tests.harness import REPO_ROOT, BrokerProcess, Daemons

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).with_name("rmq_scenarios_script.py")


def wharf_cli(endpoint: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "wharf.client.cli.main", "--endpoints", endpoint, *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def scenario(broker: BrokerProcess, home: Path, *args: str) -> dict[str, Any]:
    return run_script(SCRIPT, broker.endpoint, home, *args)


def dead_letters(endpoint: str, group: str) -> list[bytes]:
    with grpc.insecure_channel(endpoint) as channel:
        reply = messaging_pb2_grpc.MessagingServiceStub(channel).PullMessage(
            messaging_pb2.PullMessageRequest(
                consumer_group="check", topic=f"%DLQ%{group}", queue_id=0, queue_offset=0
            )
        )
    return [m.body for m in reply.messages]


@pytest.fixture
def broker(daemons: Daemons, tmp_path: Path) -> Any:
    with daemons.broker(tmp_path / "broker", settings={"defaultTopicQueueNums": 4}) as b:
        yield b


def test_fifo_group_receives_each_message_group_in_order_one_at_a_time(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    wharf_cli(broker.endpoint, "topic", "create", "fifo_orders-1", "--message-type", "FIFO")
    saved = wharf_cli(broker.endpoint, "group", "create", "fifo_group-1", "--fifo")
    assert "fifo=yes" in saved
    out = scenario(broker, tmp_path / "home", "fifo", "fifo_orders-1", "fifo_group-1")
    for batch in out["batches"]:
        groups = [group for group, _, _ in batch]
        assert len(groups) == len(set(groups)), batch  # never two of one group in flight
    received = [(group, body) for batch in out["batches"] for group, body, _ in batch]
    assert len(received) == 12
    for group in ("a", "b", "c"):
        assert [b for g, b in received if g == group] == [f"{group}-{i}" for i in range(4)]
    assert {attempt for batch in out["batches"] for *_, attempt in batch} == {1}


def test_simple_consumer_message_goes_to_dlq_after_max_attempts(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    wharf_cli(broker.endpoint, "group", "create", "dlq-group", "--retry-max-times", "1")
    out = scenario(broker, tmp_path / "home", "simple-dlq", "Poisoned", "dlq-group")
    assert out["attempts"] == [1, 2]
    assert out["after"] == []  # not delivered a third time
    assert dead_letters(broker.endpoint, "dlq-group") == [b"poison"]


def test_push_consumer_consumes_every_message_once(broker: BrokerProcess, tmp_path: Path) -> None:
    wharf_cli(broker.endpoint, "topic", "create", "Pushed", "--message-type", "NORMAL")
    out = scenario(broker, tmp_path / "home", "push", "Pushed", "push-group", "20")
    assert len(out["sent"]) == 20
    bodies = sorted(body for body, _ in out["seen"])
    assert bodies == sorted(f"push-{i}" for i in range(20))  # each once: acks reached the broker


def test_fifo_push_consumer_forwards_a_failing_message_to_the_dlq(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    wharf_cli(broker.endpoint, "topic", "create", "FifoPush", "--message-type", "FIFO")
    wharf_cli(broker.endpoint, "group", "create", "fifo-push", "--fifo", "--retry-max-times", "1")
    out = scenario(broker, tmp_path / "home", "push-fifo-dlq", "FifoPush", "fifo-push")
    seen = [body for body, _ in out["seen"]]
    assert seen.count("a-poison") == 2  # max attempts (retryMaxTimes + 1), retried by the client
    assert seen.count("a-next") == 1 and seen.count("b-other") == 1
    assert seen.index("a-next") > max(i for i, b in enumerate(seen) if b == "a-poison")
    assert dead_letters(broker.endpoint, "fifo-push") == [b"a-poison"]


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_a_restart_between_receive_and_ack_redelivers_only_the_unacked(
    daemons: Daemons, how: str, tmp_path: Path
) -> None:
    broker = daemons.broker(tmp_path / "broker", settings={"defaultTopicQueueNums": 4}, start=False)
    with broker:
        first = scenario(broker, tmp_path / "home", "receive-partial", "Crash", "crash-group")
        assert len(first["acked"]) == 2 and len(first["unacked"]) == 2
        if how == "kill -9":
            broker.kill()
        else:
            broker.stop()
        broker.start()
        rest = scenario(broker, tmp_path / "home", "receive-rest", "Crash", "crash-group", "2")
    assert rest["back"] == [[body, 2] for body in first["unacked"]]
    assert rest["after"] == []


def test_transactions_commit_rollback_and_check_back(daemons: Daemons, tmp_path: Path) -> None:
    settings = {
        "defaultTopicQueueNums": QUEUES,  # pull_all reads this many
        "transactionTimeOut": 1000,  # ms: check-backs start 1 s after the send
        "transactionCheckInterval": 1000,
    }
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        wharf_cli(broker.endpoint, "topic", "create", "Tx", "--message-type", "TRANSACTION")
        out = scenario(broker, tmp_path / "home", "transactions", "Tx", "unused")
        bodies = sorted(m.body for queue in pull_all(broker.endpoint, "Tx").values() for m in queue)
    # Committed by the client and by the check-back: visible once each; the others never.
    assert bodies == [b"check-commit", b"commit-me"]
    asked = {body for body, _ in out["asked"]}
    assert asked == {"check-commit", "check-rollback"}  # only the unresolved were checked
    assert {topic for _, topic in out["asked"]} == {"Tx"}  # shown with their real topic
