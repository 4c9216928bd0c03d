"""Telemetry settings merge (reference §4) and the client registry's lifetime rules."""

from __future__ import annotations

from wharf.broker.core.background import CLIENT_EXPIRY_SCAN_S
from wharf.broker.core.clients import CLIENT_TIMEOUT_S, ClientRegistry
from wharf.broker.frontends.v2.clients import on_heartbeat, on_settings
from wharf.broker.frontends.v2.settings import merge_settings
from wharf.rocketmq.v2 import definition_pb2

Settings = definition_pb2.Settings


def producer_settings() -> definition_pb2.Settings:
    s = Settings(client_type=definition_pb2.PRODUCER)
    s.publishing.topics.add(name="orders")
    s.publishing.max_body_size = 128 * 1024 * 1024  # what the Python client sends
    s.access_point.addresses.add(host="127.0.0.1", port=8081)
    s.user_agent.language = definition_pb2.PYTHON
    s.metric.on = True
    return s


def consumer_settings() -> definition_pb2.Settings:
    s = Settings(client_type=definition_pb2.SIMPLE_CONSUMER)
    s.subscription.group.name = "g1"
    sub = s.subscription.subscriptions.add()
    sub.topic.name = "orders"
    sub.expression.expression = "*"
    return s


def test_producer_gets_the_brokers_body_limit_and_validation_with_metric_off() -> None:
    client = producer_settings()
    reply = merge_settings(client, max_body_size=4 * 1024 * 1024)
    assert reply.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.publishing.validate_message_type is True
    assert [t.name for t in reply.publishing.topics] == ["orders"]  # echoed
    assert reply.access_point == client.access_point and reply.user_agent == client.user_agent
    assert reply.HasField("metric") and reply.metric.on is False
    policy = reply.backoff_policy
    assert policy.max_attempts == 3 and policy.WhichOneof("strategy") == "exponential_backoff"
    assert policy.exponential_backoff.initial.ToMilliseconds() == 10
    assert not reply.HasField("subscription")
    assert client.metric.on is True  # the client's message is not modified


def test_consumer_gets_subscription_fields_and_group_backoff() -> None:
    reply = merge_settings(consumer_settings(), 4 << 20, group_fifo=True, group_max_attempts=17)
    sub = reply.subscription
    assert sub.group.name == "g1" and sub.subscriptions[0].topic.name == "orders"
    assert sub.fifo is True and sub.receive_batch_size == 32
    assert sub.long_polling_timeout.seconds == 20
    assert reply.backoff_policy.max_attempts == 17
    assert reply.backoff_policy.customized_backoff.next[0].seconds == 1
    assert not reply.HasField("publishing") and reply.metric.on is False


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_client_dropped_on_stream_end_termination_and_silence() -> None:
    clock = Clock()
    reg = ClientRegistry(clock=clock)
    reg.channel_opened("a")
    on_settings(reg, "a", consumer_settings())
    assert reg.get("a") is not None and reg.get("a").group == "g1"  # type: ignore[union-attr]
    reg.channel_closed("a")
    assert reg.get("a") is None

    on_heartbeat(reg, "b", definition_pb2.PRODUCER, "")
    assert reg.terminate("b") and reg.get("b") is None and not reg.terminate("b")

    on_heartbeat(reg, "c", definition_pb2.PRODUCER, "")
    on_heartbeat(reg, "d", definition_pb2.PRODUCER, "")
    clock.now += CLIENT_TIMEOUT_S - 1
    on_heartbeat(reg, "d", definition_pb2.PRODUCER, "")  # d stays alive, c goes silent
    clock.now += 2
    assert reg.expire() == [("", "c")]
    assert reg.get("c") is None and reg.get("d") is not None
    assert reg.expire() == []  # d heartbeated within the expiry
    clock.now += CLIENT_EXPIRY_SCAN_S + CLIENT_TIMEOUT_S
    assert reg.expire() == [("", "d")] and len(reg) == 0


def test_registry_is_bounded() -> None:
    reg = ClientRegistry(max_sessions=3)
    for name in "abcd":
        on_heartbeat(reg, name, definition_pb2.PRODUCER, "")
    assert len(reg) == 3 and reg.get("a") is None
