"""TLS through the real daemon (tlsEnable, tlsListen, tlsClientAuth): the generated development
certificate, the SDK, CLI, Spark connector RPCs and wharf-probe over TLS, plaintext refused by a
TLS port, mutual TLS refusing a client without a certificate, and the settings' errors."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from wharf.broker.kit.tls.certs import fingerprint_sha256
from wharf.broker.settings import ConfigError, load_settings
from wharf.client import (
    Admin,
    InvalidArgumentError,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    UnavailableError,
)
from wharf.client.channel import tls_config
from wharf.client.consumer.pull import PullStatus
from wharf.client.spark.options import OptionError, parse_read_options
from wharf.client.spark.rpc import BrokerCallError, BrokerRpc

from tests.harness import REPO_ROOT, BrokerProcess, Daemons
from tests.tls_certs import CertAuthority

SMALL = {
    "mappedFileSizeCommitLog": 16 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 6000 * 20,
    "maxHashSlotNum": 10_000,
    "maxIndexNum": 40_000,
    "defaultTopicQueueNums": 4,
}


def generated_cert(broker: BrokerProcess) -> Path:
    return broker.store_dir / "config" / "tls" / "broker.crt"


def health(channel: grpc.Channel, timeout: float = 5.0) -> str:
    reply = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(), timeout=timeout
    )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def refused(channel: grpc.Channel) -> grpc.StatusCode:
    """The status of a health check that must fail (the handshake does not complete)."""
    with pytest.raises(grpc.RpcError) as caught:
        health(channel, timeout=3.0)
    return caught.value.code()  # type: ignore[attr-defined, no-any-return]


def secure(endpoint: str, ca: Path, cert: Path | None = None, key: Path | None = None):
    creds = grpc.ssl_channel_credentials(
        ca.read_bytes(),
        key.read_bytes() if key else None,
        cert.read_bytes() if cert else None,
    )
    return grpc.secure_channel(endpoint, creds)


async def pull_everything(consumer: PullConsumer, topic: str) -> list[ReceivedMessage]:
    out: list[ReceivedMessage] = []
    for queue in await consumer.queues(topic):
        offset = 0
        while True:
            result = await consumer.pull(queue, offset, max_messages=256)
            out.extend(result.messages)
            if result.status != PullStatus.FOUND:
                break
            offset = result.next_begin_offset
    return out


@pytest.fixture(scope="module")
def tls_broker(
    module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """tlsEnable without tlsListen: listen is TLS-only, with the generated development pair."""
    root = tmp_path_factory.mktemp("tls-broker")
    with module_daemons.broker(root, settings={**SMALL, "tlsEnable": True}) as broker:
        yield broker


def test_first_start_generates_a_development_pair_and_logs_its_fingerprint(
    tls_broker: BrokerProcess,
) -> None:
    cert_path = generated_cert(tls_broker)
    key_path = cert_path.with_name("broker.key")
    assert key_path.stat().st_mode & 0o777 == 0o600
    assert not list(cert_path.parent.glob("*.tmp"))
    cert, ca = x509.load_pem_x509_certificates(cert_path.read_bytes())
    # The server certificate (CA:FALSE) and the one-off CA that signed it (its key discarded).
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.issuer == ca.subject and cert.subject != ca.subject
    cert.verify_directly_issued_by(ca)
    assert not list(cert_path.parent.glob("*ca*.key"))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} >= {"127.0.0.1", "::1"}
    fingerprint = fingerprint_sha256(cert_path.read_bytes())
    assert re.fullmatch(r"([0-9A-F]{2}:){31}[0-9A-F]{2}", fingerprint)
    log = tls_broker.log()
    assert f"SHA-256 fingerprint {fingerprint}" in log
    assert "generated a development certificate" in log
    # The ready file: the listen port is the TLS port, there is no plaintext one.
    info = json.loads((tls_broker.root / "ready.json").read_text())
    assert info["tls"] == info["grpc"] == tls_broker.endpoint
    assert info["plaintext"] is None
    assert tls_broker.tls_endpoint == tls_broker.endpoint and tls_broker.plaintext_endpoint == ""


async def test_sdk_sends_and_receives_over_tls_trusting_the_generated_certificate(
    tls_broker: BrokerProcess,
) -> None:
    ca = str(generated_cert(tls_broker))
    topic = "tls-orders"
    async with Admin(tls_broker.endpoint, ca_file=ca) as admin:
        await admin.create_topic(topic, queue_nums=2)
    async with Producer(tls_broker.endpoint, ca_file=ca) as producer:
        sent = [await producer.send(topic, f"m{i}".encode(), tags="T") for i in range(20)]
        big = await producer.send(topic, b"x" * 300_000)  # several TLS records
    async with PullConsumer(tls_broker.endpoint, "tls-reader", ca_file=ca) as consumer:
        got = await pull_everything(consumer, topic)
    assert sorted(m.msg_id for m in got) == sorted([s.msg_id for s in sent] + [big.msg_id])
    assert {m.body for m in got if m.msg_id != big.msg_id} == {f"m{i}".encode() for i in range(20)}

    seen: list[bytes] = []

    async def handler(message: ReceivedMessage) -> None:
        seen.append(message.body)

    push = PushConsumer(
        tls_broker.endpoint, "tls-push", handler=handler, consume_from_where="FIRST",
        rebalance_interval_s=0.5, heartbeat_interval_s=0.2, long_poll_ms=500, ca_file=ca,
    )  # fmt: skip
    push.subscribe(topic)
    async with push:
        for _ in range(200):
            if len(seen) >= 21:
                break
            await asyncio.sleep(0.05)
    assert len(seen) == 21


async def test_plaintext_and_untrusting_clients_are_refused_by_the_tls_port(
    tls_broker: BrokerProcess, tmp_path: Path
) -> None:
    assert refused(grpc.insecure_channel(tls_broker.endpoint)) == grpc.StatusCode.UNAVAILABLE
    # A client trusting another CA fails verification.
    other = CertAuthority.create(tmp_path / "other")
    assert refused(secure(tls_broker.endpoint, other.cert)) == grpc.StatusCode.UNAVAILABLE
    async with Producer(tls_broker.endpoint, send_timeout=2.0, retry_times=0) as producer:
        with pytest.raises(UnavailableError):
            await producer.send("tls-orders", b"plaintext")
    # The health service and reflection answer a TLS client without any credentials.
    channel = secure(tls_broker.endpoint, generated_cert(tls_broker))
    assert health(channel) == "SERVING"
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = {s.name for reply in replies for s in reply.list_services_response.service}
    assert "wharf.v1.MessagingService" in names and "apache.rocketmq.v2.MessagingService" in names


def test_client_tls_arguments_fail_early_with_the_argument_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="ca_file: cannot read"):
        Producer("127.0.0.1:1", ca_file=str(tmp_path / "missing.pem"))
    (tmp_path / "not.pem").write_text("hello")
    with pytest.raises(InvalidArgumentError, match=r"cert_file: .* is not a PEM file"):
        tls_config(cert_file=tmp_path / "not.pem", key_file=tmp_path / "not.pem")
    with pytest.raises(InvalidArgumentError, match="go together"):
        PullConsumer("127.0.0.1:1", cert_file=str(tmp_path / "not.pem"))
    assert tls_config() is None and tls_config(tls=True) is not None
    ca = CertAuthority.create(tmp_path / "ca")
    client = ca.issue(tmp_path / "client", "c", server=False)
    config = tls_config(ca_file=ca.cert, cert_file=client.cert, key_file=client.key)
    assert config is not None and config.key_pem == client.key.read_bytes()
    assert b"PRIVATE" not in repr(config).encode() and "key" not in repr(config)
    assert "PRIVATE" not in repr(parse_read_options(
        {"endpoints": "h:1", "topic": "t", "caFile": str(ca.cert), "certFile": str(client.cert),
         "keyFile": str(client.key)}, streaming=False,
    ))  # fmt: skip


def test_the_second_start_reuses_the_pair(daemons: Daemons, tmp_path: Path) -> None:
    with daemons.broker(tmp_path, settings={**SMALL, "tlsEnable": True}) as broker:
        first = generated_cert(broker).read_bytes()
        broker.restart()
        assert generated_cert(broker).read_bytes() == first
        assert health(secure(broker.endpoint, generated_cert(broker))) == "SERVING"
        assert broker.log().count("generated a development certificate") == 1


def test_tls_listen_serves_tls_next_to_the_plaintext_listen_port(
    daemons: Daemons, tmp_path: Path
) -> None:
    settings = {**SMALL, "tlsEnable": True, "tlsListen": "127.0.0.1:0"}
    with daemons.broker(tmp_path, settings=settings) as broker:
        assert broker.plaintext_endpoint == broker.endpoint != broker.tls_endpoint
        assert health(grpc.insecure_channel(broker.plaintext_endpoint)) == "SERVING"
        assert health(secure(broker.tls_endpoint, generated_cert(broker))) == "SERVING"
        assert refused(grpc.insecure_channel(broker.tls_endpoint)) == grpc.StatusCode.UNAVAILABLE
        assert "gRPC over TLS on 127.0.0.1:" in broker.log()


def test_mutual_tls_refuses_clients_without_a_certificate_of_the_trusted_ca(
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    ca = CertAuthority.create(tmp_path / "ca")
    server = ca.issue(tmp_path / "server", "broker", server=True)
    client = ca.issue(tmp_path / "client", "client-a", server=False)
    rogue_ca = CertAuthority.create(tmp_path / "rogue", "rogue-ca")
    rogue = rogue_ca.issue(tmp_path / "rogue-client", "client-b", server=False)
    settings = {
        **SMALL, "tlsEnable": True, "tlsCertPath": str(server.cert), "tlsKeyPath": str(server.key),
        "tlsClientAuth": "require", "tlsTrustCertPath": str(ca.cert),
    }  # fmt: skip
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        assert "generated a development" not in broker.log()
        assert not (broker.store_dir / "config" / "tls").exists()
        ep = broker.endpoint
        assert refused(secure(ep, ca.cert)) == grpc.StatusCode.UNAVAILABLE  # no certificate
        assert refused(secure(ep, ca.cert, rogue.cert, rogue.key)) == grpc.StatusCode.UNAVAILABLE
        assert health(secure(ep, ca.cert, client.cert, client.key)) == "SERVING"

        async def round_trip() -> list[bytes]:
            kwargs = dict(
                ca_file=str(ca.cert), cert_file=str(client.cert), key_file=str(client.key)
            )
            async with Producer(ep, **kwargs) as producer:
                await producer.send("mtls", b"signed")
            async with PullConsumer(ep, "mtls-reader", **kwargs) as consumer:
                return [m.body for m in await pull_everything(consumer, "mtls")]

        assert asyncio.run(round_trip()) == [b"signed"]
        # wharf-probe with and without the client certificate.
        probe = [
            sys.executable,
            "-m",
            "wharf.broker.kit.probe",
            "--endpoint",
            ep,
            "--timeout",
            "3",
        ]
        env = {**os.environ, "WHARF_PROBE_CA_FILE": str(ca.cert)}
        without = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=30)
        assert without.returncode == 2, without.stdout + without.stderr
        with_cert = subprocess.run(
            [*probe, "--cert-file", str(client.cert), "--key-file", str(client.key)],
            capture_output=True, text=True, env=env, timeout=30,
        )  # fmt: skip
        assert with_cert.returncode == 0 and with_cert.stdout.strip() == "SERVING"


def test_probe_over_tls_and_plaintext_probe_of_a_tls_port(tls_broker: BrokerProcess) -> None:
    probe = [sys.executable, "-m", "wharf.broker.kit.probe", "--endpoint", tls_broker.endpoint,
             "--timeout", "3"]  # fmt: skip
    ok = subprocess.run(
        [*probe, "--ca-file", str(generated_cert(tls_broker))],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.strip() == "SERVING", ok.stderr
    plain = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    assert plain.returncode == 2 and "UNREACHABLE" in plain.stderr
    missing = subprocess.run(
        [*probe, "--ca-file", "/nonexistent/ca.pem"], capture_output=True, text=True, timeout=30
    )
    assert missing.returncode == 2 and "cannot read /nonexistent/ca.pem" in missing.stderr


def wharf_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wharf.client.cli.main", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )  # fmt: skip


def test_cli_over_tls_with_ca_file_flag_and_environment(tls_broker: BrokerProcess) -> None:
    ep, ca = tls_broker.endpoint, str(generated_cert(tls_broker))
    created = wharf_cli("--endpoints", ep, "--ca-file", ca, "topic", "create", "cli-tls")
    assert created.returncode == 0, created.stderr
    sent = wharf_cli("--endpoints", ep, "send", "cli-tls", "hi", env={"WHARF_CA_FILE": ca})
    assert sent.returncode == 0, sent.stderr
    read = wharf_cli(
        "--endpoints", ep, "--json", "consume", "cli-tls",
        env={"WHARF_CA_FILE": ca},
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert "hi" in read.stdout
    plain = wharf_cli("--endpoints", ep, "topic", "list")
    assert plain.returncode == 3  # UNAVAILABLE: the TLS port does not speak plaintext
    bad = wharf_cli("--endpoints", ep, "--ca-file", "/nonexistent.pem", "topic", "list")
    assert bad.returncode == 2 and "ca_file: cannot read" in bad.stderr


def test_spark_connector_rpc_over_tls(tls_broker: BrokerProcess) -> None:
    ca = str(generated_cert(tls_broker))
    options = parse_read_options(
        {"endpoints": tls_broker.endpoint, "topic": "tls-orders", "caFile": ca}, streaming=False
    )
    assert options.tls is not None and options.tls.ca_pem == Path(ca).read_bytes()
    with BrokerRpc(options.endpoints, 5.0, tls=options.tls) as rpc:
        bounds = rpc.queue_bounds("tls-orders")
    assert sum(b.max_offset for b in bounds) == 21  # what the SDK test sent
    with BrokerRpc(options.endpoints, 3.0) as rpc, pytest.raises(BrokerCallError):
        rpc.queue_bounds("tls-orders")  # plaintext to the TLS port
    with pytest.raises(OptionError, match="caFile: cannot read"):
        parse_read_options(
            {"endpoints": "h:1", "topic": "t", "caFile": "/nonexistent.pem"}, streaming=False
        )


def test_tls_settings_are_checked_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tlsListen: set tlsEnable"):
        load_settings(overrides={"tls_listen": "127.0.0.1:9443"})
    with pytest.raises(ConfigError, match="tlsClientAuth: 'require' needs tlsTrustCertPath"):
        load_settings(overrides={"tls_enable": "true", "tls_client_auth": "require"})
    with pytest.raises(ConfigError, match="tls-client-auth: expected one of none, require"):
        load_settings(overrides={"tls_client_auth": "optional"})
    with pytest.raises(ConfigError, match="tlsListen: must differ from listen"):
        load_settings(
            overrides={"tls_enable": "1", "listen": "127.0.0.1:9", "tls_listen": "127.0.0.1:9"}
        )
    config = load_settings(env={"WHARF_TLS_ENABLE": "true", "WHARF_TLS_CERT_PATH": "/c.pem"})
    assert config.broker.tls_enable and config.broker.tls_cert_path == "/c.pem"
    assert load_settings().broker.tls_enable is False


def test_unusable_tls_files_stop_the_broker_with_the_setting_named(
    daemons: Daemons, tmp_path: Path
) -> None:
    ca = CertAuthority.create(tmp_path / "ca")
    a = ca.issue(tmp_path / "a", "a", server=True)
    b = ca.issue(tmp_path / "b", "b", server=True)
    cases = [
        ({"tlsCertPath": str(a.cert), "tlsKeyPath": str(b.key)}, "tlsKeyPath: .* is not the key"),
        ({"tlsCertPath": str(a.cert), "tlsKeyPath": str(tmp_path / "none.key")},
         "tlsKeyPath: .* does not exist while its pair does"),
        ({"tlsCertPath": str(a.key), "tlsKeyPath": str(a.key)}, "tlsCertPath: .* holds no PEM"),
    ]  # fmt: skip
    for i, (settings, message) in enumerate(cases):
        broker = daemons.broker(
            tmp_path / f"b{i}", settings={**SMALL, "tlsEnable": True, **settings}, start=False
        )
        with pytest.raises(RuntimeError, match="broker exited with 1") as caught:
            broker.start()
        assert re.search(message, str(caught.value)), str(caught.value)


def test_probe_checks_the_certificate_for_server_name_when_given(
    daemons: Daemons, tmp_path: Path
) -> None:
    """A certificate naming only mq.example.com, probed at 127.0.0.1 (a container's health
    check): refused unless --server-name says which name to expect."""
    ca = CertAuthority.create(tmp_path / "ca")
    server = ca.issue(tmp_path / "server", "mq", server=True, names=("mq.example.com",))
    settings = {
        **SMALL, "tlsEnable": True, "tlsCertPath": str(server.cert), "tlsKeyPath": str(server.key),
    }  # fmt: skip
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        probe = [sys.executable, "-m", "wharf.broker.kit.probe", "--endpoint", broker.endpoint,
                 "--timeout", "3", "--ca-file", str(ca.cert)]  # fmt: skip
        mismatch = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        assert mismatch.returncode == 2, mismatch.stdout + mismatch.stderr
        named = subprocess.run(
            probe, capture_output=True, text=True, timeout=30,
            env={**os.environ, "WHARF_PROBE_SERVER_NAME": "mq.example.com"},
        )  # fmt: skip
        assert named.returncode == 0 and named.stdout.strip() == "SERVING", named.stderr


def served_fingerprint(endpoint: str, ca: Path) -> str:
    """SHA-256 of the certificate a new TLS connection is served (as the broker logs it)."""
    host, _, port = endpoint.rpartition(":")
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def replace_atomically(target: Path, source: Path) -> None:
    tmp = target.with_name(target.name + ".new")
    tmp.write_bytes(source.read_bytes())
    os.replace(tmp, target)


def test_replaced_certificate_files_are_served_without_a_restart(
    daemons: Daemons, tmp_path: Path
) -> None:
    ca = CertAuthority.create(tmp_path / "ca")
    first = ca.issue(tmp_path / "first", "first", server=True)
    second = ca.issue(tmp_path / "second", "second", server=True)
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "broker.crt", live / "broker.key"
    replace_atomically(cert, first.cert)
    replace_atomically(key, first.key)
    settings = {**SMALL, "tlsEnable": True, "tlsCertPath": str(cert), "tlsKeyPath": str(key)}
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        ep = broker.endpoint
        assert served_fingerprint(ep, ca.cert) == fingerprint_sha256(first.cert.read_bytes())
        before = secure(ep, ca.cert)
        assert health(before) == "SERVING"

        replace_atomically(key, second.key)  # key first: a handshake now would see a mismatch
        replace_atomically(cert, second.cert)
        assert served_fingerprint(ep, ca.cert) == fingerprint_sha256(second.cert.read_bytes())
        assert health(secure(ep, ca.cert)) == "SERVING"
        assert health(before) == "SERVING"  # an open connection keeps its session
        assert "TLS certificate reloaded" in broker.log()

        # A replacement that cannot serve (the certificate without its key) keeps the pair.
        replace_atomically(cert, first.cert)
        assert served_fingerprint(ep, ca.cert) == fingerprint_sha256(second.cert.read_bytes())
        assert "TLS files changed but cannot serve" in broker.log()
        assert health(secure(ep, ca.cert)) == "SERVING"
        replace_atomically(key, first.key)  # the pair is whole again
        assert served_fingerprint(ep, ca.cert) == fingerprint_sha256(first.cert.read_bytes())
