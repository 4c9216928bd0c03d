"""Fuzz every RPC with random and malformed requests (hypothesis), including raw garbage bytes
through a generic channel; afterwards the daemon still serves and its store is intact."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc

from tests.broker.daemon_helpers import SMALL_STORE, Client
from tests.harness import BrokerProcess, Daemons

# The group the checks read with: the fuzzer names "g" among others (and may disable it).
CHECK_GROUP = "sentinel-check"

pytestmark = pytest.mark.slow

SERVICES = [
    (messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"], messaging_pb2_grpc),
    (admin_pb2.DESCRIPTOR.services_by_name["AdminService"], admin_pb2_grpc),
]
METHODS = [(service, method) for service, _ in SERVICES for method in service.methods]
# Text that is mostly valid-looking names, sometimes anything (unicode, separators, huge).
TEXT = st.one_of(
    st.sampled_from(["", "t", "fuzz", "g", "*", "a || b", "%RETRY%g", "SCHEDULE_TOPIC_XXXX"]),
    st.text(max_size=40),
    st.text(alphabet="ab\x01\x02 |%", max_size=300),
)
INTS = st.one_of(st.integers(-3, 40), st.integers(-(2**31), 2**31 - 1))
LONGS = st.one_of(st.integers(-3, 5000), st.integers(-(2**63), 2**63 - 1))
SCALARS: dict[int, Any] = {
    FieldDescriptor.TYPE_STRING: TEXT,
    FieldDescriptor.TYPE_BYTES: st.binary(max_size=2048),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_INT32: INTS,
    FieldDescriptor.TYPE_INT64: LONGS,
    FieldDescriptor.TYPE_UINT32: st.one_of(st.integers(0, 40), st.integers(0, 2**32 - 1)),
    FieldDescriptor.TYPE_UINT64: st.integers(0, 2**64 - 1),
    FieldDescriptor.TYPE_ENUM: st.integers(-1, 5),
}


def message_strategy(descriptor: Any, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Random field values for any request type, nested messages included (depth-bounded)."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            fields[field.name] = st.dictionaries(TEXT, TEXT, max_size=3)
            continue
        if field.message_type is not None:
            if depth >= 2:
                continue
            value = message_strategy(field.message_type, depth + 1)
        else:
            value = SCALARS[field.type]
        repeated = field.is_repeated
        fields[field.name] = st.lists(value, max_size=4) if repeated else value
    return st.fixed_dictionaries({}, optional=fields)


def build(descriptor: Any, values: dict[str, Any]) -> Any:
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(descriptor)
    message = cls()
    for name, value in values.items():
        field = descriptor.fields_by_name[name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            getattr(message, name).update(value)
        elif field.message_type is not None and field.is_repeated:
            getattr(message, name).extend(build(field.message_type, v) for v in value)
        elif field.message_type is not None:
            getattr(message, name).CopyFrom(build(field.message_type, value))
        elif field.is_repeated:
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)
    return message


CALLS = st.one_of(
    *[
        st.tuples(
            st.just(m), message_strategy(m.input_type).map(lambda v, m=m: build(m.input_type, v))
        )
        for _, m in METHODS
    ]
)
GARBAGE = st.tuples(st.sampled_from([m for _, m in METHODS]), st.binary(max_size=512))


@pytest.fixture(scope="module")
def daemon(
    module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    settings_ = {**SMALL_STORE, "maxParkedPulls": 50}
    with module_daemons.broker(tmp_path_factory.mktemp("fuzz"), settings=settings_) as broker:
        yield broker


def path_of(method: Any) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def call(channel: grpc.Channel, method: Any, payload: bytes) -> None:
    """Send raw bytes; any status is acceptable, a dead daemon is not."""
    try:
        if method.client_streaming:
            stream = channel.stream_stream(path_of(method))
            for _ in stream(iter([payload, payload]), timeout=2):
                pass
        else:
            channel.unary_unary(path_of(method))(payload, timeout=2)
    except grpc.RpcError as exc:
        assert exc.code() != grpc.StatusCode.UNAVAILABLE, exc.details()


def test_random_and_malformed_requests_leave_the_daemon_up_and_store_intact(
    daemon: BrokerProcess,
) -> None:
    client = Client(daemon.endpoint)
    sentinel = client.send("sentinel", b"before fuzz", b"still here")
    channel = grpc.insecure_channel(daemon.endpoint)

    @settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
    @given(structured=CALLS, garbage=GARBAGE, truncate=st.integers(0, 64))
    def fuzz(structured: tuple[Any, Any], garbage: tuple[Any, bytes], truncate: int) -> None:
        method, request = structured
        payload = request.SerializeToString()
        call(channel, method, payload)
        call(channel, method, payload[: max(0, len(payload) - truncate)])  # truncated
        call(channel, garbage[0], garbage[1])

    fuzz()
    channel.close()
    assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log()
    assert "Traceback" not in daemon.log()  # every bad input was handled, none crashed a handler
    health = health_pb2_grpc.HealthStub(client.channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    status = client.admin.GetBrokerStatus(admin_pb2.GetBrokerStatusRequest())
    assert status.writable
    pulled = client.pull("sentinel", group=CHECK_GROUP, max_messages=10)
    assert [m.body for m in pulled.messages] == [b"before fuzz", b"still here"]
    client.close()

    assert daemon.stop() == 0  # clean stop, then recovery must find the same data
    daemon.start()
    client = Client(daemon.endpoint)
    again = client.pull("sentinel", group=CHECK_GROUP, max_messages=10)
    assert [m.msg_id for m in again.messages] == [r.msg_id for r in sentinel.results]
    client.close()


def test_fuzz_builder_fills_nested_repeated_map_and_optional_fields() -> None:
    request = build(
        messaging_pb2.SendMessageRequest.DESCRIPTOR,
        {"topic": "t", "queue_id": 0, "messages": [{"body": b"1", "properties": {"k": "v"}}]},
    )
    assert request.HasField("queue_id") and request.messages[0].properties["k"] == "v"
    assert {m.name for _, m in METHODS} >= {"SendMessageStream", "GetBrokerStatus"}
