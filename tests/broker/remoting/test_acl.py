"""aclEnable on the remoting port (RocketMQ 4 ``AccessKey`` / ``Signature`` extFields), broker
and NameServer, with the accounts of the other protocols' ACL tests (tests/broker/acl_helpers.py).

- The signature as the 4.x clients compute it (``AclClientRPCHook``), computed here on its own:
  a good account's requests are served (sends, pulls, offsets, heartbeats, admin codes, a
  SecurityToken signed along); no AccessKey, an unknown key, a wrong secret, a request changed
  after signing (a field, the body), no Signature: 16 NO_PERMISSION "unauthenticated: ...".
- Permissions of the table every protocol shares: PUB to send, SUB on topic and group to pull
  and commit, the heartbeat's groups, admin for the admin codes, the allow-list, the topic of the
  half an END_TRANSACTION resolves: 16 "permission denied: ..." naming user, action, resource.
- A refusal leaves the connection usable; a refused oneway request gets no reply.
- The NameServer's remoting port checks the same way (its own accounts file).
- The real C++ client (PyPI ``rocketmq==0.4.4``): ``set_session_credentials`` on Producer and
  PushConsumer signs every request; with the right keys it sends and consumes, with a wrong
  secret or without PUB it cannot send, with a wrong secret its consumer receives nothing.
- ali-ons (``accessKey``/``secretKey``): sends and consumes with the right keys; a wrong secret
  gets the refusal's remark as its error.
- Every request code served by the broker or the NameServer has an entry in the ACL table.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from wharf.broker.frontends.remoting.handlers import RemotingHandlers
from wharf.broker.frontends.remoting.headers import properties_to_string
from wharf.broker.kit.acl import rpc_hook
from wharf.broker.kit.remoting.acl import ACCESS
from wharf.broker.kit.remoting.codes import (
    FLAG_ONEWAY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    RequestCode,
    ResponseCode,
)
from wharf.broker.kit.remoting.frame import RemotingCommand
from wharf.broker.namesrv.remoting import NamesrvRemoting
from wharf.broker.namesrv.routes import RouteTable
from wharf.store.codec.ids import decode_offset_msg_id

from tests.broker.acl_helpers import (
    ACL_SETTINGS,
    ACL_YAML,
    ADMIN,
    CONSUMER,
    CONSUMER2,
    GROUP,
    NOBODY,
    PRODUCER,
    REMOTE_ONLY,
    TOPIC,
    write_acl,
)
from tests.broker.remoting.test_cpp_client import RMQ4_PYTHON
from tests.broker.remoting.test_server import Client, _pull_fields, _send_fields
from tests.harness import BrokerProcess, Daemons

REMOTING = ["--remoting-listen", "127.0.0.1:0"]
CPP_SCRIPT = Path(__file__).with_name("cpp_acl_script.py")
NODE_DIR = Path(__file__).with_name("node")
DENIED = ResponseCode.NO_PERMISSION


def signature(fields: dict[str, str], body: bytes, secret: str) -> str:
    """AclClientRPCHook + AclUtils.combineRequestContent, written out on their own: the values
    of the extFields sorted by key (Signature left out), then the body; base64 HMAC-SHA1."""
    content = "".join(fields[k] for k in sorted(fields) if k != "Signature").encode() + body
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


def signed(
    account: tuple[str, str],
    fields: dict[str, Any] | None = None,
    body: bytes = b"",
    *,
    secret: str | None = None,
    token: str | None = None,
) -> dict[str, str]:
    out = {k: str(v) for k, v in (fields or {}).items()}
    out["AccessKey"] = account[0]
    if token is not None:
        out["SecurityToken"] = token
    out["Signature"] = signature(out, body, secret or account[1])
    return out


def _heartbeat_body(group: str, topic: str, client_id: str = "127.0.0.1@acl") -> bytes:
    consumer = {
        "groupName": group,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "expressionType": "TAG"}],
    }
    data = {"clientID": client_id, "consumerDataSet": [consumer], "producerDataSet": []}
    return json.dumps(data).encode()


# --- units ------------------------------------------------------------------------------------


def test_the_signature_is_the_java_hooks() -> None:
    fields = {"topic": "T", "queueId": "3", "a": "x", "AccessKey": "ak", "SecurityToken": "tk"}
    body = b"\x00body\xff"
    expected = signature(fields, body, "sk")
    assert rpc_hook.content(fields, body, 400) == b"aktkx3T" + body  # by key: A S a q t
    # Java's TreeMap orders keys by UTF-16 code units: U+1F600 (D83D DE00) before U+FFFD.
    assert rpc_hook.content({"\ufffd": "2", "\U0001f600": "1"}, b"", 400) == b"12"
    assert rpc_hook.signed_fields(
        {"topic": "T", "queueId": "3", "a": "x"}, body, "ak", "sk", 400, "tk"
    ) == {**fields, "Signature": expected}
    assert rpc_hook.verify({**fields, "Signature": expected}, body, 400, "sk")
    assert not rpc_hook.verify({**fields, "Signature": expected}, body + b"!", 400, "sk")
    assert not rpc_hook.verify({**fields, "Signature": expected}, body, 400, "other")
    assert not rpc_hook.verify(fields, body, 400, "sk")  # no Signature
    # Clients up to 4.9.3 added _UNIQUE_KEY_QUERY after signing: left out for them only.
    late = {**fields, "_UNIQUE_KEY_QUERY": "true", "Signature": expected}
    assert rpc_hook.verify(late, body, 399, "sk")
    assert not rpc_hook.verify(late, body, 400, "sk")


def test_every_served_request_code_has_an_acl_entry() -> None:
    handlers = object.__new__(RemotingHandlers)  # the table only: no broker needed
    handlers.transactions = mock.MagicMock()
    handlers.locks = mock.MagicMock()
    handlers.admin = mock.MagicMock()
    handlers.calls = mock.MagicMock()
    served = set(handlers.table()) | set(NamesrvRemoting(RouteTable()).handlers())
    missing = sorted(code for code in served if code not in ACCESS)
    assert not missing, f"request codes served without an ACL entry: {missing}"


# --- the broker ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    root = tmp_path_factory.mktemp("remoting-acl")
    write_acl(root / "store")
    return module_daemons.broker(root, settings=ACL_SETTINGS, extra_args=REMOTING)


async def _connect(address: str) -> Client:
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    return Client(reader, writer)


async def _call(
    client: Client,
    account: tuple[str, str],
    code: int,
    fields: Any = None,
    body: bytes = b"",
    secret: str | None = None,
) -> RemotingCommand:
    return await client.call(code, signed(account, fields, body, secret=secret), body)


async def test_signed_requests_of_accounts_with_the_permissions_are_served(
    client: Client,
) -> None:
    sent = await _call(client, PRODUCER, RequestCode.SEND_MESSAGE, _send_fields(TOPIC, 0), b"hi")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    # A SecurityToken is signed along (and not checked, as RocketMQ's plain ACL).
    fields = signed(PRODUCER, _send_fields("orders-eu", 1), b"tok", token="session-1")
    assert (await client.call(RequestCode.SEND_MESSAGE, fields, b"tok")).code == 0
    beat = _heartbeat_body(GROUP, TOPIC)
    assert (await _call(client, CONSUMER, RequestCode.HEART_BEAT, None, beat)).code == 0
    pulled = await _call(client, CONSUMER, RequestCode.PULL_MESSAGE, _pull_fields(TOPIC, 0, 0, 0)
                         | {"consumerGroup": GROUP})  # fmt: skip
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    offset = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "commitOffset": 1}
    assert (await _call(client, CONSUMER, RequestCode.UPDATE_CONSUMER_OFFSET, offset)).code == 0
    query = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0}
    queried = await _call(client, CONSUMER, RequestCode.QUERY_CONSUMER_OFFSET, query)
    assert (queried.code, queried.ext_fields.get("offset")) == (0, "1")
    route = await _call(client, CONSUMER, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    assert route.code == 0, route.remark
    # Admins: every code, the admin ones included.
    topics = await _call(client, ADMIN, RequestCode.GET_ALL_TOPIC_CONFIG)
    assert topics.code == 0 and TOPIC in json.loads(topics.body)["topicConfigTable"]
    pulled = await _call(client, ADMIN, RequestCode.PULL_MESSAGE, _pull_fields(TOPIC, 0, 0, 0))
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    # Another account of the group may neither unregister the client nor take over its id.
    leave = {"clientID": "127.0.0.1@acl", "consumerGroup": GROUP}
    refused = await _call(client, CONSUMER2, RequestCode.UNREGISTER_CLIENT, leave)
    assert refused.code == ResponseCode.NO_PERMISSION
    assert "may not act for client '127.0.0.1@acl'" in refused.remark
    assert (await _call(client, CONSUMER2, RequestCode.HEART_BEAT, None, beat)).code != 0
    # Leave the group (SUB on it): the C++ consumer below is then its only member.
    assert (await _call(client, CONSUMER, RequestCode.UNREGISTER_CLIENT, leave)).code == 0


async def test_refusals_are_16_with_the_reason_and_the_connection_goes_on(
    client: Client,
) -> None:
    send = _send_fields(TOPIC, 0)
    body = b"payload"
    good = signed(PRODUCER, send, body)
    tampered_field = {**good, "queueId": "1"}
    cases: list[tuple[str, dict[str, str], bytes, int, str]] = [
        ("unsigned", {k: str(v) for k, v in send.items()}, body, RequestCode.SEND_MESSAGE,
         "unauthenticated: no credentials"),
        ("unknown key", signed(("ghost", "x"), send, body), body, RequestCode.SEND_MESSAGE,
         "unauthenticated: access key 'ghost' is unknown or its signature does not match"),
        ("wrong secret", signed(PRODUCER, send, body, secret="guess"), body,
         RequestCode.SEND_MESSAGE,
         "unauthenticated: access key 'producer' is unknown or its signature does not match"),
        ("body changed", good, b"other", RequestCode.SEND_MESSAGE, "signature does not match"),
        ("field changed", tampered_field, body, RequestCode.SEND_MESSAGE,
         "signature does not match"),
        ("no signature", {k: v for k, v in good.items() if k != "Signature"}, body,
         RequestCode.SEND_MESSAGE, "carries no Signature"),
        ("no permission", signed(NOBODY, send, body), body, RequestCode.SEND_MESSAGE,
         "permission denied: user 'nobody' may not PUB on topic 'orders'"),
        ("SUB only", signed(CONSUMER, send, body), body, RequestCode.SEND_MESSAGE,
         "permission denied: user 'consumer' may not PUB on topic 'orders' (SEND_MESSAGE; "
         "granted: SUB)"),
        ("PUB only", signed(PRODUCER, _pull_fields(TOPIC, 0, 0, 0)), b"",
         RequestCode.PULL_MESSAGE, "user 'producer' may not SUB on topic 'orders'"),
        ("other group", signed(CONSUMER, _pull_fields(TOPIC, 0, 0, 0)), b"",
         RequestCode.PULL_MESSAGE, "user 'consumer' may not SUB on group 'CG'"),
        ("admin code", signed(PRODUCER, {"topic": "made"}), b"",
         RequestCode.UPDATE_AND_CREATE_TOPIC, "user 'producer' is not an admin"),
        ("admin code", signed(CONSUMER), b"", RequestCode.GET_BROKER_RUNTIME_INFO,
         "user 'consumer' is not an admin"),
        ("heartbeat group", signed(CONSUMER, None, _heartbeat_body("strangers", TOPIC)),
         _heartbeat_body("strangers", TOPIC), RequestCode.HEART_BEAT,
         "user 'consumer' may not SUB on group 'strangers'"),
        ("retry topic", signed(PRODUCER, {"topic": "%RETRY%billing"}), b"",
         RequestCode.GET_ROUTEINFO_BY_TOPIC, "may not SUB on group 'billing'"),
        ("allow-list", signed(REMOTE_ONLY), b"", RequestCode.GET_BROKER_RUNTIME_INFO,
         "user 'remote' may not connect from '127.0.0.1'"),
    ]  # fmt: skip
    for name, fields, sent_body, code, remark in cases:
        reply = await client.call(code, fields, sent_body)
        assert reply.code == DENIED, (name, reply.code, reply.remark)
        assert remark in (reply.remark or ""), (name, reply.remark)
    # A refused oneway request gets no reply: the next reply is the next request's.
    client.send(RequestCode.SEND_MESSAGE, signed(NOBODY, send, body), body, flag=FLAG_ONEWAY)
    after = await _call(client, PRODUCER, RequestCode.SEND_MESSAGE, send, body)
    assert after.opaque == client.opaque and after.code == ResponseCode.SUCCESS, after.remark
    # Nothing a refused request asked happened (the topic creation).
    stats = await _call(client, ADMIN, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "made"})
    assert stats.code == ResponseCode.TOPIC_NOT_EXIST


async def test_end_transaction_needs_pub_on_the_topic_of_its_half(client: Client) -> None:
    props = {"TRAN_MSG": "true", "PGROUP": "PG_ACL", "UNIQ_KEY": "ACL-TX-1"}
    fields = _send_fields(TOPIC, 0, properties_to_string(props))
    fields.update(producerGroup="PG_ACL", sysFlag=TRANSACTION_PREPARED_TYPE)
    half = await _call(client, PRODUCER, RequestCode.SEND_MESSAGE, fields, b"tx")
    assert half.code == ResponseCode.SUCCESS, half.remark
    end = {
        "producerGroup": "PG_ACL",
        "tranStateTableOffset": half.ext_fields["queueOffset"],
        "commitLogOffset": decode_offset_msg_id(half.ext_fields["msgId"])[1],
        "commitOrRollback": TRANSACTION_COMMIT_TYPE,
        "fromTransactionCheck": "false",
        "msgId": "ACL-TX-1",
        "transactionId": "ACL-TX-1",
    }
    refused = await _call(client, CONSUMER, RequestCode.END_TRANSACTION, end)
    assert refused.code == DENIED
    assert "user 'consumer' may not PUB on topic 'orders' (END_TRANSACTION" in (
        refused.remark or ""
    )
    committed = await _call(client, PRODUCER, RequestCode.END_TRANSACTION, end)
    assert committed.code == ResponseCode.SUCCESS, committed.remark


def test_the_broker_starts_with_acl_and_remoting(broker: BrokerProcess) -> None:
    log = broker.log()
    assert "with ACL" in log and "Traceback" not in log


# --- the NameServer ---------------------------------------------------------------------------


async def test_the_name_servers_remoting_port_checks_the_same_way(
    daemons: Daemons, tmp_path: Path
) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    settings = {"aclEnable": True, "aclFile": str(acl), "remotingListen": "127.0.0.1:0"}
    with daemons.namesrv(tmp_path / "ns", settings) as ns:
        remoting = json.loads((ns.root / "ready.json").read_text())["remoting"]
        client = await _connect(remoting)
        try:
            unsigned = await client.call(RequestCode.GET_BROKER_CLUSTER_INFO)
            assert unsigned.code == DENIED and "no credentials" in (unsigned.remark or "")
            info = await _call(client, NOBODY, RequestCode.GET_BROKER_CLUSTER_INFO)
            assert info.code == ResponseCode.SUCCESS, info.remark
            # The route of a topic the account may use: past the ACL, no broker holds it.
            route = await _call(
                client, CONSUMER, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}
            )
            assert route.code == ResponseCode.TOPIC_NOT_EXIST, route.remark
            other = await _call(
                client, CONSUMER, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "x"}
            )
            assert other.code == DENIED and "may not PUB or SUB on topic 'x'" in (
                other.remark or ""
            )
            listing = await _call(client, CONSUMER, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            assert listing.code == DENIED and "not an admin" in (listing.remark or "")
            wrong = await _call(client, ADMIN, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                                secret="nope")  # fmt: skip
            assert wrong.code == DENIED and "signature does not match" in (wrong.remark or "")
            ok = await _call(client, ADMIN, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            assert ok.code == ResponseCode.SUCCESS, ok.remark
        finally:
            client.writer.close()
        assert "Traceback" not in ns.log()


# --- the C++ client -----------------------------------------------------------------------------


def run_cpp(
    broker: BrokerProcess, home: Path, command: str, account: tuple[str, str], **args: Any
) -> dict[str, Any]:
    if not RMQ4_PYTHON.exists():
        pytest.skip("the RocketMQ 4.x C++ client's venv is missing: run `make rmq4-client`")
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home)}  # the library logs to ~/logs/rocketmq-cpp/
    env.pop("PYTHONPATH", None)
    args = {**args, "access_key": account[0], "secret_key": account[1]}
    proc = subprocess.run(
        [str(RMQ4_PYTHON), str(CPP_SCRIPT), broker.remoting_endpoint, command, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_the_cpp_client_with_session_credentials(broker: BrokerProcess, tmp_path: Path) -> None:
    home = tmp_path / "home"
    specs = [{"body": f"cpp-{i}", "tags": "T", "keys": f"k{i}", "props": {"p": str(i)}}
             for i in range(4)]  # fmt: skip
    sent = run_cpp(broker, home, "send", PRODUCER, group="PG_CPP", topic=TOPIC, messages=specs)
    assert sent["error"] is None and [r["status"] for r in sent["sent"]] == [0] * 4
    # A wrong secret: every request refused (the route first), so no send.
    wrong = run_cpp(broker, home, "send", (PRODUCER[0], "wrong"), group="PG_CPP", topic=TOPIC,
                    messages=specs[:1], timeout_ms=3000)  # fmt: skip
    assert wrong["error"] is not None and not wrong["sent"]
    # SUB only: the send is refused (the client reports it as it can).
    sub_only = run_cpp(broker, home, "send", CONSUMER, group="PG_CPP", topic=TOPIC,
                       messages=specs[:1], timeout_ms=3000)  # fmt: skip
    assert sub_only["error"] is not None and not sub_only["sent"]
    # The consumer with SUB on the topic and its group gets all four, exactly as sent.
    got = run_cpp(broker, home, "consume", CONSUMER, group=GROUP, topic=TOPIC,
                  bodies=[s["body"] for s in specs], timeout=40, props=["p"])  # fmt: skip
    by_body = {m["body"]: m for m in got["received"]}
    assert {s["body"] for s in specs} <= set(by_body)
    for spec in specs:
        message = by_body[spec["body"]]
        assert (message["tags"], message["keys"], message["props"]) == (
            spec["tags"], spec["keys"], spec["props"],
        )  # fmt: skip
    # A wrong secret: the consumer receives nothing.
    nothing = run_cpp(broker, home, "consume", (CONSUMER[0], "wrong"), group=GROUP, topic=TOPIC,
                      bodies=["never"], timeout=4)  # fmt: skip
    assert nothing["received"] == []
    log = broker.log()
    assert "refused: remoting" in log and "Traceback" not in log


# --- ali-ons ------------------------------------------------------------------------------------


def run_node(broker: BrokerProcess, home: Path, scenario: str, **args: Any) -> dict[str, Any]:
    """scenario.js (test_node_client.py's) with ``accessKey``/``secretKey``: ali-ons signs every
    request (AccessKey, OnsChannel, Signature). The JSON result, its ``error`` included."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
        pytest.skip("ali-ons is not installed (make tests/broker/remoting/node/node_modules/...)")
    home.mkdir(exist_ok=True)
    proc = subprocess.run(
        [node, str(NODE_DIR / "scenario.js"), broker.remoting_endpoint, scenario, json.dumps(args)],
        capture_output=True,
        text=True,
        cwd=NODE_DIR,
        env={**os.environ, "HOME": str(home)},
        timeout=60,
        check=False,
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_ali_ons_with_access_keys(broker: BrokerProcess, tmp_path: Path) -> None:
    home = tmp_path / "home"
    keys = {"accessKey": PRODUCER[0], "secretKey": PRODUCER[1]}
    spec = {"body": "ons-1", "tags": "A", "keys": ["k1"], "props": {"p": "1"}}
    sent = run_node(broker, home, "send", group="PG_ONS", topic=TOPIC, messages=[spec], **keys)
    assert sent["error"] is None and sent["sent"][0]["sendStatus"] == "SEND_OK", sent
    wrong = run_node(broker, home, "send", group="PG_ONS", topic=TOPIC, messages=[spec],
                     accessKey=PRODUCER[0], secretKey="wrong")  # fmt: skip
    assert "unauthenticated: access key 'producer'" in str(wrong["error"]), wrong
    got = run_node(broker, home, "consume", group=GROUP, topic=TOPIC, bodies=["ons-1"],
                   settleMs=200, accessKey=CONSUMER[0], secretKey=CONSUMER[1])  # fmt: skip
    assert got["error"] is None, got
    message = next(m for m in got["received"] if m["body"] == "ons-1")
    assert (message["tags"], message["keys"], message["props"]["p"]) == ("A", "k1", "1")
