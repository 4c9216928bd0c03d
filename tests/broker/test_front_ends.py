"""Front ends as parts (issue 64): what the one interface makes true of every front end, each
a defect of the hand-wired root: the listen address is a setting (TOML, environment, flag), a
taken port fails before the store starts (or, on a default address, leaves that front end out
with one line), TLS on means a TLS listener on every front end, health names every mounted
service, remoting requests are in the RPC metrics and every front end in the connection
gauge; the parts serve in order and stop in reverse, those serving stopped when a later one
fails."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from wharf.broker.frontends.composed import FrontEnds
from wharf.broker.frontends.frontend import FrontEndUnavailable, PortBook, TlsSource
from wharf.broker.frontends.tcp import drain
from wharf.broker.settings import load_settings

from tests.broker.remoting.test_server import Client
from tests.harness import Daemons

SMALL: dict[str, object] = {"defaultTopicQueueNums": 2}


def test_every_listen_address_is_a_setting(tmp_path: Path) -> None:
    toml = tmp_path / "broker.toml"
    toml.write_text('remotingListen = "127.0.0.1:7001"\nkafkaListen = "off"\n')
    config = load_settings(toml, {"WHARF_WIRE_LISTEN": "127.0.0.1:7003"},
                           {"kafka_listen": "127.0.0.1:7002"})  # fmt: skip
    assert config.broker.remoting_listen == "127.0.0.1:7001"
    assert config.broker.kafka_listen == "127.0.0.1:7002"  # the flag wins over TOML
    assert config.broker.wire_listen == "127.0.0.1:7003"
    defaults = load_settings().broker
    assert (defaults.remoting_listen, defaults.kafka_listen) == (
        "127.0.0.1:10911",
        "127.0.0.1:9092",
    )


def test_remoting_listen_from_toml_serves_remoting(daemons: Daemons, tmp_path: Path) -> None:
    broker = daemons.broker(tmp_path, settings={**SMALL, "remotingListen": "127.0.0.1:0"})
    ready = json.loads((tmp_path / "ready.json").read_text())
    assert ready["remoting"] == broker.remoting_endpoint and broker.remoting_endpoint

    async def heartbeat_and_metrics() -> str:
        host, _, port = broker.remoting_endpoint.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        client = Client(reader, writer)
        reply = await client.call(105, {"topic": "TBW102"})  # GET_ROUTEINFO_BY_TOPIC
        assert reply.code in (0, 17)  # SUCCESS or TOPIC_NOT_EXIST: answered either way
        url = f"http://{broker.metrics_endpoint}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url).read().decode())
        writer.close()
        return text

    text = asyncio.run(heartbeat_and_metrics())
    # Remoting requests are timed with the others, and its connections are counted.
    assert 'method="remoting.GET_ROUTEINFO_BY_TOPIC"' in text, text[-2000:]
    assert 'wharf_frontend_connections{frontend="remoting"} 1.0' in text
    assert 'wharf_frontend_connections{frontend="wire"} 0.0' in text


def test_a_taken_port_fails_before_the_store_starts(daemons: Daemons, tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        broker = daemons.broker(tmp_path, {**SMALL, "wireListen": f"127.0.0.1:{port}"}, start=False)
        with pytest.raises(RuntimeError, match="exited with 1") as failed:
            broker.start()
    message = str(failed.value)
    assert f"cannot listen on 127.0.0.1:{port} (wireListen)" in message
    assert "--wire-listen" in message  # the flag that fixes it
    assert "store started" not in broker.log()  # no recovery before the ports are ours


def test_a_taken_default_port_leaves_that_front_end_out(daemons: Daemons, tmp_path: Path) -> None:
    """On its default address (10911) a taken remoting port is one warning; the broker serves
    everything else. Set explicitly, the same port stops the broker (above)."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("127.0.0.1", 10911))
        except OSError:  # someone else holds it already: the same situation for the broker
            pass
        else:
            holder.listen()
        daemons.broker(tmp_path, settings={**SMALL, "remotingListen": "127.0.0.1:10911"})
        ready = json.loads((tmp_path / "ready.json").read_text())
    assert ready["remoting"] is None and ready["grpc"] and ready["wire"]
    log = daemons.processes[-1].log()
    assert log.count("serving without remoting") == 1, log[-2000:]


def _tls_handshake(address: str, ca: Path) -> str:
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        return tls.version() or ""


