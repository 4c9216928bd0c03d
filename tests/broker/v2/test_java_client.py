"""Apache's RocketMQ 5 Java client (``org.apache.rocketmq:rocketmq-client-java``, the version in
``tests/java/pom.xml``) against the real daemon's gRPC port, its proxy endpoint, driven by the
project's ``Rmq5Scenarios`` program (``make java-clients``; skipped without a JDK or that
build).

Two brokers: one with tlsEnable + tlsListen (plaintext and TLS ports; the client's TLS trusts
any certificate, so the generated development pair serves), one with aclEnable and the
accounts of ``acl_helpers``. One JVM runs every scenario at once, one JSON line each: normal
sends and a PushConsumer; FIFO message groups to a FIFO PushConsumer; a delivery timestamp on
a DELAY topic; transactions committed, rolled back and left to the TransactionChecker; a
SimpleConsumer's changeInvisibleDuration and ack; send and receive over TLS; with ACL
credentials, and refusals without them. The two PushConsumers take ~25 s each, most of it in
close(): the client waits for its receive in flight, which the broker holds up to the 20 s long
poll its settings announce (Apache's proxy holds it as long)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from tests import javaclients
from tests.broker.acl_helpers import ACL_SETTINGS, write_acl
from tests.broker.v2.test_official_scenarios import wharf_cli
from tests.harness import BrokerProcess, Daemons

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MAIN = "dev.wharf.javatests.Rmq5Scenarios"
# Transactions left open are checked back after 0.5 s (as the 4.x test does).
SETTINGS = {
    "defaultTopicQueueNums": 4,
    "tlsEnable": True,
    "tlsListen": "127.0.0.1:0",
    "transactionTimeOut": 500,
    "transactionCheckInterval": 500,
}


@pytest.fixture(scope="module")
def brokers(module_daemons: Daemons) -> tuple[BrokerProcess, BrokerProcess]:
    broker = module_daemons.broker("java5", settings=SETTINGS)
    endpoint = broker.plaintext_endpoint
    for topic, kind in (("R5_FIFO", "FIFO"), ("R5_DELAY", "DELAY"), ("R5_TX", "TRANSACTION")):
        wharf_cli(endpoint, "topic", "create", topic, "--queues", "4", "--message-type", kind)
    wharf_cli(endpoint, "group", "create", "R5_FIFO_G", "--fifo")
    root = module_daemons.root / "java5-acl"
    write_acl(root / "store")
    return broker, module_daemons.broker(root, settings=ACL_SETTINGS)


@pytest.fixture(scope="module")
def scenarios(
    brokers: tuple[BrokerProcess, BrokerProcess], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    broker, acl = brokers
    home = tmp_path_factory.mktemp("java5-home")
    start = time.monotonic()
    proc = javaclients.run(
        home, MAIN, broker.plaintext_endpoint, broker.tls_endpoint, acl.endpoint, "all",
        timeout=200,
    )  # fmt: skip
    results = javaclients.results(proc, time.monotonic() - start)
    results["_home"] = home
    return results


def scenario(scenarios: dict[str, Any], name: str) -> dict[str, Any]:
    try:
        return javaclients.scenario(scenarios, name)
    except AssertionError as e:
        logs = "\n".join(
            p.read_text(errors="replace")[-3000:]
            for p in scenarios["_home"].glob("logs/rocketmqlogs/*.log")
        )
        raise AssertionError(f"{e}\n--- client log ---\n{logs}") from None


def bodies(received: list[dict[str, Any]]) -> list[str]:
    return sorted(m["body"] for m in received)


def test_normal_sends_reach_a_push_consumer_once(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "normal")
    assert len(set(out["sent"])) == 6
    received = out["received"]
    assert bodies(received) == [f"n-{i}" for i in range(6)]  # each once
    assert sorted(m["id"] for m in received) == sorted(out["sent"])
    for m in received:
        i = m["body"].split("-")[1]
        assert (m["topic"], m["tag"], m["keys"]) == ("R5_NORMAL", "TagN", [f"key-{i}"])
        assert m["props"] == {"seq": i}
        assert m["attempt"] == 1
        assert m["received_ms"] - out["started_ms"] < 5_000  # the consumer's first receive


def test_fifo_message_groups_arrive_in_order(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "fifo")
    received = out["received"]
    assert Counter(m["body"] for m in received) == Counter(
        f"{g}-{i}" for g in "abc" for i in range(5)
    )
    for group in "abc":
        mine = [m for m in received if m["group"] == group]
        assert [m["body"] for m in mine] == [f"{group}-{i}" for i in range(5)], received


def test_a_delivery_timestamp_delivers_then(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "delay")
    [m] = out["received"]
    assert m["body"] == "later"
    early_ms = out["deliver_at_ms"] - m["received_ms"]
    assert early_ms <= 100, f"delivered {early_ms} ms before its timestamp"
    assert m["received_ms"] - out["deliver_at_ms"] < 3_000  # within a receive of it


def test_transactions_commit_rollback_and_the_checker(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "transaction")
    assert bodies(out["received"]) == ["check", "commit"]  # never the rolled-back one
    assert set(out["checked"]) == {"check"}  # only the open one is checked back
    ids = {m["body"]: m["id"] for m in out["received"]}
    assert ids == {"commit": out["commit"], "check": out["check"]}


def test_simple_consumer_change_invisible_duration_and_ack(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "simple")
    assert bodies(out["first"]) == ["s-0", "s-1", "s-2"]
    assert all(m["attempt"] == 1 for m in out["first"])
    [again] = out["again"]
    assert (again["body"], again["attempt"]) == ("s-0", 2)
    # back ~2 s after the change (not the 20 s it was received with)
    assert 1_500 <= out["again_after_ms"] <= 6_000, out["again_after_ms"]
    assert out["after_ack"] == []  # acked messages never come back


def test_over_tls(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "tls")
    assert bodies(out["received"]) == ["x-0", "x-1", "x-2"]
    assert sorted(m["id"] for m in out["received"]) == sorted(out["sent"])


def test_with_acl_credentials(scenarios: dict[str, Any]) -> None:
    out = scenario(scenarios, "acl")
    assert bodies(out["received"]) == ["a-0", "a-1", "a-2"]
    assert out["nobody_send"] is not None and "nobody" in out["nobody_send"][1], out
    assert out["wrong_secret_receive"] is not None, out


def test_the_scenarios_take_one_jvm(scenarios: dict[str, Any]) -> None:
    proc = scenarios["_proc"]
    names = {"normal", "fifo", "delay", "transaction", "simple", "tls", "acl"}
    assert names <= set(scenarios), proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
