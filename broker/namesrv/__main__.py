"""``python -m wharf.broker.namesrv`` / ``wharf-namesrv``: run a NameServer until SIGTERM/SIGINT.

It keeps nothing on disk: brokers register again with a restarted NameServer within one
heartbeat (their session breaks and they reconnect). Exit codes: 0 clean stop, 1 failure,
2 invalid configuration (an ACL file or TLS files that cannot be used included).
``--ready-file`` is written once it serves: {"grpc", "pid", "tls", "remoting"}.
``--remoting-listen HOST:PORT`` (port 0: a free one) also serves RocketMQ 4.x clients their
routes over remoting (``remoting.py``); ``"remoting"`` in the ready file is the address they
dial (null when off).

aclEnable and tlsEnable work as the broker's (``wharf.broker.kit.acl.accounts``,
``wharf.broker.kit.tls.material``, ``wharf.broker.kit.tls.reload``): see ``config.py``. They hold on
the remoting port too: RocketMQ 4 signatures against the same accounts
(``wharf.broker.kit.remoting.acl``), TLS only with the same certificate
(``wharf.broker.kit.remoting.tls``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

import grpc
import uvloop
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from wharf import keepalive
from wharf.broker.kit.acl.accounts import AccountChecker
from wharf.broker.kit.acl.rules import AclFileError
from wharf.broker.kit.bounds import ListenerGuard, ListenerLimits
from wharf.broker.kit.ready_file import write_ready_file_blocking
from wharf.broker.kit.remoting.acl import RemotingAcl
from wharf.broker.kit.remoting.server import RemotingServer
from wharf.broker.kit.remoting.tls import server_context
from wharf.broker.kit.tls.certs import generate_development_pair_blocking
from wharf.broker.kit.tls.material import TlsError, log_certificate, read_server_tls_blocking
from wharf.broker.kit.tls.reload import CertificateReloader
from wharf.broker.namesrv.config import (
    LOG_LEVELS,
    ConfigError,
    NamesrvConfig,
    load_namesrv_settings,
)
from wharf.broker.namesrv.remoting import NamesrvRemoting, RemotingStartError, reserve
from wharf.broker.namesrv.routes import RouteTable
from wharf.broker.namesrv.service import NameService
from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger("wharf.namesrv")
SERVICE_NAME = namesrv_pb2.DESCRIPTOR.services_by_name["NameService"].full_name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wharf-namesrv",
        description="Run a Wharf NameServer. Settings: defaults < --config TOML (RocketMQ "
        "names) < WHARF_NAMESRV_<NAME> environment variables < these flags.",
    )
    parser.add_argument("--config", metavar="FILE", help="TOML file with NameServer settings")
    parser.add_argument("--listen", metavar="HOST:PORT", help="gRPC address (127.0.0.1:9876)")
    parser.add_argument(
        "--remoting-listen",
        metavar="HOST:PORT",
        help="RocketMQ 4.x remoting port, the namesrvAddr of 4.x clients (port 0: a free port; "
        "off by default)",
    )
    parser.add_argument(
        "--ready-file",
        metavar="PATH",
        help='written once serving: {"grpc", "pid", "tls", "remoting"}',
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper)
    return parser


def _server_tls_blocking(config: NamesrvConfig) -> CertificateReloader:
    """tlsEnable: the certificate (a development pair generated when both files are missing),
    served with rotation (gRPC and remoting); TlsError when the files cannot serve."""
    cert, key = Path(config.tls_cert_path), Path(config.tls_key_path)
    generated = False
    if not cert.exists() and not key.exists():
        host = config.listen.rpartition(":")[0].strip("[]")
        try:
            generate_development_pair_blocking(cert, key, [host])
        except OSError as exc:
            raise TlsError(
                f"tlsCertPath/tlsKeyPath: cannot write a development pair to {cert} and {key}: "
                f"{exc.strerror}"
            ) from None
        generated = True
    trust = Path(config.tls_trust_cert_path) if config.tls_client_auth == "require" else None
    material = read_server_tls_blocking(cert, key, trust, generated)
    log_certificate(material)
    return CertificateReloader(material)


class StartError(Exception):
    """A setting's files cannot be used (exit code 2)."""


async def serve(config: NamesrvConfig, ready_file: Path | None) -> int:
    """Run until SIGTERM/SIGINT. The port accepts connections only once the NameServer serves
    ("ready means ready": a port that accepts before its server runs leaves a client
    waiting for its deadline, where a refused one is retried at once). The order, and why:

    1. The ACL and TLS files: a bad one stops the NameServer before anything starts; the
       remoting port is bound (not listening), so a taken one stops it too.
    2. The service, its handlers, health SERVING and its background tasks: everything a call
       needs, before anything can call.
    3. The port, last: ``add_*_port`` listens at once, so it comes right before
       ``server.start`` with no await between them; the remoting port listens right after.
    4. The ready file, once it serves."""
    acl = await _load_acl(config)
    reloader = await _load_tls(config)
    credentials = reloader.credentials() if reloader is not None else None
    grpc_host = config.listen.rpartition(":")[0].strip("[]")
    remoting, remoting_address = _reserve_remoting(config, grpc_host)
    table = RouteTable()
    service = NameService(table, config.broker_not_active_timeout_millis, acl)
    server = await _grpc_server(service, config)
    expire = asyncio.get_running_loop().create_task(service.expire_loop())
    reload_acl = asyncio.get_running_loop().create_task(acl.watch()) if acl else None
    # The port, last: add_*_port listens at once (no await until server.start()).
    if credentials is not None:
        port = server.add_secure_port(config.listen, credentials)
    else:
        port = server.add_insecure_port(config.listen)
    await server.start()
    host = grpc_host
    if remoting is not None:
        await _start_remoting(remoting, table, acl, reloader, server, config)
    log.info("NameServer serving on %s:%d%s%s", host, port, " over TLS" if credentials else "",
             " with ACL" if acl else "")  # fmt: skip
    if remoting is not None:
        log.info("remoting (RocketMQ 4.x) on %s (clients: namesrvAddr=%s)", remoting.address,
                 remoting_address)  # fmt: skip
    # SIGTERM handled before the ready file names the pid: a supervisor that stops the
    # NameServer as soon as it is ready gets a clean stop, not Python's default death.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if ready_file is not None:
        info = {
            "grpc": f"{host}:{port}",
            "pid": os.getpid(),
            "tls": credentials is not None,
            "remoting": remoting_address,
        }
        await asyncio.to_thread(write_ready_file_blocking, ready_file, info)
    await stop.wait()
    log.info("stopping")
    await _shut_down(server, remoting, (expire, reload_acl))
    return 0


