"""Consumer groups behind the ACL on wharf.v1 (gRPC and the wire port) and apache.rocketmq.v2.

An account that may only publish to ``orders`` tries what a consumer of group ``billing`` does
and what an attacker would: join the group with a heartbeat (or v2 Telemetry settings), join it
subscribed to a topic it may not read, create groups by naming them, and remove the group's
clients. Each is refused PERMISSION_DENIED / FORBIDDEN, naming the user, the group or topic and
the action, and no group is created; the consumer account (SUB on ``billing`` and ``orders``)
is served. A second account of the same group may not remove or take over the first's clients. Remoting and Kafka: tests/broker/remoting/test_acl.py, tests/broker/kafka/test_sasl.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from wharf import wire
from wharf.client.wire_channel import WireChannel
from wharf.rocketmq.v2 import definition_pb2 as v2_def
from wharf.rocketmq.v2 import service_pb2 as v2_pb2
from wharf.rocketmq.v2 import service_pb2_grpc as v2_grpc
from wharf.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc

from tests.broker.acl_helpers import (
    ADMIN,
    CONSUMER,
    CONSUMER2,
    GROUP,
    PRODUCER,
    TOPIC,
    acl_broker,
    signed,
)
from tests.harness import BrokerProcess, Daemons

V2_FORBIDDEN = 40300


@pytest.fixture(scope="module")
def broker(
    module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    with acl_broker(module_daemons, tmp_path_factory.mktemp("acl-groups")) as proc:
        yield proc


@pytest.fixture(scope="module")
def channel(broker: BrokerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(broker.endpoint) as ch:
        yield ch


def heartbeat(client_id: str, group: str, topic: str) -> messaging_pb2.HeartbeatRequest:
    consumer = messaging_pb2.ConsumerData(
        group=group, subscriptions=[messaging_pb2.Subscription(topic=topic, tag_expression="*")]
    )
    return messaging_pb2.HeartbeatRequest(client_id=client_id, consumers=[consumer])


def groups(channel: grpc.Channel) -> set[str]:
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    reply = admin.ListSubscriptionGroups(
        admin_pb2.ListSubscriptionGroupsRequest(), metadata=signed(ADMIN), timeout=10
    )
    return {g.group_name for g in reply.groups}


def members(channel: grpc.Channel, group: str) -> list[str]:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    request = messaging_pb2.GetConsumerListRequest(consumer_group=group)
    return list(stub.GetConsumerList(request, metadata=signed(CONSUMER), timeout=10).client_ids)


def denied(call: Any) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value
    return str(info.value.details())


def test_v1_heartbeats_and_unregisters_need_sub_on_the_group_and_topics(
    channel: grpc.Channel,
) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    before = groups(channel)
    # The real consumer joins billing on orders: served.
    stub.Heartbeat(heartbeat("real@1", GROUP, TOPIC), metadata=signed(CONSUMER), timeout=10)
    assert members(channel, GROUP) == ["real@1"]

    # The publish-only account cannot join billing, nor create groups by naming them.
    details = denied(
        lambda: stub.Heartbeat(heartbeat("thief@1", GROUP, TOPIC), metadata=signed(PRODUCER))
    )
    assert "user 'producer' may not SUB on group 'billing'" in details
    many = messaging_pb2.HeartbeatRequest(
        client_id="thief@2",
        consumers=[messaging_pb2.ConsumerData(group=f"made-{i}") for i in range(50)],
    )
    denied(lambda: stub.Heartbeat(many, metadata=signed(PRODUCER)))
    # Nor may the consumer subscribe its group to a topic it may not read.
    details = denied(
        lambda: stub.Heartbeat(heartbeat("real@2", GROUP, "payments"), metadata=signed(CONSUMER))
    )
    assert "user 'consumer' may not SUB on topic 'payments'" in details
    assert members(channel, GROUP) == ["real@1"]  # nobody else took its queues
    assert groups(channel) - before <= {GROUP}  # no group created by a refused heartbeat

    # Removing the group's client needs SUB on the group.
    leave = messaging_pb2.UnregisterClientRequest(client_id="real@1", consumer_groups=[GROUP])
    details = denied(lambda: stub.UnregisterClient(leave, metadata=signed(PRODUCER)))
    assert "may not SUB on group 'billing'" in details
    assert members(channel, GROUP) == ["real@1"]
    stub.UnregisterClient(leave, metadata=signed(CONSUMER), timeout=10)
    assert members(channel, GROUP) == []
    # A producer's heartbeat names no resource: any authenticated account may send it.
    producer = messaging_pb2.HeartbeatRequest(client_id="p@1", producer_groups=["PG"])
    stub.Heartbeat(producer, metadata=signed(PRODUCER), timeout=10)


async def test_v1_over_the_wire_port_the_same(broker: BrokerProcess) -> None:
    async with WireChannel(broker.wire_endpoint.removeprefix(wire.SCHEME)) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Heartbeat(
                heartbeat("wire-thief@1", GROUP, TOPIC), metadata=signed(PRODUCER), timeout=10
            )
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "may not SUB on group 'billing'" in str(info.value.details())
        await stub.Heartbeat(
            heartbeat("wire-real@1", GROUP, TOPIC), metadata=signed(CONSUMER), timeout=10
        )
        leave = messaging_pb2.UnregisterClientRequest(
            client_id="wire-real@1", consumer_groups=[GROUP]
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.UnregisterClient(leave, metadata=signed(PRODUCER), timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        await stub.UnregisterClient(leave, metadata=signed(CONSUMER), timeout=10)


def v2_metadata(account: tuple[str, str], client_id: str) -> tuple[tuple[str, str], ...]:
    return (*signed(account), ("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"))


def v2_settings(group: str, topic: str) -> v2_pb2.TelemetryCommand:
    subscription = v2_def.Subscription(
        group=v2_def.Resource(name=group),
        subscriptions=[
            v2_def.SubscriptionEntry(
                topic=v2_def.Resource(name=topic),
                expression=v2_def.FilterExpression(type=v2_def.TAG, expression="*"),
            )
        ],
    )
    settings = v2_def.Settings(client_type=v2_def.SIMPLE_CONSUMER, subscription=subscription)
    return v2_pb2.TelemetryCommand(settings=settings)


def test_v2_heartbeat_telemetry_and_termination_need_sub_on_the_group(
    channel: grpc.Channel,
) -> None:
    stub = v2_grpc.MessagingServiceStub(channel)
    before = groups(channel)
    beat = v2_pb2.HeartbeatRequest(
        group=v2_def.Resource(name="v2-billing"), client_type=v2_def.SIMPLE_CONSUMER
    )
    reply = stub.Heartbeat(beat, metadata=v2_metadata(PRODUCER, "v2-thief"), timeout=10)
    assert reply.status.code == V2_FORBIDDEN
    assert "may not SUB on group 'v2-billing'" in reply.status.message
    ok = v2_pb2.HeartbeatRequest(
        group=v2_def.Resource(name=GROUP), client_type=v2_def.SIMPLE_CONSUMER
    )
    assert (
        stub.Heartbeat(ok, metadata=v2_metadata(CONSUMER, "v2-real"), timeout=10).status.code
        == 20000
    )

    # Telemetry: each settings frame is checked; a refused one is answered FORBIDDEN.
    replies = list(
        stub.Telemetry(
            iter([v2_settings("v2-billing", TOPIC)]),
            metadata=v2_metadata(PRODUCER, "v2-thief"),
            timeout=10,
        )
    )
    assert replies and replies[0].status.code == V2_FORBIDDEN, replies
    assert "may not SUB on group 'v2-billing'" in replies[0].status.message
    replies = list(
        stub.Telemetry(
            iter([v2_settings(GROUP, "payments")]),
            metadata=v2_metadata(CONSUMER, "v2-real"),
            timeout=10,
        )
    )
    assert replies[0].status.code == V2_FORBIDDEN
    assert "may not SUB on topic 'payments'" in replies[0].status.message
    replies = list(
        stub.Telemetry(
            iter([v2_settings(GROUP, TOPIC)]), metadata=v2_metadata(CONSUMER, "v2-real"), timeout=10
        )
    )
    assert replies[0].status.code == 20000 and replies[0].HasField("settings")

    bye = v2_pb2.NotifyClientTerminationRequest(group=v2_def.Resource(name=GROUP))
    reply = stub.NotifyClientTermination(bye, metadata=v2_metadata(PRODUCER, "v2-real"), timeout=10)
    assert reply.status.code == V2_FORBIDDEN
    assert "v2-billing" not in groups(channel) - before  # refused joins created nothing


def test_v1_an_account_cannot_remove_or_take_over_anothers_client(channel: grpc.Channel) -> None:
    """Both accounts may SUB on billing; a client id belongs to the account that registered it
    (an account that could unregister the other's consumers would take their queues)."""
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    stub.Heartbeat(heartbeat("mine@1", GROUP, TOPIC), metadata=signed(CONSUMER), timeout=10)
    stub.Heartbeat(heartbeat("theirs@1", GROUP, TOPIC), metadata=signed(CONSUMER2), timeout=10)
    leave = messaging_pb2.UnregisterClientRequest(client_id="mine@1", consumer_groups=[GROUP])
    details = denied(lambda: stub.UnregisterClient(leave, metadata=signed(CONSUMER2)))
    assert "user 'consumer2' may not act for client 'mine@1'" in details
    denied(lambda: stub.Heartbeat(heartbeat("mine@1", GROUP, TOPIC), metadata=signed(CONSUMER2)))
    assert members(channel, GROUP) == ["mine@1", "theirs@1"]
    # Its own account and an admin may.
    stub.UnregisterClient(leave, metadata=signed(CONSUMER), timeout=10)
    theirs = messaging_pb2.UnregisterClientRequest(client_id="theirs@1", consumer_groups=[GROUP])
    stub.UnregisterClient(theirs, metadata=signed(ADMIN), timeout=10)
    assert members(channel, GROUP) == []


def test_v2_termination_of_anothers_client_is_forbidden(channel: grpc.Channel) -> None:
    stub = v2_grpc.MessagingServiceStub(channel)
    ok = v2_pb2.HeartbeatRequest(
        group=v2_def.Resource(name=GROUP), client_type=v2_def.SIMPLE_CONSUMER
    )
    reply = stub.Heartbeat(ok, metadata=v2_metadata(CONSUMER, "v2-mine"), timeout=10)
    assert reply.status.code == 20000
    reply = stub.Heartbeat(ok, metadata=v2_metadata(CONSUMER2, "v2-mine"), timeout=10)
    assert reply.status.code == V2_FORBIDDEN
    assert "may not act for client 'v2-mine'" in reply.status.message
    bye = v2_pb2.NotifyClientTerminationRequest(group=v2_def.Resource(name=GROUP))
    reply = stub.NotifyClientTermination(
        bye, metadata=v2_metadata(CONSUMER2, "v2-mine"), timeout=10
    )
    assert reply.status.code == V2_FORBIDDEN
    reply = stub.NotifyClientTermination(bye, metadata=v2_metadata(CONSUMER, "v2-mine"), timeout=10)
    assert reply.status.code == 20000
