"""TLS on the remoting port, broker and NameServer: with ``tlsEnable`` (the broker's listen port
TLS-only, as its wire port) the remoting port speaks TLS only, with the daemon's certificate
(the generated development pair here). The suite's raw client over ``ssl`` is served (routes,
a send and its pull, signed requests with aclEnable as well); a plaintext client gets no answer
and its connection is closed. The C++ client of PyPI ``rocketmq==0.4.4`` has no TLS option:
it is not tried here."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path

import pytest
from wharf.broker.kit.remoting import tls as remoting_tls
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.broker.kit.remoting.frame import RemotingCommand, encode
from wharf.broker.kit.tls.material import read_server_tls_blocking
from wharf.broker.kit.tls.reload import CertificateReloader

from tests.broker.acl_helpers import ACL_SETTINGS, PRODUCER, TOPIC, write_acl
from tests.broker.remoting.test_acl import signed
from tests.broker.remoting.test_server import Client, _pull_fields, _send_fields
from tests.harness import Daemons
from tests.tls_certs import CertAuthority

REMOTING = ["--remoting-listen", "127.0.0.1:0"]


async def _tls_client(address: str, ca: Path) -> Client:
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(ca))
    reader, writer = await asyncio.open_connection(host, int(port), ssl=context)
    return Client(reader, writer)


async def _plaintext_is_closed(address: str) -> None:
    """A plaintext remoting request to a TLS port: no reply, the connection closed."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(encode(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, opaque=1)))
        await writer.drain()
        try:
            data = await asyncio.wait_for(reader.read(65536), 15)
        except ConnectionResetError:
            data = b""
        # A TLS alert at most (the handshake failed), never a remoting frame.
        assert data == b"" or data[:1] == b"\x15", data[:64]
        if data:
            assert await asyncio.wait_for(reader.read(65536), 15) == b""
    finally:
        writer.close()


def test_the_brokers_remoting_port_is_tls_with_tls_enable(daemons: Daemons, tmp_path: Path) -> None:
    write_acl(tmp_path / "store")  # aclEnable too: the signature over TLS
    settings = {**ACL_SETTINGS, "tlsEnable": True}
    with daemons.broker(tmp_path, settings=settings, extra_args=REMOTING) as broker:
        ca = broker.store_dir / "config" / "tls" / "broker.crt"

        async def over_tls() -> None:
            client = await _tls_client(broker.remoting_endpoint, ca)
            try:
                fields = _send_fields(TOPIC, 1)
                sent = await client.call(
                    RequestCode.SEND_MESSAGE, signed(PRODUCER, fields, b"s"), b"s"
                )
                assert sent.code == ResponseCode.SUCCESS, sent.remark
                unsigned = await client.call(RequestCode.SEND_MESSAGE, fields, b"s")
                assert unsigned.code == ResponseCode.NO_PERMISSION
                pull = _pull_fields(TOPIC, 1, 0, 0)
                got = await client.call(
                    RequestCode.PULL_MESSAGE, signed(("root", "root-secret"), pull)
                )
                assert got.code == ResponseCode.SUCCESS and b"s" in got.body, got.remark
            finally:
                client.writer.close()
            await _plaintext_is_closed(broker.remoting_endpoint)

        asyncio.run(over_tls())
        log = broker.log()
        assert "remoting (RocketMQ 4.x) on" in log and "over TLS with ACL" in log
        assert "Traceback" not in log


def test_the_name_servers_remoting_port_is_tls_with_tls_enable(
    daemons: Daemons, tmp_path: Path
) -> None:
    cert, key = tmp_path / "ns" / "ns.crt", tmp_path / "ns" / "ns.key"
    settings = {"tlsEnable": True, "tlsCertPath": str(cert), "tlsKeyPath": str(key),
                "remotingListen": "127.0.0.1:0"}  # fmt: skip
    with daemons.namesrv(tmp_path / "ns", settings) as ns:
        remoting = json.loads((ns.root / "ready.json").read_text())["remoting"]

        async def over_tls() -> None:
            client = await _tls_client(remoting, cert)
            try:
                info = await client.call(RequestCode.GET_BROKER_CLUSTER_INFO)
                assert info.code == ResponseCode.SUCCESS, info.remark
                route = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "none"})
                assert route.code == ResponseCode.TOPIC_NOT_EXIST
            finally:
                client.writer.close()
            await _plaintext_is_closed(remoting)

        asyncio.run(over_tls())
        assert "Traceback" not in ns.log()


def test_plaintext_without_tls_enable(daemons: Daemons, tmp_path: Path) -> None:
    """tlsEnable off: the remoting port is plaintext, a TLS client fails its handshake."""
    with daemons.broker(tmp_path, extra_args=REMOTING) as broker:

        async def check() -> None:
            host, _, port = broker.remoting_endpoint.rpartition(":")
            context = ssl.create_default_context()
            with pytest.raises((ssl.SSLError, ConnectionError)):
                await asyncio.wait_for(asyncio.open_connection(host, int(port), ssl=context), 15)

        asyncio.run(check())


async def test_the_name_servers_context_follows_a_replaced_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """broker/kit/remoting/tls.py (the NameServer's remoting TLS): a certificate replaced on disk is
    served from the next handshake past CHECK_S (0 here); a pair that cannot serve keeps the
    last."""
    ca = CertAuthority.create(tmp_path / "ca")
    cert, key = tmp_path / "srv.crt", tmp_path / "srv.key"

    def install(name: str) -> None:
        issued = ca.issue(tmp_path / name, name, server=True)
        for source, target in ((issued.key, key), (issued.cert, cert)):
            temporary = target.with_suffix(".tmp")
            temporary.write_bytes(source.read_bytes())
            temporary.replace(target)  # atomically, as cert-manager does

    install("first")
    reloader = CertificateReloader(read_server_tls_blocking(cert, key, None))
    monkeypatch.setattr(remoting_tls, "CHECK_S", 0.0)
    server = await asyncio.start_server(
        lambda r, w: w.close(), "127.0.0.1", 0, ssl=remoting_tls.server_context(reloader.refreshed)
    )
    port = server.sockets[0].getsockname()[1]

    async def served_name() -> str:
        context = ssl.create_default_context(cafile=str(ca.cert))
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        subject = dict(pair[0] for pair in writer.get_extra_info("peercert")["subject"])
        writer.close()
        return str(subject["commonName"])

    try:
        assert await served_name() == "first"
        install("second")
        assert await served_name() == "second"
        key.write_text("not a key")  # cannot serve: the last pair stays
        assert await served_name() == "second"
    finally:
        server.close()
        await server.wait_closed()
