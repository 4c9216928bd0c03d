"""The console and the Spark connector take the SDK's ``Connection``: the console's brokers and
their clients come from one value, and the connector's string options map onto one (what its
executors get pickled), with the former option fields still readable."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from wharf.client.channel import TlsConfig
from wharf.client.connection import Connection
from wharf.client.console.brokers import BrokerPool
from wharf.client.spark.options import (
    OptionError,
    parse_connection,
    parse_read_options,
    parse_write_options,
)

from tests.harness import BrokerProcess


def test_the_console_s_brokers_and_their_clients_come_from_one_connection() -> None:
    conn = Connection("127.0.0.1:1;127.0.0.1:2,127.0.0.1:1", access_key="ak", secret_key="sk")
    pool = BrokerPool(connection=conn, rpc_timeout_s=1.5)
    assert [b.endpoint for b in pool.brokers] == ["127.0.0.1:1", "127.0.0.1:2"]
    for broker in pool.brokers:
        dialed = conn.to(broker.endpoint)
        assert broker.connection == dialed
        assert broker.admin.connection == dialed and broker.pull.connection == dialed
        assert broker.admin.rpc_timeout_s == 1.5
    # The brokers listed apart from the connection still win (``wharf console --endpoints``).
    listed = BrokerPool(["127.0.0.1:3"], connection=conn)
    assert [b.connection for b in listed.brokers] == [conn.to("127.0.0.1:3")]


async def test_a_console_pool_made_from_a_connection_reaches_the_daemon(
    broker: BrokerProcess,
) -> None:
    pool = BrokerPool(connection=Connection(broker.endpoint))
    await pool.start()
    try:
        status = await pool.brokers[0].admin.broker_status()
        assert status.version
    finally:
        await pool.close()


def test_spark_options_map_onto_one_connection(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    options = {
        "endpoints": "10.0.0.1:8081, 10.0.0.2:8081",
        "topic": "orders",
        "AccessKey": "ak",  # option names are case-insensitive, as Spark's
        "secretKey": "sk",
        "caFile": str(ca),
    }
    conn = parse_connection(options)
    assert conn.endpoints == "10.0.0.1:8081;10.0.0.2:8081"
    assert (conn.access_key, conn.secret_key, conn.namesrv) == ("ak", "sk", None)
    assert isinstance(conn.tls, TlsConfig) and conn.tls.ca_pem == ca.read_bytes()
    read = parse_read_options(options, streaming=False)
    write = parse_write_options(options)
    assert read.connection == conn == write.connection
    # The former fields read through the connection.
    assert read.endpoints == ("10.0.0.1:8081", "10.0.0.2:8081")
    assert read.credentials is not None and read.credentials.secret_key == "sk"
    assert read.tls == conn.tls and write.namesrv is None and not write.namesrv_tls
    # Pickled to the executors whole, keys and PEM bytes included (the files stay behind).
    shipped = pickle.loads(pickle.dumps(read))
    assert shipped == read and shipped.connection.secret_key == "sk"


def test_spark_cluster_options_and_keys_resolved_on_the_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WHARF_ACCESS_KEY", raising=False)
    monkeypatch.delenv("WHARF_SECRET_KEY", raising=False)
    conn = parse_connection({"namesrv": "ns1:9876;ns2:9876", "namesrvTls": "true", "tls": "1"})
    assert conn.namesrv == "ns1:9876;ns2:9876" and conn.namesrv_tls
    assert conn.namesrv_tls_config == conn.tls is not None
    # No keys on the driver: "" (unsigned), not None (which an executor would read from
    # its own environment).
    assert (conn.access_key, conn.secret_key) == ("", "")
    assert parse_read_options({"namesrv": "ns1:9876", "topic": "t"}, False).credentials is None
    monkeypatch.setenv("WHARF_ACCESS_KEY", "env-ak")
    monkeypatch.setenv("WHARF_SECRET_KEY", "env-sk")
    assert parse_connection({"endpoints": "h:1"}).access_key == "env-ak"
    with pytest.raises(OptionError, match="accessKey"):
        parse_connection({"endpoints": "h:1", "accessKey": "only-one", "secretKey": ""})
    with pytest.raises(OptionError, match="endpoints"):
        parse_connection({"endpoints": "no-port"})
