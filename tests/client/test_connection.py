"""``Connection``: one value for how every SDK client dials (client/connection.py)."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest
from wharf.client import Admin, Connection, Producer, PullConsumer, PushConsumer, TlsConfig
from wharf.client.admin import Admin as AsyncAdmin
from wharf.client.auth import Credentials
from wharf.client.channel import DEFAULT_ENDPOINTS, tls_config
from wharf.client.cluster_admin import ClusterAdmin
from wharf.client.consumer.pull import PullStatus
from wharf.client.errors import InvalidArgumentError

from tests.harness import BrokerProcess
from tests.tls_certs import CertAuthority

NO_KEYS = {"WHARF_ACCESS_KEY": "", "WHARF_SECRET_KEY": ""}


@pytest.fixture
def pems(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, client certificate, client key) as PEM files."""
    ca = CertAuthority.create(tmp_path / "ca")
    client = ca.issue(tmp_path / "client", "client", server=False)
    return ca.cert, client.cert, client.key


def test_defaults_and_equality() -> None:
    assert Connection() == Connection(DEFAULT_ENDPOINTS)
    assert Connection().namesrv is None and Connection().tls is None
    assert Connection("h:1", access_key="a", secret_key="s") == Connection(
        "h:1", access_key="a", secret_key="s"
    )
    assert Connection("h:1") != Connection("h:2")
    assert Connection("h:1", access_key="a", secret_key="s") != Connection(
        "h:1", access_key="a", secret_key="t"
    )
    assert hash(Connection("h:1", namesrv="n:1")) == hash(Connection("h:1", namesrv="n:1"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        Connection().endpoints = "x:1"  # type: ignore[misc]
    # tls=True is the system roots, False / None plaintext; an empty namesrv is none.
    assert Connection(tls=True).tls == TlsConfig()  # type: ignore[arg-type]
    assert Connection(tls=False).tls is None  # type: ignore[arg-type]
    assert Connection(namesrv="").namesrv is None
    with pytest.raises(InvalidArgumentError):
        Connection(tls="yes")  # type: ignore[arg-type]


def test_secret_never_in_repr(pems: tuple[Path, Path, Path]) -> None:
    ca, cert, key = pems
    conn = Connection.build("h:1", access_key="ak", secret_key="SECRET-1", ca_file=ca,
                            cert_file=cert, key_file=key)  # fmt: skip
    text = repr(conn)
    assert "SECRET-1" not in text and "PRIVATE" not in text and "ak" in text
    assert pickle.loads(pickle.dumps(conn)) == conn  # Spark ships it to executors


def test_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keys left None are the environment's when a channel is opened, as before.
    conn = Connection("h:1")
    monkeypatch.setenv("WHARF_ACCESS_KEY", "env-ak")
    monkeypatch.setenv("WHARF_SECRET_KEY", "env-sk")
    assert conn.credentials == Credentials("env-ak", "env-sk")
    # "" is unsigned whatever the environment says; resolved() pins the environment's now.
    assert Connection("h:1", access_key="", secret_key="").credentials is None
    pinned = conn.resolved()
    assert (pinned.access_key, pinned.secret_key) == ("env-ak", "env-sk")
    monkeypatch.delenv("WHARF_ACCESS_KEY")
    monkeypatch.delenv("WHARF_SECRET_KEY")
    assert conn.credentials is None and pinned.credentials == Credentials("env-ak", "env-sk")
    assert conn.resolved() == Connection("h:1", access_key="", secret_key="")
    # One key without the other is refused, naming the variables.
    with pytest.raises(InvalidArgumentError, match="WHARF_SECRET_KEY"):
        _ = Connection("h:1", access_key="a").credentials


def test_from_env(pems: tuple[Path, Path, Path]) -> None:
    ca, cert, key = pems
    env = {
        "WHARF_ENDPOINTS": "broker:9000",
        "NAMESRV_ADDR": "ns1:9876;ns2:9876",
        "NAMESRV_TLS": "true",
        "WHARF_ACCESS_KEY": "ak",
        "WHARF_SECRET_KEY": "sk",
        "WHARF_CA_FILE": str(ca),
        "WHARF_CERT_FILE": str(cert),
        "WHARF_KEY_FILE": str(key),
    }
    conn = Connection.from_env(env)
    assert conn == Connection(
        "broker:9000",
        namesrv="ns1:9876;ns2:9876",
        access_key="ak",
        secret_key="sk",
        tls=TlsConfig(ca.read_bytes(), cert.read_bytes(), key.read_bytes()),
        namesrv_tls=True,
    )
    assert conn.namesrv_tls_config == conn.tls
    assert Connection.from_env({}) == Connection(access_key="", secret_key="")
    assert Connection.from_env({"WHARF_TLS": "1"}).tls == TlsConfig()


def test_tls_config_building(pems: tuple[Path, Path, Path], tmp_path: Path) -> None:
    ca, cert, key = pems
    conn = Connection.build("h:1", ca_file=ca)
    assert conn.tls == TlsConfig(ca_pem=ca.read_bytes())
    assert conn.namesrv_tls_config is None  # the NameServers: plaintext unless namesrv_tls
    mutual = Connection.build("h:1", ca_file=str(ca), cert_file=cert, key_file=key)
    assert mutual.tls == tls_config(False, ca, cert, key)
    assert mutual.tls is not None and mutual.tls.key_pem == key.read_bytes()
    assert Connection.build("h:1", tls=True).tls == TlsConfig()
    assert Connection.build("h:1").tls is None
    with pytest.raises(InvalidArgumentError, match="cert_file and key_file"):
        Connection.build("h:1", cert_file=cert)
    with pytest.raises(InvalidArgumentError, match="ca_file"):
        Connection.build("h:1", ca_file=tmp_path / "missing.pem")
    # to(): the same keys and TLS to one broker of a cluster.
    cluster = Connection.build(namesrv="n:1", access_key="a", secret_key="s", ca_file=ca,
                               namesrv_tls=True)  # fmt: skip
    assert cluster.to("b:2") == Connection("b:2", access_key="a", secret_key="s", tls=conn.tls)


def test_keyword_arguments_build_the_same_connection(pems: tuple[Path, Path, Path]) -> None:
    ca, cert, key = pems
    keywords = dict(access_key="ak", secret_key="sk", ca_file=str(ca), cert_file=str(cert),
                    key_file=str(key))  # fmt: skip
    expected = Connection.build("h:1", **keywords)  # type: ignore[arg-type]
    clients: list[Producer | PushConsumer | PullConsumer | Admin] = [
        Producer("h:1", **keywords),  # type: ignore[arg-type]
        PushConsumer("h:1", "g", **keywords),  # type: ignore[arg-type]
        PullConsumer("h:1", "g", **keywords),  # type: ignore[arg-type]
        Admin("h:1", **keywords),  # type: ignore[arg-type]
    ]
    for client in clients:
        assert client.connection == expected
        assert client.endpoints == "h:1" and client.tls == expected.tls  # attributes as before
    for client in (Producer(connection=expected), PullConsumer(connection=expected),
                   Admin(connection=expected), PushConsumer(connection=expected, group="g"),
                   Producer(expected)):  # fmt: skip
        assert client.connection is expected
    # Defaults: as before, 127.0.0.1:8081, plaintext, keys from the environment.
    assert Producer().connection == Connection() == PullConsumer().connection
    # A cluster, either way.
    ns = Connection.build(namesrv="n:1", namesrv_tls=True, tls=True)
    assert Producer(namesrv="n:1", namesrv_tls=True, tls=True).connection == ns
    admin = Admin(namesrv="n:1", namesrv_tls=True, tls=True)
    assert isinstance(admin, ClusterAdmin) and admin.connection == ns
    assert isinstance(Admin(connection=ns), ClusterAdmin)
    assert type(Admin(connection=ns.to("b:1"))) is AsyncAdmin


def test_connection_or_keywords_not_both() -> None:
    conn = Connection("h:1")
    with pytest.raises(InvalidArgumentError, match="not both"):
        Producer("h:2", connection=conn)
    with pytest.raises(InvalidArgumentError, match="access_key"):
        PullConsumer(connection=conn, access_key="a")
    with pytest.raises(InvalidArgumentError, match="tls"):
        Admin(connection=conn, tls=True)
    with pytest.raises(TypeError):
        Producer(endpoint="h:1")  # type: ignore[call-arg]


async def test_one_connection_for_producer_pull_consumer_and_admin(
    broker: BrokerProcess, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable, value in NO_KEYS.items():
        monkeypatch.setenv(variable, value)
    conn = Connection(broker.endpoint)
    async with (
        Admin(connection=conn) as admin,
        Producer(connection=conn) as producer,
        PullConsumer(connection=conn, group=f"{name}-g") as consumer,
    ):
        await admin.create_topic(name, queue_nums=1)
        sent = await producer.send(name, b"one connection")
        [queue] = await consumer.queues(name)
        result = await consumer.pull(queue, 0, max_messages=8)
        assert result.status == PullStatus.FOUND
        assert [m.body for m in result.messages] == [b"one connection"]
        assert result.messages[0].msg_id == sent.msg_id
        assert name in {t.name for t in (await admin.list_topics()).topics}


def test_cli_and_spark_build_one_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from wharf.client.cli.cluster_commands import connection_of_args
    from wharf.client.spark.options import parse_read_options
    from wharf.client.spark.rpc import BrokerRpc

    for variable, value in NO_KEYS.items():
        monkeypatch.setenv(variable, value)
    # A namespace made by a script, without main's args.connection: built once from its fields.
    args = argparse.Namespace(endpoints="h:1", namesrv=None, connect={"tls": True})
    conn = connection_of_args(args)
    assert conn == Connection("h:1", tls=TlsConfig()) and connection_of_args(args) is conn
    # Spark: keys resolved on the driver ("": unsigned on every executor), endpoints kept.
    opts = parse_read_options({"endpoints": "a:1,b:2", "topic": "t"}, streaming=False)
    assert opts.connection == Connection("a:1;b:2", access_key="", secret_key="")
    signed = parse_read_options(
        {"endpoints": "a:1", "topic": "t", "accessKey": "ak", "secretKey": "SECRET-2"}, False
    )
    assert signed.connection.credentials == Credentials("ak", "SECRET-2")
    assert "SECRET-2" not in repr(signed) and pickle.loads(pickle.dumps(signed)) == signed
    assert BrokerRpc.for_options(signed).connection is signed.connection
    # The old arguments of BrokerRpc build the same value.
    legacy = BrokerRpc(["a:1"], 5.0, Credentials("ak", "SECRET-2"))
    assert legacy.connection == Connection(access_key="ak", secret_key="SECRET-2")