async def _load_acl(config: NamesrvConfig) -> AccountChecker | None:
    """aclEnable: the accounts file, loaded (StartError when it cannot be used)."""
    if not config.acl_enable:
        return None
    acl = AccountChecker(Path(config.acl_file), config.acl_max_clock_skew / 1000)
    try:
        await asyncio.to_thread(acl.load_blocking)
    except (AclFileError, OSError, UnicodeDecodeError) as exc:
        raise StartError(f"aclEnable: cannot use {config.acl_file}: {exc}") from None
    return acl


async def _load_tls(config: NamesrvConfig) -> CertificateReloader | None:
    """tlsEnable: the certificate, served with rotation (StartError when it cannot be used)."""
    if not config.tls_enable:
        return None
    try:
        return await asyncio.to_thread(_server_tls_blocking, config)
    except TlsError as exc:
        raise StartError(str(exc)) from None


def _reserve_remoting(
    config: NamesrvConfig, grpc_host: str
) -> tuple[RemotingServer | None, str | None]:
    """remotingListen: its port bound, not listening, and the address clients dial
    ((None, None) when off; StartError when the port is taken)."""
    if not config.remoting_listen:
        return None, None
    try:
        return reserve(config.remoting_listen, grpc_host)
    except RemotingStartError as exc:
        raise StartError(f"remotingListen: {exc}") from None


async def _grpc_server(service: NameService, config: NamesrvConfig) -> grpc.aio.Server:
    """The gRPC server with the NameService, health (SERVING already) and reflection; no port
    yet."""
    # Accept the SDK's keepalive pings on route watches and idle connections (wharf.keepalive):
    # gRPC's defaults answer them with GOAWAY "too_many_pings" after three. The connection
    # bounds in gRPC core's terms, as the broker's (frontends/grpc/part.py bound_options).
    bounds = [
        (option, value)
        for option, value in (
            ("grpc.max_connection_idle_ms", config.connection_max_idle_ms),
            ("grpc.server_handshake_timeout_ms", config.frame_read_timeout_ms),
            ("grpc.max_allowed_incoming_connections", config.max_connections_per_listener),
        )
        if value
    ]
    server = grpc.aio.server(options=[*keepalive.server_options(), *bounds])
    namesrv_pb2_grpc.add_NameServiceServicer_to_server(service, server)
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, reflection.SERVICE_NAME), server)
    # SERVING before the port opens: a health check answered at all says SERVING.
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    return server


async def _start_remoting(
    remoting: RemotingServer,
    table: RouteTable,
    acl: AccountChecker | None,
    reloader: CertificateReloader | None,
    server: grpc.aio.Server,
    config: NamesrvConfig,
) -> None:
    """The remoting port listening, with the ACL, TLS and connection bounds of gRPC; when it
    cannot, the gRPC server stops and StartError."""
    try:
        await remoting.start(
            NamesrvRemoting(table).handlers(),
            None,
            acl=RemotingAcl(acl) if acl is not None else None,  # aclEnable: as gRPC's
            ssl_context=server_context(reloader.refreshed) if reloader else None,  # tlsEnable
            guard=ListenerGuard(
                ListenerLimits(
                    "remotingListen",
                    idle_s=config.server_channel_max_idle_time_seconds,
                    read_s=config.frame_read_timeout_ms / 1000,
                    max_connections=config.max_connections_per_listener,
                    max_per_address=config.max_connections_per_address,
                    idle_setting="serverChannelMaxIdleTimeSeconds",
                )
            ),
        )
    except RemotingStartError as exc:
        await server.stop(None)
        raise StartError(f"remotingListen: {exc}") from None


async def _shut_down(
    server: grpc.aio.Server,
    remoting: RemotingServer | None,
    tasks: tuple[asyncio.Task[None] | None, ...],
) -> None:
    """The background tasks cancelled, then the listeners closed before the servers stop."""
    for task in tasks:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if remoting is not None:
        remoting.close_listener()
    await server.stop(1.0)
    if remoting is not None:
        await remoting.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    flags = {
        "listen": args.listen,
        "remoting_listen": args.remoting_listen,
        "log_level": args.log_level,
    }
    try:
        config = load_namesrv_settings(
            args.config, os.environ, {k: v for k, v in flags.items() if v is not None}
        )
    except ConfigError as exc:
        print(f"wharf-namesrv: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return uvloop.run(serve(config, Path(args.ready_file) if args.ready_file else None))
    except StartError as exc:
        log.error("%s", exc)
        return 2
    except Exception:
        log.exception("NameServer failed")
        return 1


if __name__ == "__main__":
    sys.exit(main())
