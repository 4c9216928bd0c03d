"""aclEnable through the real daemon, apache.rocketmq.v2 side (wharf.v1: tests/broker/test_acl.py).

Every v2 RPC answers Status UNAUTHORIZED (40100) without credentials, with a wrong signature,
an anonymous access key or a day-old date (a server stream: one such reply; Telemetry: one
TelemetryCommand, then the end of the stream); every RPC that needs a permission answers
FORBIDDEN (40300) to a user without any, naming user, resource and action; a user with the
permission is served. The OFFICIAL Python client (5.1.2, subprocess) with credentials sends,
receives and acks; with a wrong secret or a user without the topic it is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.broker.kit.acl.table import ACCESS
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s

from tests.broker.acl_helpers import (
    ADMIN,
    CONSUMER,
    GROUP,
    NOBODY,
    PRODUCER,
    TOPIC,
    acl_broker,
    date_now,
    empty_request,
    response_class,
    signed,
)
from tests.broker.test_acl import AUTH_VALUES, DATES
from tests.broker.v2.test_official_client import run_script
from tests.harness import BrokerProcess, Daemons

Code = d.Code
SERVICE = s.DESCRIPTOR.services_by_name["MessagingService"]
CLIENT_ID = (("x-mq-client-id", "acl-test@1@0@v2"),)
SCRIPT = Path(__file__).with_name("rmq_acl_script.py")


@pytest.fixture(scope="module")
def broker(
    module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    with acl_broker(module_daemons, tmp_path_factory.mktemp("acl-v2")) as proc:
        yield proc


@pytest.fixture(scope="module")
def channel(broker: BrokerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(broker.endpoint) as ch:
        yield ch


def statuses(channel: grpc.Channel, method: Any, request: Any, metadata: Any) -> list[Any]:
    """The Status of every reply of ``method`` (one for unary calls)."""
    path = f"/{SERVICE.full_name}/{method.name}"
    ser = type(request).SerializeToString
    de = response_class(method).FromString
    md = (*CLIENT_ID, *(metadata or ()))
    if method.client_streaming:
        fn = channel.stream_stream(path, request_serializer=ser, response_deserializer=de)
        replies = list(fn(iter([request]), metadata=md, timeout=10))
    elif method.server_streaming:
        stream = channel.unary_stream(path, request_serializer=ser, response_deserializer=de)
        replies = list(stream(request, metadata=md, timeout=10))
    else:
        unary = channel.unary_unary(path, request_serializer=ser, response_deserializer=de)
        replies = [unary(request, metadata=md, timeout=10)]
    return [r.status for r in replies]


BAD_METADATA = {
    "none": lambda: (),
    "wrong-secret": lambda: signed(PRODUCER, secret="not-the-secret"),
    "anonymous": lambda: signed(("", "")),
    "day-old-date": lambda: signed(ADMIN, date=date_now(-86400)),
}


@pytest.mark.parametrize("case", sorted(BAD_METADATA))
def test_every_v2_rpc_is_unauthorized_without_a_valid_signature(
    channel: grpc.Channel, case: str
) -> None:
    for method in SERVICE.methods:
        request = empty_request(method)
        if method.name == "Telemetry":
            request.settings.publishing.topics.add(name=TOPIC)
        replies = statuses(channel, method, request, BAD_METADATA[case]())
        assert [r.code for r in replies] == [Code.UNAUTHORIZED], (method.name, replies)
        assert replies[0].message.startswith("unauthenticated:")
        assert "secret" not in replies[0].message.lower()


def test_every_v2_rpc_that_needs_a_permission_is_forbidden_to_a_user_without_it(
    channel: grpc.Channel,
) -> None:
    checked = 0
    for method in SERVICE.methods:
        request = empty_request(method)
        needs = ACCESS[f"{SERVICE.full_name}/{method.name}"](request)
        if not needs:
            continue
        replies = statuses(channel, method, request, signed(NOBODY))
        assert [r.code for r in replies] == [Code.FORBIDDEN], (method.name, replies)
        message = replies[0].message
        assert "user 'nobody' may not" in message and f"/{method.name}" in message, message
        assert f"on {needs[0].kind} ''" in message, message
        checked += 1
    assert checked >= len(SERVICE.methods) - 4  # Heartbeat, Telemetry, Notify..., SendMessage([])


def test_v2_permissions_name_user_resource_and_action(channel: grpc.Channel) -> None:
    send = SERVICE.methods_by_name["SendMessage"]
    request = s.SendMessageRequest()
    message = request.messages.add(body=b"v2-acl")
    message.topic.name = TOPIC
    message.system_properties.message_id = "01ACL0000000000000000000001"
    message.system_properties.message_type = d.NORMAL
    message.system_properties.born_timestamp.GetCurrentTime()
    message.system_properties.born_host = "127.0.0.1"
    message.system_properties.body_encoding = d.IDENTITY
    (status,) = statuses(channel, send, request, signed(CONSUMER))
    assert status.code == Code.FORBIDDEN
    assert "user 'consumer' may not PUB on topic 'orders'" in status.message
    (status,) = statuses(channel, send, request, signed(PRODUCER))
    assert status.code == Code.OK, status

    route = SERVICE.methods_by_name["QueryRoute"]
    query = s.QueryRouteRequest()
    query.topic.name = "payments"
    (status,) = statuses(channel, route, query, signed(CONSUMER))
    assert status.code == Code.FORBIDDEN
    assert "user 'consumer' may not PUB or SUB on topic 'payments'" in status.message
    query.topic.name = TOPIC
    (status,) = statuses(channel, route, query, signed(CONSUMER))
    assert status.code == Code.OK

    receive = SERVICE.methods_by_name["ReceiveMessage"]
    req = s.ReceiveMessageRequest()
    req.group.name = "audit"
    req.message_queue.topic.name = TOPIC
    (status,) = statuses(channel, receive, req, signed(CONSUMER))
    assert status.code == Code.FORBIDDEN
    assert "user 'consumer' may not SUB on group 'audit'" in status.message


@pytest.mark.slow
def test_official_python_client_with_credentials_sends_and_receives(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    out = run_script(SCRIPT, broker.endpoint, tmp_path / "ok", "official", "official-g", *ADMIN)
    assert out["send_error"] is None and out["receive_error"] is None, out
    assert len(out["sent"]) == 3
    assert sorted(out["received"]) == ["acl-0", "acl-1", "acl-2"]

    # A producer-only user sends but its SimpleConsumer is refused (no SUB on the group).
    out = run_script(SCRIPT, broker.endpoint, tmp_path / "pub", "orders-rmq", GROUP, *PRODUCER)
    assert out["send_error"] is None and len(out["sent"]) == 3, out
    assert out["receive_error"] is not None and out["received"] == []


@pytest.mark.slow
def test_official_python_client_without_valid_credentials_is_refused(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    for home, keys in (("none", ("", "")), ("wrong", (PRODUCER[0], "bad-secret"))):
        out = run_script(SCRIPT, broker.endpoint, tmp_path / home, TOPIC, GROUP, *keys)
        assert out["sent"] == [] and out["send_error"] is not None, out
        assert out["received"] == [] and out["receive_error"] is not None, out
    assert "Traceback" not in broker.log()


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(auth=AUTH_VALUES, date=DATES, method=st.sampled_from(list(SERVICE.methods)))
def test_fuzzed_authorization_headers_never_crash_the_broker_v2(
    broker: BrokerProcess, channel: grpc.Channel, auth: str, date: str | None, method: Any
) -> None:
    metadata = [("authorization", auth.strip() or "x")]
    if date is not None:
        metadata.append(("x-mq-date-time", date.strip() or "x"))
    replies = statuses(channel, method, empty_request(method), tuple(metadata))
    assert [r.code for r in replies] == [Code.UNAUTHORIZED], (method.name, replies)
    assert broker.proc is not None and broker.proc.poll() is None
    assert "Traceback" not in broker.log()
