"""aclEnable through the real daemon, wharf.v1 side (v2: tests/broker/v2/test_acl_v2.py).

One broker with five accounts (tests/broker/acl_helpers.py). Every RPC of MessagingService and
AdminService is refused UNAUTHENTICATED without credentials, with a wrong signature, with an
anonymous (empty) access key and with a day-old date; every RPC that needs a permission is
refused PERMISSION_DENIED to a user without any, naming the user, resource and action; the
users with the permissions are served (unary, client stream per request, SDK, admin); an IP
allow-list refuses a user from elsewhere; health stays open. The table names every RPC of
every service. Reload: a file changed under a running broker is in force within seconds, a
broken one keeps the previous rules. Fuzz: hypothesis-built authorization headers never get
anything but UNAUTHENTICATED and never leave a Traceback in the broker log.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.broker.frontends.acl_guard import AclGuard
from wharf.broker.kit.acl import rules as acl_rules
from wharf.broker.kit.acl import signature
from wharf.broker.kit.acl.table import ACCESS, V1_ADMIN, V1_MESSAGING, V2_MESSAGING
from wharf.client import Producer, PullConsumer, UnauthenticatedError
from wharf.client.admin import Admin
from wharf.client.errors import PermissionDeniedError
from wharf.rocketmq.v2 import service_pb2 as v2_service_pb2
from wharf.v1 import admin_pb2, messaging_pb2, messaging_pb2_grpc

from tests.broker.acl_helpers import (
    ACL_SETTINGS,
    ACL_YAML,
    ADMIN,
    CONSUMER,
    GROUP,
    NOBODY,
    PRODUCER,
    REMOTE_ONLY,
    TOPIC,
    acl_broker,
    date_now,
    empty_request,
    response_class,
    signed,
    write_acl,
)
from tests.harness import BrokerProcess, Daemons

SERVICES = [
    messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"],
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"],
]
V1_METHODS = [(s.full_name, m) for s in SERVICES for m in s.methods]


@pytest.fixture(scope="module")
def broker(
    module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    with acl_broker(module_daemons, tmp_path_factory.mktemp("acl")) as proc:
        yield proc


@pytest.fixture(scope="module")
def channel(broker: BrokerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(broker.endpoint) as ch:
        yield ch


def call(channel: grpc.Channel, service: str, method: Any, request: Any, metadata: Any) -> Any:
    """Any v1 method with ``request``: the reply (a list for server streams) or RpcError."""
    path = f"/{service}/{method.name}"
    ser = type(request).SerializeToString
    de = response_class(method).FromString
    if method.client_streaming:
        fn = channel.stream_stream(path, request_serializer=ser, response_deserializer=de)
        return list(fn(iter([request]), metadata=metadata, timeout=10))
    if method.server_streaming:
        stream = channel.unary_stream(path, request_serializer=ser, response_deserializer=de)
        return list(stream(request, metadata=metadata, timeout=10))
    unary = channel.unary_unary(path, request_serializer=ser, response_deserializer=de)
    return unary(request, metadata=metadata, timeout=10)


def refusal(fn: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value.code(), info.value.details()


# --- the table --------------------------------------------------------------------------------
def test_every_rpc_of_every_service_has_an_acl_entry() -> None:
    v2 = v2_service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    expected = {f"{s.full_name}/{m.name}" for s in (*SERVICES, v2) for m in s.methods}
    assert {s.full_name for s in (*SERVICES, v2)} == {V1_MESSAGING, V1_ADMIN, V2_MESSAGING}
    assert expected - set(ACCESS) == set(), "RPCs without an ACL entry"
    assert set(ACCESS) - expected == set(), "ACL entries of RPCs that do not exist"
    for name in expected:
        needs = ACCESS[name](empty_request(_method(name)))
        assert all(n.kind in ("topic", "group", "admin") for n in needs), name


def _method(path: str) -> Any:
    service, _, name = path.partition("/")
    v2 = v2_service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    for s in (*SERVICES, v2):
        if s.full_name == service:
            return s.methods_by_name[name]
    raise KeyError(path)


# --- signature and rules units ----------------------------------------------------------------
def test_signature_matches_the_official_clients_formula() -> None:
    # rocketmq-clients python Signature.sign: hexlify(hmac.new(sk, date, sha1).digest())
    expected = hmac.new(b"12345678", b"20261122T193000Z", hashlib.sha1).hexdigest()
    assert signature.sign("12345678", "20261122T193000Z") == expected
    md = signed(PRODUCER, date="20261122T193000Z")
    parsed = signature.parse(md)
    assert (parsed.access_key, parsed.date) == ("producer", "20261122T193000Z")
    assert signature.verify(parsed, PRODUCER[1])
    assert not signature.verify(parsed, "other")


def test_dates_outside_the_skew_window_are_refused() -> None:
    now = time.time()
    signature.check_date(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now - 60)), 900, now)
    for delta in (-86400, 86400):
        stale = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + delta))
        with pytest.raises(signature.AuthError, match="replayed"):
            signature.check_date(stale, 900, now)
    with pytest.raises(signature.AuthError, match="malformed"):
        signature.check_date("yesterday", 900, now)


def test_local_time_with_a_z_is_accepted_as_the_official_clients_send_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Python's client formats datetime.now() (local time) with a literal 'Z'."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # UTC+9, no daylight saving
    time.tzset()
    try:
        now = time.time()
        local = time.strftime("%Y%m%dT%H%M%SZ", time.localtime(now))
        signature.check_date(local, 900, now)
        three_hours_off = time.strftime("%Y%m%dT%H%M%SZ", time.localtime(now - 3 * 3600))
        with pytest.raises(signature.AuthError, match="replayed"):
            signature.check_date(three_hours_off, 900, now)
    finally:
        monkeypatch.undo()  # the TZ the process had
        time.tzset()


def test_rules_patterns_exact_then_longest_then_default() -> None:
    rules = acl_rules.parse_rules(
        "accounts:\n  - accessKey: a\n    secretKey: 12345678\n    defaultTopicPerm: SUB\n"
        "    topicPerms: ['orders-*=PUB', 'orders-eu-*=DENY', 'orders-eu-vip=PUB|SUB', '*=DENY']\n"
    )
    account = rules.accounts["a"]
    assert account.secret_key == "12345678"  # a YAML number is read as its text
    assert "12345678" not in repr(account)
    assert account.topic_perm("orders-us") == acl_rules.Perm.PUB
    assert account.topic_perm("orders-eu-x") == acl_rules.Perm.DENY
    assert account.topic_perm("orders-eu-vip") == acl_rules.Perm.ANY
    assert account.topic_perm("other") == acl_rules.Perm.DENY  # '*' beats the default


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("accounts: [{accessKey: a}]", "secretKey"),
        ("accounts: [{accessKey: a, secretKey: s, topicPerms: ['t=WRITE']}]", "unknown permission"),
        ("accounts: [{accessKey: a, secretKey: s, color: red}]", "unknown field"),
        ("accounts: [{accessKey: a, secretKey: s}, {accessKey: a, secretKey: t}]", "twice"),
        ("accounts: [{accessKey: a, secretKey: s, whiteRemoteAddress: 'x.y'}]", "account 'a'"),
        ("accounts: [", "not valid YAML"),
    ],
)
def test_a_bad_file_is_refused_naming_the_field_never_the_secret(text: str, error: str) -> None:
    with pytest.raises(acl_rules.AclFileError, match=error) as info:
        acl_rules.parse_rules(text)
    assert "secretKey: s" not in str(info.value)


# --- every RPC refused without a valid signature ----------------------------------------------
BAD_METADATA = {
    "none": None,
    "wrong-secret": lambda: signed(PRODUCER, secret="not-the-secret"),
    "unknown-user": lambda: signed(("ghost", "boo")),
    "anonymous": lambda: signed(("", "")),
    "day-old-date": lambda: signed(ADMIN, date=date_now(-86400)),
    "no-date": lambda: signed(ADMIN)[1:],
}


@pytest.mark.parametrize("case", sorted(BAD_METADATA))
def test_every_v1_rpc_is_unauthenticated_without_a_valid_signature(
    channel: grpc.Channel, case: str
) -> None:
    make = BAD_METADATA[case]
    for service, method in V1_METHODS:
        metadata = make() if callable(make) else None
        code, details = refusal(
            lambda service=service, method=method, metadata=metadata: call(
                channel, service, method, empty_request(method), metadata
            )
        )
        assert code == grpc.StatusCode.UNAUTHENTICATED, (method.name, code, details)
        assert details.startswith("unauthenticated:"), details
        # never which part of the signature was wrong, never a secret
        assert "secret" not in details.lower()
        assert PRODUCER[1] not in details and ADMIN[1] not in details


def test_every_v1_rpc_that_needs_a_permission_is_denied_to_a_user_without_it(
    channel: grpc.Channel,
) -> None:
    denied = 0
    for service, method in V1_METHODS:
        request = empty_request(method)
        needs = ACCESS[f"{service}/{method.name}"](request)
        if not needs:
            continue
        if method.client_streaming:  # refused per request, in the reply (the stream goes on)
            (reply,) = call(channel, service, method, request, signed(NOBODY))
            code = grpc.StatusCode.PERMISSION_DENIED
            assert reply.error.code == code.value[0], method.name
            details = reply.error.message
        else:
            code, details = refusal(
                lambda service=service, method=method, request=request: call(
                    channel, service, method, request, signed(NOBODY)
                )
            )
        assert code == grpc.StatusCode.PERMISSION_DENIED, (method.name, details)
        assert "user 'nobody'" in details, details
        assert f"{service}/{method.name}" in details, details
        need = needs[0]
        if need.kind == "admin":
            assert "needs admin" in details
        else:
            assert f"on {need.kind} ''" in details and need.perm.label.split("|")[0] in details
        denied += 1
    assert denied >= len(V1_METHODS) - 3  # all but Heartbeat, UnregisterClient, TransactionChecks


def test_permissions_name_user_resource_and_action_and_grant_what_they_say(
    channel: grpc.Channel,
) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    send = messaging_pb2.SendMessageRequest(topic=TOPIC, messages=[{"body": b"acl-1"}])
    code, details = refusal(lambda: stub.SendMessage(send, metadata=signed(CONSUMER)))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "user 'consumer' may not PUB on topic 'orders'" in details
    reply = stub.SendMessage(send, metadata=signed(PRODUCER))
    assert reply.results[0].status == messaging_pb2.SEND_OK
    # wildcard topicPerms: orders-* is PUB for the producer, other topics are not
    wild = messaging_pb2.SendMessageRequest(topic="orders-eu", messages=[{"body": b"x"}])
    assert stub.SendMessage(wild, metadata=signed(PRODUCER)).results[0].status == 1
    other = messaging_pb2.SendMessageRequest(topic="payments", messages=[{"body": b"x"}])
    code, details = refusal(lambda: stub.SendMessage(other, metadata=signed(PRODUCER)))
    assert "may not PUB on topic 'payments'" in details

    pull = messaging_pb2.PullMessageRequest(
        consumer_group=GROUP, topic=TOPIC, queue_id=reply.queue_id, max_messages=32
    )
    code, details = refusal(lambda: stub.PullMessage(pull, metadata=signed(PRODUCER)))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "user 'producer' may not SUB on topic 'orders'" in details
    pulled = stub.PullMessage(pull, metadata=signed(CONSUMER))
    assert [m.body for m in pulled.messages] == [b"acl-1"]
    other_group = messaging_pb2.PullMessageRequest(consumer_group="audit", topic=TOPIC)
    code, details = refusal(lambda: stub.PullMessage(other_group, metadata=signed(CONSUMER)))
    assert "user 'consumer' may not SUB on group 'audit'" in details
    # retry topics are the group's
    retry = messaging_pb2.PullMessageRequest(consumer_group=GROUP, topic=f"%RETRY%{GROUP}")
    stub.PullMessage(retry, metadata=signed(CONSUMER))


def test_send_stream_refuses_per_request_and_goes_on(channel: grpc.Channel) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    requests = [
        messaging_pb2.SendMessageRequest(topic=TOPIC, request_id=1, messages=[{"body": b"s1"}]),
        messaging_pb2.SendMessageRequest(topic="payments", request_id=2, messages=[{"body": b"x"}]),
        messaging_pb2.SendMessageRequest(topic=TOPIC, request_id=3, messages=[{"body": b"s3"}]),
    ]
    replies = {
        r.request_id: r for r in stub.SendMessageStream(iter(requests), metadata=signed(PRODUCER))
    }
    assert replies[1].results[0].status == messaging_pb2.SEND_OK
    assert replies[3].results[0].status == messaging_pb2.SEND_OK
    assert replies[2].error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert "user 'producer' may not PUB on topic 'payments'" in replies[2].error.message


def test_pull_stream_checks_each_pull_and_goes_on(channel: grpc.Channel) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    pulls = [
        messaging_pb2.PullMessageRequest(consumer_group=GROUP, topic=TOPIC, request_id=1),
        messaging_pb2.PullMessageRequest(consumer_group=GROUP, topic="payments", request_id=2),
    ]
    replies = {
        r.request_id: r for r in stub.PullMessageStream(iter(pulls), metadata=signed(CONSUMER))
    }
    assert not replies[1].HasField("error") and replies[1].status != 0
    assert replies[2].error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert "user 'consumer' may not SUB on topic 'payments'" in replies[2].error.message
    assert "PullMessageStream" in replies[2].error.message
    # A batch of pulls in one stream message: each is checked on its own.
    batch = messaging_pb2.PullMessageRequest(
        batch=[
            messaging_pb2.PullMessageRequest(consumer_group=GROUP, topic="payments", request_id=3),
            messaging_pb2.PullMessageRequest(consumer_group=GROUP, topic=TOPIC, request_id=4),
        ]
    )
    answered = {}
    for message in stub.PullMessageStream(iter([batch]), metadata=signed(CONSUMER)):
        for reply in message.batch or [message]:
            answered[reply.request_id] = reply
    assert answered[3].error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert not answered[4].HasField("error") and answered[4].status != 0


def test_admin_rpcs_need_an_admin(channel: grpc.Channel) -> None:
    from wharf.v1 import admin_pb2_grpc

    stub = admin_pb2_grpc.AdminServiceStub(channel)
    create = admin_pb2.CreateTopicRequest(
        name="acl-admin-made", read_queue_nums=2, write_queue_nums=2
    )
    code, details = refusal(lambda: stub.CreateTopic(create, metadata=signed(PRODUCER)))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "user 'producer' is not an admin" in details and "CreateTopic" in details
    assert stub.CreateTopic(create, metadata=signed(ADMIN)).name == "acl-admin-made"
    listed = stub.ListTopics(admin_pb2.ListTopicsRequest(), metadata=signed(ADMIN))
    assert "acl-admin-made" in {t.name for t in listed.topics}


def test_ip_allow_list_refuses_other_addresses(channel: grpc.Channel) -> None:
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    code, details = refusal(
        lambda: stub.QueryRoute(
            messaging_pb2.QueryRouteRequest(topic=TOPIC), metadata=signed(REMOTE_ONLY)
        )
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "user 'remote' may not connect from '127.0.0.1'" in details


def test_health_and_reflection_stay_open(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    assert (
        health.Check(health_pb2.HealthCheckRequest()).status
        == health_pb2.HealthCheckResponse.SERVING
    )


async def test_sdk_signs_every_call(broker: BrokerProcess) -> None:
    async with Producer(broker.endpoint, access_key=PRODUCER[0], secret_key=PRODUCER[1]) as p:
        sent = [await p.send(TOPIC, f"sdk-{i}".encode()) for i in range(5)]
    async with Producer(
        broker.endpoint, access_key=PRODUCER[0], secret_key="wrong", retry_times=0
    ) as bad:
        with pytest.raises(UnauthenticatedError, match="signature does not match"):
            await bad.send(TOPIC, b"never")
    async with Producer(
        broker.endpoint, access_key=CONSUMER[0], secret_key=CONSUMER[1], retry_times=0
    ) as c:
        with pytest.raises(PermissionDeniedError, match="may not PUB on topic 'orders'"):
            await c.send(TOPIC, b"never")
    got: list[bytes] = []
    async with PullConsumer(
        broker.endpoint, GROUP, access_key=CONSUMER[0], secret_key=CONSUMER[1]
    ) as consumer:
        for result in sent:
            from wharf.client import MessageQueue

            queue = MessageQueue(TOPIC, result.queue_id)
            pulled = await consumer.pull(queue, result.queue_offset, max_messages=1)
            got.extend(m.body for m in pulled.messages)
    assert got == [f"sdk-{i}".encode() for i in range(5)]
    async with Admin(broker.endpoint, access_key=ADMIN[0], secret_key=ADMIN[1]) as admin:
        status = await admin.broker_status()
        assert status.broker_name
    async with Admin(broker.endpoint, access_key=PRODUCER[0], secret_key=PRODUCER[1]) as admin:
        with pytest.raises(PermissionDeniedError, match="is not an admin"):
            await admin.broker_status()


# --- reload -----------------------------------------------------------------------------------
def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_file_changes_are_in_force_without_restart_and_broken_files_are_not(
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    write_acl(store)
    with (
        daemons.broker(tmp_path, settings=ACL_SETTINGS) as broker,
        grpc.insecure_channel(broker.endpoint) as channel,
    ):
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        route = messaging_pb2.QueryRouteRequest(topic="late")

        def allowed(account: tuple[str, str]) -> bool:
            try:
                stub.QueryRoute(route, metadata=signed(account))
                return True
            except grpc.RpcError:
                return False

        newcomer = ("newcomer", "n-secret")
        assert not allowed(newcomer)
        write_acl(
            store,
            ACL_YAML
            + f"  - accessKey: {newcomer[0]}\n    secretKey: {newcomer[1]}\n"
            + "    topicPerms: ['late=SUB']\n",
        )
        wait_for(lambda: allowed(newcomer))
        write_acl(store, "accounts: [ broken")
        wait_for(lambda: "not reloaded, keeping the previous rules" in broker.log())
        assert allowed(newcomer)  # previous rules still in force
        write_acl(store)  # the newcomer removed
        wait_for(lambda: not allowed(newcomer))
        assert "n-secret" not in broker.log() and PRODUCER[1] not in broker.log()


def test_acl_off_needs_no_credentials(daemons: Daemons, tmp_path: Path) -> None:
    write_acl(tmp_path / "store")
    with (
        daemons.broker(tmp_path, settings={"aclEnable": False}) as broker,
        grpc.insecure_channel(broker.endpoint) as channel,
    ):
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        reply = stub.SendMessage(
            messaging_pb2.SendMessageRequest(topic=TOPIC, messages=[{"body": b"open"}])
        )
        assert reply.results[0].status == messaging_pb2.SEND_OK


# --- fuzz -------------------------------------------------------------------------------------
HEADER_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
AUTH_VALUES = st.one_of(
    st.text(HEADER_CHARS, max_size=300),
    st.builds(
        lambda ak, headers, sig, sep: (
            f"MQv2-HMAC-SHA1 Credential={ak}{sep} SignedHeaders={headers}{sep} Signature={sig}"
        ),
        st.text(HEADER_CHARS, max_size=40),
        st.sampled_from(["x-mq-date-time", "", "X-MQ-DATE-TIME", "x-mq-date-time;host", "=="]),
        st.text("0123456789abcdefABCDEFxyz=,", max_size=60),
        st.sampled_from([",", ";", "", ",,", " ,"]),
    ),
    st.text(HEADER_CHARS, min_size=1000, max_size=1200),
)
DATES = st.one_of(
    st.just(None),
    st.text(HEADER_CHARS, max_size=30),
    st.builds(lambda d: date_now(d), st.floats(-1e9, 1e9, allow_nan=False)),
)


@pytest.mark.slow
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(auth=AUTH_VALUES, date=DATES, method=st.sampled_from(V1_METHODS))
def test_fuzzed_authorization_headers_never_crash_the_broker(
    broker: BrokerProcess, channel: grpc.Channel, auth: str, date: str | None, method: Any
) -> None:
    metadata: list[tuple[str, str]] = [("authorization", auth.strip() or "x")]
    if date is not None:
        metadata.append(("x-mq-date-time", date.strip() or "x"))
    service, m = method
    code, _ = refusal(lambda: call(channel, service, m, empty_request(m), tuple(metadata)))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert broker.proc is not None and broker.proc.poll() is None
    assert "Traceback" not in broker.log()


def test_spark_connector_options_sign_its_calls(broker: BrokerProcess) -> None:
    from wharf.client.spark.options import OptionError, parse_read_options
    from wharf.client.spark.rpc import BrokerCallError, BrokerRpc

    with grpc.insecure_channel(broker.endpoint) as channel:  # the topic exists, in any order
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        send = messaging_pb2.SendMessageRequest(topic=TOPIC, messages=[{"body": b"spark"}])
        stub.SendMessage(send, metadata=signed(PRODUCER), timeout=10)
    base = {"endpoints": broker.endpoint, "topic": TOPIC}
    opts = parse_read_options({**base, "accessKey": CONSUMER[0], "secretKey": CONSUMER[1]}, False)
    assert opts.credentials is not None and CONSUMER[1] not in repr(opts)
    with BrokerRpc(opts.endpoints, opts.timeout_s, opts.credentials) as rpc:
        assert [b.queue_id for b in rpc.queue_bounds(TOPIC)] == [0, 1, 2, 3]
        rpc.update_consumer_offset(GROUP, TOPIC, 0, 0)
    with pytest.raises(OptionError, match="go together"):
        parse_read_options({**base, "accessKey": "x"}, False)
    unsigned = parse_read_options(base, False)
    with (
        BrokerRpc(unsigned.endpoints, 5.0, unsigned.credentials) as rpc,
        pytest.raises(BrokerCallError, match="UNAUTHENTICATED"),
    ):
        rpc.queue_bounds(TOPIC)


def test_an_open_send_stream_follows_a_reload(daemons: Daemons, tmp_path: Path) -> None:
    import queue

    store = tmp_path / "store"
    write_acl(store)
    with (
        daemons.broker(tmp_path, settings=ACL_SETTINGS) as broker,
        grpc.insecure_channel(broker.endpoint) as channel,
    ):
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        requests: queue.Queue[Any] = queue.Queue()

        def request_iterator() -> Iterator[Any]:
            while (item := requests.get()) is not None:
                yield item

        def send(request_id: int) -> None:
            requests.put(
                messaging_pb2.SendMessageRequest(
                    topic=TOPIC, request_id=request_id, messages=[{"body": b"s"}]
                )
            )

        replies = stub.SendMessageStream(request_iterator(), metadata=signed(PRODUCER))
        send(1)
        assert next(replies).results[0].status == messaging_pb2.SEND_OK
        write_acl(store, ACL_YAML.replace(f'"{TOPIC}=PUB", ', ""))  # producer loses orders

        def refused_now() -> bool:
            unary = messaging_pb2.SendMessageRequest(topic=TOPIC, messages=[{"body": b"u"}])
            try:
                stub.SendMessage(unary, metadata=signed(PRODUCER))
                return False
            except grpc.RpcError:
                return True

        wait_for(refused_now)
        send(2)
        reply = next(replies)
        assert reply.request_id == 2
        assert "user 'producer' may not PUB on topic 'orders'" in reply.error.message
        requests.put(None)
        assert list(replies) == []


def _guard(rules: str) -> AclGuard:
    """An AclGuard holding ``rules`` (plain_acl.yml text), no file behind it."""
    guard = AclGuard(Path("/nonexistent/plain_acl.yml"), 900)
    guard._swap(acl_rules.parse_rules(rules))
    return guard


def test_global_and_per_user_address_allow_lists() -> None:
    from wharf.broker.frontends.acl_guard import Denied, peer_address

    guard = _guard(
        "globalWhiteRemoteAddresses: ['10.0.0.0/8', '192.168.0.*', '::1']\n"
        "accounts:\n  - {accessKey: a, secretKey: s}\n"
        "  - {accessKey: b, secretKey: t, whiteRemoteAddress: '10.1.*'}\n"
    )
    assert peer_address("ipv6:[::1]:5000") == "::1" and peer_address("unix:/x") == ""
    for peer in ("ipv4:10.9.9.9:1", "ipv4:192.168.0.7:2", "ipv6:[::1]:3"):
        assert guard.authenticate(signed(("a", "s")), peer).access_key == "a"
    with pytest.raises(Denied, match=r"may not connect from '127.0.0.1' \(globalWhite"):
        guard.authenticate(signed(("a", "s")), "ipv4:127.0.0.1:1")
    assert guard.authenticate(signed(("b", "t")), lambda: "ipv4:10.1.2.3:1").access_key == "b"
    with pytest.raises(Denied, match=r"user 'b' may not connect from '10.2.0.1' \(its white"):
        guard.authenticate(signed(("b", "t")), "ipv4:10.2.0.1:1")


def test_replication_needs_an_admin_account_from_an_allowed_address() -> None:
    """The replication handshake's account check (store/ha/auth.py via replication_secret)."""
    guard = _guard(
        "accounts:\n  - {accessKey: root, secretKey: s, admin: true}\n"
        "  - {accessKey: far, secretKey: t, admin: true, whiteRemoteAddress: '10.1.*'}\n"
        "  - {accessKey: app, secretKey: u}\n"
    )
    assert guard.replication_secret("root", "127.0.0.1") == "s"
    assert guard.replication_secret("far", "10.1.2.3") == "t"
    with pytest.raises(PermissionError, match=r"user 'far' may not connect from '127.0.0.1'"):
        guard.replication_secret("far", "127.0.0.1")
    with pytest.raises(PermissionError, match="is not an admin: replication needs admin"):
        guard.replication_secret("app", "127.0.0.1")
    with pytest.raises(PermissionError, match="'nobody' is unknown or haSecretKey"):
        guard.replication_secret("nobody", "127.0.0.1")


def test_a_send_of_several_parts_needs_pub_on_the_topic_of_each_part() -> None:
    """A request of several batches (``parts`` or columns) names no topic of its own: the
    ACL checks every batch's topic, for the unary call and per request of the stream."""
    part = messaging_pb2.SendMessageRequest
    columns = part(batch_topics=["b", "a", "b"], batch_sizes=[1, 1, 1], records=b"xyz")
    for request in (part(parts=[part(topic="a"), part(topic="b"), part(topic="a")]), columns):
        for method in ("SendMessage", "SendMessageStream"):
            needs = ACCESS[f"{V1_MESSAGING}/{method}"](request)
            assert sorted((n.kind, n.name, n.perm) for n in needs) == [
                ("topic", "a", acl_rules.Perm.PUB),
                ("topic", "b", acl_rules.Perm.PUB),
            ]