def test_tls_listen_gives_every_front_end_a_tls_listener(daemons: Daemons, tmp_path: Path) -> None:
    """Plaintext listen + tlsListen: gRPC, the wire port, remoting and Kafka each keep a
    plaintext listener and get a TLS one (before, wire and remoting stayed plaintext only)."""
    settings = {**SMALL, "tlsEnable": True, "tlsListen": "127.0.0.1:0",
                "remotingListen": "127.0.0.1:0", "kafkaListen": "127.0.0.1:0"}  # fmt: skip
    daemons.broker(tmp_path, settings=settings)
    ready = json.loads((tmp_path / "ready.json").read_text())
    ca = tmp_path / "store" / "config" / "tls" / "broker.crt"
    for key in ("tls", "wire_tls", "remoting_tls", "kafka_tls"):
        assert ready[key], (key, ready)
        assert _tls_handshake(ready[key], ca).startswith("TLS"), key
    for key in ("plaintext", "wire", "remoting", "kafka"):  # the plaintext ones answer plaintext
        host, _, port = ready[key].rpartition(":")
        with socket.create_connection((host, int(port)), timeout=5):
            pass
        with pytest.raises(ssl.SSLError):
            _tls_handshake(ready[key], ca)


def test_health_names_every_mounted_service(daemons: Daemons, tmp_path: Path) -> None:
    broker = daemons.broker(tmp_path, settings=SMALL)
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "wharf.v1.MessagingService", "wharf.v1.AdminService",
                        "apache.rocketmq.v2.MessagingService"):  # fmt: skip
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, service


class _Part:
    """A front end that records its steps in ``log`` (and fails ``serve`` when told)."""

    def __init__(self, name: str, log: list[str], fail: str = "") -> None:
        self.name, self.optional, self.log, self.fail = name, False, log, fail

    def reserve(self, ports: PortBook, tls: TlsSource) -> None:
        self.log.append(f"reserve {self.name}")
        if self.fail == "reserve":
            raise FrontEndUnavailable(f"{self.name} port taken", f"{self.name}Listen")

    def store_host(self, advertised: str) -> str | None:
        return None

    def attach(self, serving: object) -> None:
        self.log.append(f"attach {self.name}")

    async def serve(self) -> None:
        if self.fail == "serve":
            raise FrontEndUnavailable(f"{self.name} cannot listen")
        self.log.append(f"serve {self.name}")

    def ready(self) -> dict[str, str | None]:
        return {self.name: "127.0.0.1:1"}

    def connections(self) -> int:
        return 0

    def close_listener(self) -> None:
        self.log.append(f"close {self.name}")

    async def stop(self, grace_s: float) -> None:
        self.log.append(f"stop {self.name}")


async def test_parts_serve_in_order_and_a_failure_stops_those_serving_in_reverse() -> None:
    log: list[str] = []
    fronts = FrontEnds()
    parts = [_Part("a", log), _Part("b", log), _Part("c", log, fail="serve")]
    fronts.reserve([lambda config, p=p: p for p in parts], load_settings(), PortBook(), TlsSource())  # type: ignore[misc]
    with pytest.raises(FrontEndUnavailable, match="c cannot listen"):
        await fronts.serve()
    # Every listener closed before any stop; stops in reverse order of serving.
    assert log[3:] == ["serve a", "serve b", "close a", "close b", "stop b", "stop a"]


async def test_shutdown_closes_every_listener_before_any_stops() -> None:
    log: list[str] = []
    fronts = FrontEnds()
    parts = [_Part("a", log), _Part("b", log)]
    fronts.reserve([lambda config, p=p: p for p in parts], load_settings(), PortBook(), TlsSource())  # type: ignore[misc]
    await fronts.serve()
    assert fronts.ready() == {"a": "127.0.0.1:1", "b": "127.0.0.1:1"}
    await fronts.stop(1.0)
    assert log[-4:] == ["close a", "close b", "stop b", "stop a"]
    optional = _Part("d", log, fail="reserve")
    optional.optional = True
    fronts.reserve([lambda config: optional], load_settings(), PortBook(), TlsSource())
    assert fronts.find("d") is None  # left out, the others stay
    with pytest.raises(FrontEndUnavailable):
        fronts.reserve([lambda config: _Part("e", log, fail="reserve")], load_settings(), PortBook(),
                       TlsSource())  # fmt: skip


async def test_drain_waits_for_running_requests_and_late_ones_up_to_the_grace() -> None:
    """The front ends' stop: requests running get the grace period, one started meanwhile too;
    a stuck one is left to the caller once the grace is over."""
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[object]] = []

    async def request(seconds: float) -> None:
        await asyncio.sleep(seconds)
        if seconds == 0.05:  # a request that starts another while the stop drains
            tasks.append(loop.create_task(request(0.1)))

    tasks.append(loop.create_task(request(0.05)))
    started = loop.time()
    await drain(lambda: [t for t in tasks if not t.done()], 5.0)
    assert all(t.done() for t in tasks) and len(tasks) == 2
    assert loop.time() - started < 2.0  # ended with them, not at the 5 s grace

    stuck = loop.create_task(asyncio.sleep(30))
    started = loop.time()
    await drain(lambda: [stuck] if not stuck.done() else [], 0.2)
    assert not stuck.done() and 0.19 < loop.time() - started < 2.0
    stuck.cancel()
