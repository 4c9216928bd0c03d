"""BrokerController, the composition root: owns the store, the metadata managers, the long-poll
holder, the metrics object and the servers, composes the core and the front ends over them,
and runs the lifecycle (start -> serve -> graceful shutdown). ``start`` and ``shutdown`` state
their order and why; each step is a named method below them.

Attributes other components read (the metrics read a typed ``BrokerView`` built from them,
``_metrics_view``):

- ``config``: the resolved ``Config`` (``config.broker``: BrokerConfig, ``config.store``:
  StoreConfig as the store really runs, with ``store_host`` set from the advertised address).
- ``store``: the ``MessageStore`` (``.stats()`` for cheap counters). None before ``start()``.
- ``topics``: TopicConfigManager (``len()`` = user topics; ``.table``: name -> TopicConfig).
- ``groups``: SubscriptionGroupManager (``len()``; ``.table``: name -> SubscriptionGroup).
- ``offsets``: ConsumerOffsetManager (``.table``: (topic, group) -> {queue_id: offset}).
- ``clients``: the one client registry (broker/core/clients.py: group members, membership
  versions, v2 sessions and their channels, one expiry).
- ``long_poll``: LongPollHolder (``parked_count``: pulls parked right now).
- ``metrics``: BrokerMetrics (also the store's observer).
- ``started_at``: ``time.time()`` when the broker began serving; 0.0 before.
- ``v2_service``: the apache.rocketmq.v2 servicer.
- ``endpoint``: the advertised address; ``grpc_port`` / ``metrics_port``: real bound ports.
- ``tls_port``: the port serving TLS (``grpc_port`` when ``listen`` is TLS-only, the
  ``tlsListen`` port otherwise; 0 without tlsEnable); ``tls``: the loaded ``ServerTls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import json
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from wharf import keepalive
from wharf.broker.acl.guard import AclGuard
from wharf.broker.acl.rules import FILE_NAME as ACL_FILE_NAME
from wharf.broker.acl.rules import AclFileError
from wharf.broker.cluster.registration import Identity, NamesrvRegistrar, parse_namesrv_addr
from wharf.broker.cluster.routes import ClusterRoutes
from wharf.broker.config import BrokerConfig, Config, parse_host_port
from wharf.broker.context import BrokerContext
from wharf.broker.core.background import ClientExpiry, PopProgress
from wharf.broker.core.clients import ClientRegistry
from wharf.broker.core.long_poll import LongPollHolder
from wharf.broker.core.transactions import TransactionChecker
from wharf.broker.failover import AetcdEtcd, Failover
from wharf.broker.meta.groups import SubscriptionGroupManager
from wharf.broker.meta.offsets import ConsumerOffsetManager
from wharf.broker.meta.persist import dumps
from wharf.broker.meta.persister import MetadataPersister
from wharf.broker.meta.topics import TopicConfigManager
from wharf.broker.metrics import BrokerMetrics
from wharf.broker.metrics.http import read_token_file_blocking
from wharf.broker.metrics.view import BrokerView
from wharf.broker.processors.admin import AdminService
from wharf.broker.processors.messaging import MessagingService
from wharf.broker.remoting.service import RemotingService, RemotingStartError
from wharf.broker.serving.handlers import add_servicer
from wharf.broker.serving.reply_budget import ReplyBudget
from wharf.broker.settings import parse_delay_levels
from wharf.broker.tls.config import ServerTls, TlsError, load_server_tls_blocking
from wharf.broker.tls.reload import CertificateReloader
from wharf.broker.v2.codes import V2_REFUSALS
from wharf.broker.v2.service import V2MessagingService
from wharf.broker.wire.server import WireServer
from wharf.broker.wire.tls import server_ssl_context
from wharf.client.channel import open_channel as open_client_channel
from wharf.client.channel import tls_config as client_tls_config
from wharf.client.errors import InvalidArgumentError
from wharf.rocketmq.v2 import service_pb2 as rocketmq_v2_service_pb2
from wharf.store.codec import SCHEDULE_TOPIC
from wharf.store.codec.ids import OffsetMsgIdFormatter, UniqueIdGenerator
from wharf.store.config import StoreConfig
from wharf.store.ha import SLAVE, ReplicaLink
from wharf.store.service import Service
from wharf.v1 import admin_pb2, messaging_pb2, namesrv_pb2
from wharf.wire import load_cert_chain_pem

if TYPE_CHECKING:
    from wharf.store.message_store import MessageStore

log = logging.getLogger("broker")
DELAY_OFFSETS = "delayOffset"  # the delay levels' progress, in replicated metadata


def _service(module: Any, name: str) -> Any:
    return module.DESCRIPTOR.services_by_name[name]


SERVICE_NAMES = (
    _service(messaging_pb2, "MessagingService").full_name,
    _service(admin_pb2, "AdminService").full_name,
    _service(health_pb2, "Health").full_name,
    reflection.SERVICE_NAME,
    # apache.rocketmq.v2: the official RocketMQ 5 clients (broker/v2/).
    _service(rocketmq_v2_service_pb2, "MessagingService").full_name,
)


class StartupError(RuntimeError):
    """The broker cannot start for a reason the operator can fix (port taken ...)."""


def _is_ipv4(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return host.count(".") == 3


def store_host_for(endpoint: str, listen_host: str) -> str:
    """The 'ipv4:port' written into records and offset msg ids. Records hold only ipv4, so a
    host name or ipv6 endpoint falls back to the listen host, then to 127.0.0.1."""
    host, port = parse_host_port(endpoint, "advertisedAddress")
    for candidate in (host, listen_host):
        if _is_ipv4(candidate) and candidate != "0.0.0.0":
            return f"{candidate}:{port}"
    return f"127.0.0.1:{port}"


def default_endpoint(listen_host: str, port: int) -> str:
    """What clients are told to dial when advertisedAddress is not set: the listen address,
    except that a wildcard (0.0.0.0, ::) is not dialable: use this host's name's address."""
    if listen_host not in ("0.0.0.0", "::", ""):
        return f"{listen_host}:{port}"
    try:
        host = socket.gethostbyname(socket.gethostname())
    except OSError:
        host = "127.0.0.1"
    log.warning(
        "listening on all interfaces; advertising %s:%d to clients (set advertisedAddress / "
        "--advertise to the address they can reach)", host, port,
    )  # fmt: skip
    return f"{host}:{port}"


def _bind(
    server: grpc.aio.Server, address: str, setting: str, tls: grpc.ServerCredentials | None
) -> int:
    """Add a plaintext (``tls`` None) or TLS port; returns the bound port."""
    try:
        port = server.add_secure_port(address, tls) if tls else server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise StartupError(
            f"cannot listen on {address} ({setting}): the port is taken or the address is "
            f"not local; pick another with {_flag(setting)}"
        )
    return port


def _flag(setting: str) -> str:
    """The command-line flag of a setting: tlsListen -> --tls-listen."""
    return "--" + "-".join(part.lower() for part in re.findall(r"[a-z]+|[A-Z][a-z]*", setting))


def _reserve(address: str, setting: str, held: list[socket.socket]) -> tuple[str, int]:
    """Hold ``address``'s port without listening (``BrokerController.start``, step 2): a
    socket bound to each of its addresses, appended to ``held``. SO_REUSEADDR, as gRPC's own
    sockets: gRPC binds the port next to them when the broker serves, no other process can
    take it meanwhile, and a client dialing it is refused (nothing listens). A port taken by
    a listener fails here, before the store starts. Returns the address with the real port
    (port 0: the one the OS picked) and that port."""
    host, port = parse_host_port(address, setting)
    taken = (
        f"cannot listen on {address} ({setting}): the port is taken or the address is not "
        f"local; pick another with {_flag(setting)}"
    )
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {address} ({setting}): {exc.strerror}") from None
    # (family, sockaddr) of each address, once (the port is set below).
    targets = list(dict.fromkeys((f, a) for f, _, _, _, a in infos if f in _FAMILIES))
    for _ in range(10):  # port 0: the port picked on the first address may be taken on another
        sockets: list[socket.socket] = []
        chosen = port
        try:
            for family, sockaddr in targets:
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:  # the ipv4 address, if listed, has its own
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind((sockaddr[0], chosen, *sockaddr[2:]))
                except OSError as exc:
                    sock.close()
                    # An address of a name this host does not have (localhost's ::1 without
                    # ipv6): gRPC listens on the others, so does this.
                    if exc.errno == errno.EADDRNOTAVAIL and len(targets) > 1:
                        continue
                    raise
                sockets.append(sock)
                chosen = sock.getsockname()[1]
        except OSError as exc:
            for sock in sockets:
                sock.close()
            if port == 0 and sockets and exc.errno == errno.EADDRINUSE:
                continue  # try another ephemeral port
            raise StartupError(taken) from None
        if not sockets:
            raise StartupError(taken)
        held.extend(sockets)
        return f"{address.rpartition(':')[0]}:{chosen}", chosen
    raise StartupError(f"cannot listen on {address} ({setting}): no port free on every address")


async def read_metrics_token(path: str) -> str | None:
    """Step 1 of start: the metrics bearer token file (metricsBearerTokenFile), read now."""
    if not path:
        return None
    try:
        return await asyncio.to_thread(read_token_file_blocking, path)
    except ValueError as exc:
        raise StartupError(str(exc)) from None


def grpc_server(broker: BrokerConfig, max_size: int) -> grpc.aio.Server:
    """The gRPC server, not listening yet."""
    return grpc.aio.server(
        maximum_concurrent_rpcs=broker.max_concurrent_rpcs,
        options=[
            ("grpc.max_receive_message_length", max_size),
            ("grpc.max_send_message_length", max_size),
            # Announce 4 MiB HTTP/2 frames (default 16 KiB): a 400 KiB send batch arrives
            # in one frame instead of 25 (~10% less receive CPU measured here).
            ("grpc.http2.max_frame_size", 4 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
            # Accept the SDK's keepalive pings (every 30 s, idle connections too): the one
            # client/server pairing is wharf.keepalive (gRPC's 5 min default would answer
            # them with GOAWAY "too_many_pings").
            *keepalive.server_options(),
            # Ping clients every 60 s: a vanished client's parked pulls and streams are
            # cancelled within ~80 s instead of lingering on a half-open connection.
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.keepalive_timeout_ms", 20_000),
        ],
    )


def store_config_for(store_config: StoreConfig, address: str, listen_host: str) -> StoreConfig:
    """The store's settings with what only the reserved ports tell: the store host (in every
    record and offset message id; from ``address``, the remoting or advertised one) and the
    replication listener's host."""
    if store_config.store_host == StoreConfig().store_host:
        store_config = store_config.replace(store_host=store_host_for(address, listen_host))
    if store_config.ha_listen_host == StoreConfig().ha_listen_host and listen_host not in (
        "127.0.0.1",
        "localhost",
        "",
    ):
        store_config = store_config.replace(ha_listen_host=listen_host)  # as gRPC binds
    return store_config


_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class BrokerController:
    def __init__(self, config: Config, store_factory: Any = None) -> None:
        """``store_factory(config, observer=...)`` builds the store; default MessageStore
        (tests pass an in-memory stand-in)."""
        broker = config.broker
        self.config = config
        self._store_factory = store_factory
        self.store: MessageStore = None  # type: ignore[assignment]  # set by start()
        self.topics = TopicConfigManager(
            broker.default_topic_queue_nums, broker.auto_create_topic_enable
        )
        self.groups = SubscriptionGroupManager(
            broker.auto_create_subscription_group, broker.max_reconsume_times
        )
        self.offsets = ConsumerOffsetManager()
        self.clients = ClientRegistry(broker.channel_expired_timeout / 1000)
        self.long_poll = LongPollHolder(broker.max_parked_pulls)
        self.metrics = BrokerMetrics()
        self.started_at = 0.0
        self.endpoint = ""
        self.grpc_port = 0
        self.metrics_port = 0
        self.tls_port = 0  # the TLS port (= grpc_port when listen is TLS-only); 0 = no TLS
        self.tls: ServerTls | None = None  # as loaded at start (tls_reloader.current: now)
        self.tls_reloader: CertificateReloader | None = None
        self.ctx: BrokerContext | None = None
        self.v2_service: V2MessagingService | None = None  # apache.rocketmq.v2, set by start()
        self._server: grpc.aio.Server | None = None
        self.wire_port = 0  # the wire port (wireListen); 0 = off
        self.wire_address = ""
        self._wire: WireServer | None = None
        self.remoting_listen = ""  # --remoting-listen HOST:PORT: RocketMQ 4.x remoting ("" off)
        self.remoting: RemotingService | None = None
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self._tasks: list[asyncio.Task[Any]] = []
        self.registrar: NamesrvRegistrar | None = None  # with namesrvAddr
        self.failover: Failover | None = None  # with enableControllerMode
        self.restart_reason = ""  # why the broker asked to be restarted ('' = it did not)
        self.on_stop: Callable[[], None] | None = None  # serve() sets it: stop the broker
        self._metadata_dir = Path(config.store.store_path_root_dir) / "config"
        self._metrics_started = False
        self._store_started = False
        # Background parts (start, stop, health): metadata files, client expiry, pop progress.
        self.persister = MetadataPersister(
            self._metadata_dir,
            self._managers(),
            self.config.broker.flush_consumer_offset_interval / 1000,
        )
        self.client_expiry = ClientExpiry(self.clients)
        self.pop_progress = PopProgress(lambda: self.store.pop, self.offsets)
        self.topics.on_change = self._metadata_changed
        self.groups.on_change = self._metadata_changed
        # aclEnable: the guard every wharf.v1 / v2 handler runs first (broker/acl/guard.py).
        self.acl: AclGuard | None = None
        if broker.acl_enable:
            self.acl = AclGuard(
                Path(broker.acl_file) if broker.acl_file else self._metadata_dir / ACL_FILE_NAME,
                broker.acl_max_clock_skew / 1000,
                self.metrics.observe_rpc,
            )

    # --- start ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the broker; its ports accept connections only once it serves (issue 33,
        "ready means ready": a port that accepts before its server runs leaves a client
        waiting for a reply that comes seconds later, "timed out before receiving SETTINGS
        frame", where a refused connection is retried at once). The order, and why:

        1. Settings' files (metrics token, TLS material, ACL file): a bad one stops the broker
           before anything else starts.
        2. Reserve the gRPC ports (listen, tlsListen) without listening (``_reserve``): bound,
           so the port is ours (port 0: the OS picks it now) and a taken one fails at once,
           but not listening, so a client dialing it now is refused. The real port is needed
           this early: it is part of the store host in every record and offset message id.
        3. The store: recovery (seconds on a large or fresh store).
        4. Metadata, the handlers, health SERVING, the background tasks: everything a call
           needs, before anything can call.
        5. Open the ports, last: gRPC (``add_*_port`` listens at once, so it is called right
           before ``server.start``, with no await between them), then the wire port and the
           metrics port (both serve as soon as they listen). The reservations are closed.
        6. Announce the broker: NameServer registration, then controller mode's election
           (clients and replicas routed here find it serving).

        The caller writes the ready file after this returns."""
        held: list[socket.socket] = []  # step 2's reservations, closed in step 5 or on failure
        try:
            await self._start(held)
        finally:
            for sock in held:
                sock.close()

    async def _start(self, held: list[socket.socket]) -> None:
        """``start``'s steps, in its order (numbered as in its docstring, which says why)."""
        self.long_poll.bind_loop(asyncio.get_running_loop())
        # 1. Settings' files: a bad one stops the broker before anything starts (TLS material
        #    is loaded in _reserve_ports, the ACL file in _start_store).
        token = await read_metrics_token(self.config.broker.metrics_bearer_token_file)
        broker = self.config.broker
        max_size = broker.grpc_max_message_size or max(
            16 * 1024 * 1024, self.config.store.max_message_size + 1024 * 1024
        )
        server = self._server = grpc_server(broker, max_size)
        if broker.wire_listen != "off":
            self._wire = WireServer(max_size)  # the wire port: its frames sized as gRPC's
        # 2. Ports reserved, not listening: the real port is part of the store host.
        listen_host, listen_address, tls_address = await self._reserve_ports(held)
        # 3. The store: recovery, seconds on a large store.
        store_config = store_config_for(
            self.config.store, self.remoting_address or self.endpoint, listen_host
        )
        self.config = dataclasses.replace(self.config, store=store_config)
        await self._start_store(store_config)
        # 4. Everything a call needs, before anything can call: metadata, the core and the
        #    front ends, health SERVING, the background parts and tasks.
        await asyncio.to_thread(self.persister.load_blocking)
        self._compose(server)
        dial = await self._start_background()
        # 5. The ports open, last: gRPC, wire, remoting, then metrics.
        metrics_host = await self._open_ports(
            server, held, listen_address, tls_address, listen_host, token
        )
        self.started_at = time.time()
        assert self.ctx is not None
        self.ctx.started_at = self.started_at
        # 6. Announced only now that it serves: NameServer, then controller mode's election.
        await self._announce(dial)
        self._log_serving(listen_host, metrics_host)

    async def _reserve_ports(self, held: list[socket.socket]) -> tuple[str, str, str]:
        """Step 2: TLS material, then the ports reserved (not listening): the real port goes
        into the store host. (listen host, listen address, TLS address or '')."""
        broker = self.config.broker
        listen_host, _ = parse_host_port(broker.listen, "listen")
        await self._load_tls()
        listen_address, self.grpc_port = _reserve(broker.listen, "listen", held)
        tls_address = ""
        if self.tls_reloader is not None and broker.tls_enable:
            if broker.tls_listen:
                tls_address, self.tls_port = _reserve(broker.tls_listen, "tlsListen", held)
            else:
                self.tls_port = self.grpc_port
        self.endpoint = broker.advertised_address or default_endpoint(listen_host, self.grpc_port)
        try:  # reserved now: the remoting address is the store host (records, offset ids)
            if self.remoting_listen:
                self.remoting = RemotingService(self.remoting_listen, self.endpoint)
        except RemotingStartError as exc:
            raise StartupError(str(exc)) from None
        return listen_host, listen_address, tls_address

    async def _start_store(self, store_config: StoreConfig) -> None:
        """Step 3: the store, wired to the broker's tables (arrivals wake parked pulls,
        consumer progress bounds retention), then recovery; the ACL file before it: the
        store's replication listener checks accounts."""
        if self._store_factory is None:
            from wharf.store.message_store import MessageStore

            self._store_factory = MessageStore
        if store_config.broker_role == SLAVE or store_config.ha_listen_port >= 0:
            self.store = self._store_factory(
                store_config, observer=self.metrics, replication=self._replica_link()
            )
        else:
            self.store = self._store_factory(store_config, observer=self.metrics)
        if self.config.broker.enable_controller_mode:
            self.failover = self._failover()
        self.store.add_arrival_listener(self.long_poll.on_arrival, quiet=self.long_poll.quiet)
        long_poll = self.long_poll
        self.store.set_dispatch_waiters(lambda: long_poll.parked_count > 0)
        self.store.set_consumer_progress(self.offsets.by_queue)
        self.store.set_committed_offsets(self.offsets.query)
        if self.acl is not None:
            try:
                await asyncio.to_thread(self.acl.load_blocking)
            except (AclFileError, OSError, UnicodeDecodeError) as exc:
                raise StartupError(f"aclEnable: cannot use {self.acl.path}: {exc}") from None
        started = time.perf_counter()
        await self.store.start()
        self._store_started = True
        log.info("store started in %.3f s at %s", time.perf_counter() - started,
                 store_config.store_path_root_dir)  # fmt: skip

    def _compose(self, server: grpc.aio.Server) -> None:
        """Step 4, once the metadata files are loaded: the context every front end shares
        (the core: send, read, clients, transactions), the three front ends on the gRPC
        server and the wire port, the transaction check-back."""
        broker = self.config.broker
        store_config = self.config.store
        delay_levels = parse_delay_levels(store_config.message_delay_level)
        self.topics.ensure_system(SCHEDULE_TOPIC, len(delay_levels))
        self.ctx = BrokerContext(
            config=broker,
            store=self.store,
            topics=self.topics,
            groups=self.groups,
            offsets=self.offsets,
            clients=self.clients,
            long_poll=self.long_poll,
            metrics=self.metrics,
            endpoint=self.endpoint,
            delay_levels_ms=delay_levels,
            unique_ids=UniqueIdGenerator(store_config.store_host.rpartition(":")[0]),
            offset_ids=OffsetMsgIdFormatter(store_config.store_host),
            replies=ReplyBudget(
                broker.max_unread_pull_bytes_per_client, broker.max_unread_pull_bytes
            ),
        )
        self.ctx.ha_address = self.ha_address
        self.ctx.failover = self.failover
        wrap = self.acl.wrap if self.acl is not None else None
        wire = self._wire
        add_servicer(
            server,
            MessagingService(self.ctx),
            _service(messaging_pb2, "MessagingService"),
            wrap,
            wire,
        )
        add_servicer(
            server, AdminService(self.ctx), _service(admin_pb2, "AdminService"), wrap, wire
        )
        # Adds its producers' Telemetry streams to the check-back targets.
        self.v2_service = V2MessagingService(self.ctx)
        add_servicer(
            server,
            self.v2_service,
            _service(rocketmq_v2_service_pb2, "MessagingService"),
            functools.partial(self.acl.wrap, refusals=V2_REFUSALS) if self.acl else None,
            wire,
        )
        self.checker = TransactionChecker(
            lambda: self.store.transactions,
            self.ctx.check_targets.targets,
            broker.transaction_time_out,
            broker.transaction_check_interval,
            broker.transaction_check_max,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(SERVICE_NAMES, server)

    async def _start_background(self) -> Callable[[str], grpc.aio.Channel] | None:
        """Health SERVING (before the port opens: a health check answered at all says
        SERVING), the background parts and tasks; with namesrvAddr, the NameServer dialer
        (returned, for step 6) and the routes of other brokers' topics (forwarded calls)."""
        assert self.ctx is not None
        for name in ("", *SERVICE_NAMES[:2]):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.metrics.attach(self._metrics_view())
        broker = self.config.broker
        dial = None
        if broker.namesrv_addr:
            dial = await asyncio.to_thread(self._namesrv_dialer_blocking)
            self.ctx.cluster_routes = ClusterRoutes(parse_namesrv_addr(broker.namesrv_addr), dial)
        for part in self._parts():
            part.start()
        self._tasks = [asyncio.create_task(self.checker.run(), name="transaction-check-back")]
        if self.acl is not None:
            self._tasks.append(asyncio.create_task(self.acl.watch(), name="acl-reload"))
        return dial

    async def _open_ports(
        self,
        server: grpc.aio.Server,
        held: list[socket.socket],
        listen_address: str,
        tls_address: str,
        listen_host: str,
        token: str | None,
    ) -> str:
        """Step 5: gRPC (add_*_port listens at once: no await until server.start()), then the
        reservations closed, the wire port, the remoting port and the metrics port (its host
        is returned)."""
        self._bind_ports(server, listen_address, tls_address)
        await server.start()
        for sock in held:  # gRPC listens on the reserved ports now (bound next to these)
            sock.close()
        held.clear()
        if self._wire is not None:
            await self._bind_wire(self._wire, listen_host)
        if self.remoting is not None:
            try:  # TLS as the wire port: when the listen port is TLS-only; the ACL's guard
                remoting_tls = None
                if self.tls_reloader is not None and self.tls_port == self.grpc_port:
                    remoting_tls = server_ssl_context(self.tls_reloader.refreshed)
                assert self.ctx is not None
                await self.remoting.start(self.ctx, self.acl, remoting_tls)
            except RemotingStartError as exc:
                raise StartupError(str(exc)) from None
        broker = self.config.broker
        metrics_host, metrics_port = parse_host_port(broker.metrics_listen, "metricsListen")
        try:
            self.metrics_port = await self.metrics.serve(metrics_host, metrics_port, token)
        except OSError as exc:
            raise StartupError(
                f"metricsListen {broker.metrics_listen}: {exc}; pick another with --metrics-listen"
            ) from None
        self._metrics_started = True
        return metrics_host

    async def _announce(self, dial: Callable[[str], grpc.aio.Channel] | None) -> None:
        """Step 6: NameServer registration, then controller mode's election (clients and
        replicas routed here find it serving)."""
        if dial is not None:
            self.registrar = self._registrar(dial)
            self.topics.on_change = self._on_topics_changed
            self.registrar.start()
        if self.failover is not None:
            await self.failover.start()

    def _log_serving(self, listen_host: str, metrics_host: str) -> None:
        broker = self.config.broker
        log.info("broker %s serving gRPC on %s:%d (%s; advertised %s), metrics on %s:%d%s",
                 broker.broker_name, listen_host, self.grpc_port,
                 "TLS" if self.tls_port == self.grpc_port else "plaintext", self.endpoint,
                 metrics_host, self.metrics_port,
                 f", gRPC over TLS on {broker.tls_listen.rpartition(':')[0]}:{self.tls_port}"
                 if self.tls_port and self.tls_port != self.grpc_port else "")  # fmt: skip
        if self.wire_port:
            log.info("wire port on %s (%s; clients dial wire://%s)", self.wire_address,
                     "TLS" if self.tls_port == self.grpc_port else "plaintext",
                     self.wire_address)  # fmt: skip

    @property
    def remoting_address(self) -> str:
        """host:port clients dial for the remoting port ('' when off)."""
        return self.remoting.address if self.remoting is not None else ""

    def _metrics_view(self) -> BrokerView:
        """What the metrics read at scrape time (on the loop): a typed view, not this object."""
        store, broker = self.store, self.config.broker

        def service_stats(name: str) -> Callable[[], dict[str, int]]:
            def read() -> dict[str, int]:
                try:  # a replica runs no transaction or timer service
                    return dict(getattr(store, name).stats())
                except (AttributeError, AssertionError):
                    return {}

            return read

        replication = getattr(store, "replication_status", None)  # a test store may lack it
        return BrokerView(
            store=store,
            topic_count=lambda: len(self.topics),
            group_count=lambda: len(self.groups),
            committed_offsets=lambda: self.offsets.table,
            parked_pulls=lambda: self.long_poll.parked_count,
            started_at=lambda: self.started_at,
            identity={
                "cluster": broker.broker_cluster_name,
                "broker": broker.broker_name,
                "broker_id": str(broker.broker_id),
            },
            namesrv_sessions=lambda: self.registrar.registered if self.registrar else {},
            wire_connections=lambda: self.wire_connections,
            replication=replication if callable(replication) else (lambda: None),
            transactions=service_stats("transactions"),
            timer=service_stats("timer"),
        )

    @property
    def wire_connections(self) -> int:
        """Client connections open on the wire port (a metric)."""
        return len(self._wire.connections) if self._wire is not None else 0

    async def _bind_wire(self, wire: WireServer, listen_host: str) -> None:
        """wireListen, or the listen host and port + 2 (ephemeral when listen's is 0); TLS when
        the listen port is TLS-only."""
        broker = self.config.broker
        if broker.wire_listen:
            host, port = parse_host_port(broker.wire_listen, "wireListen")
            setting = f"wireListen {broker.wire_listen}"
        else:
            _, listen_port = parse_host_port(broker.listen, "listen")
            host, port = listen_host, (self.grpc_port + 2 if listen_port else 0)
            setting = f"wireListen (default: listen port + 2 = {port})"
        context = None
        if self.tls_reloader is not None and self.tls_port == self.grpc_port:
            context = server_ssl_context(self.tls_reloader.refreshed)
        try:
            self.wire_port = await wire.start(host, port, context)
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {host}:{port} ({setting}): {exc.strerror}; pick another "
                "with --wire-listen HOST:PORT or turn it off with --wire-listen off"
            ) from None
        self.wire_address = f"{host.strip('[]') or '0.0.0.0'}:{self.wire_port}"

    async def _load_tls(self) -> None:
        """The TLS material of tlsEnable or haTlsEnable (either), with its reloader."""
        broker = self.config.broker
        if broker.tls_enable or broker.ha_tls_enable:
            try:
                self.tls = await asyncio.to_thread(
                    load_server_tls_blocking, broker, self.config.store.store_path_root_dir
                )
            except TlsError as exc:
                raise StartupError(str(exc)) from None
            self.tls_reloader = CertificateReloader(self.tls)

    def _bind_ports(self, server: grpc.aio.Server, listen: str, tls_listen: str) -> None:
        """The reserved addresses (``_reserve``): listen plaintext; or TLS-only with
        tlsEnable; or plaintext + tlsListen (``tls_listen``) TLS. Listens at once."""
        credentials = None
        if self.config.broker.tls_enable and self.tls_reloader is not None:
            credentials = self.tls_reloader.credentials()
        main_tls = credentials is not None and not tls_listen
        _bind(server, listen, "listen", credentials if main_tls else None)
        if credentials is not None and tls_listen:
            _bind(server, tls_listen, "tlsListen", credentials)

    # --- cluster ---------------------------------------------------------------------------------
    def _namesrv_dialer_blocking(self) -> Callable[[str], grpc.aio.Channel]:
        """How the broker dials a NameServer: TLS with namesrvTlsEnable, calls signed with
        namesrvAccessKey / namesrvSecretKey (the SDK's channel; never the environment's keys)."""
        broker = self.config.broker
        try:
            tls = client_tls_config(broker.namesrv_tls_enable, broker.namesrv_tls_ca_file or None)
        except InvalidArgumentError as exc:
            raise StartupError(f"namesrvTlsCaFile: {exc}") from None
        if bool(broker.namesrv_access_key) != bool(broker.namesrv_secret_key):
            raise StartupError("namesrvAccessKey and namesrvSecretKey go together")
        keys = broker.namesrv_access_key, broker.namesrv_secret_key

        def dial(address: str) -> grpc.aio.Channel:
            return open_client_channel(address, tls=tls, access_key=keys[0], secret_key=keys[1])

        return dial

    def _registrar(self, dial: Callable[[str], grpc.aio.Channel]) -> NamesrvRegistrar:
        broker = self.config.broker
        identity = Identity(
            broker.broker_cluster_name, broker.broker_name, broker.broker_id, self.endpoint,
            remoting_address=self.remoting_address,
        )  # fmt: skip

        def snapshot() -> tuple[int, list[namesrv_pb2.TopicQueues]]:
            topics = [
                namesrv_pb2.TopicQueues(
                    topic=t.name,
                    read_queue_nums=t.read_queue_nums,
                    write_queue_nums=t.write_queue_nums,
                    perm=t.perm,
                )
                for t in self.topics.table.values()
            ]
            return self.topics.version, topics

        return NamesrvRegistrar(
            parse_namesrv_addr(broker.namesrv_addr),
            identity,
            snapshot,
            broker.broker_heartbeat_interval,
            dial,
        )

    def _on_topics_changed(self) -> None:
        self._metadata_changed()
        if self.registrar is not None:
            self.registrar.wake()

    def _metadata_changed(self) -> None:
        """Topics or groups changed: persist soon, and ship them to replicas now."""
        self.persister.wakeup()
        ha = getattr(self.store, "ha_master", None)
        if ha is not None:
            ha.notify_metadata()

    # --- replication ----------------------------------------------------------------------------
    @property
    def ha_address(self) -> str:
        """host:port of the replication listener ('' when this broker has none)."""
        ha = getattr(self.store, "ha_master", None)
        if ha is None or not ha.port:
            return ""
        return f"{self.config.store.ha_listen_host}:{ha.port}"

    def _replica_link(self) -> ReplicaLink:
        """What the store's replication needs from the broker: identity, and the metadata a
        replica follows (topics, groups, consumer offsets, delay offsets) as JSON bytes: the master ships a
        snapshot whenever its bytes change (checked every second), a replica replaces its
        tables with it wholesale (RocketMQ #1094: a replica never keeps offsets of its own)."""
        broker = self.config.broker

        def snapshot() -> bytes:
            tables: dict[str, Any] = {m.FILE_NAME: m.to_json() for m in self._managers()}
            tables[DELAY_OFFSETS] = {str(k): v for k, v in self.store.delay_offsets().items()}
            return dumps(tables).encode()

        def apply(payload: bytes) -> None:
            try:
                tables = json.loads(payload)
            except ValueError:
                log.error("ignoring replicated metadata that is not JSON (%d bytes)", len(payload))
                return
            topics_before = self.topics.version
            for manager in self._managers():
                manager.table.clear()
                manager.load(tables.get(manager.FILE_NAME))
                manager.dirty = True
            delays = tables.get(DELAY_OFFSETS) or {}
            self.store.follow_delay_offsets({int(k): int(v) for k, v in delays.items()})
            self.persister.wakeup()
            if self.topics.version != topics_before and self.registrar is not None:
                self.registrar.wake()

        controller_mode = broker.enable_controller_mode
        return ReplicaLink(
            broker.broker_cluster_name,
            broker.broker_name,
            broker.broker_id,
            snapshot,
            apply,
            # Controller mode: the master etcd names (the failover is made right after the
            # store and started once the broker serves; until then there is none to dial).
            master_address=(lambda: self.failover.master_ha if self.failover else "")
            if controller_mode
            else None,
            controller=controller_mode,
            restart=self.request_restart if controller_mode else None,
            replica_secret=self.acl.replication_secret if self.acl is not None else None,
            credentials=(broker.ha_access_key, broker.ha_secret_key),
            **self._replication_tls(),
        )

    def _replication_tls(self) -> dict[str, ssl.SSLContext]:
        """haTlsEnable: the replication listener's context (the broker's certificate, following
        its reloads) and the one a replica dials with (haTlsCaFile; its own certificate shown
        when the master asks: tlsClientAuth = require there)."""
        broker = self.config.broker
        if not broker.ha_tls_enable or self.tls_reloader is None or self.tls is None:
            return {}
        try:
            client = ssl.create_default_context(cafile=broker.ha_tls_ca_file or None)
            load_cert_chain_pem(client, self.tls.cert_pem, self.tls.key_pem)
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"haTlsCaFile {broker.ha_tls_ca_file!r}: {exc}") from None
        return {
            "server_ssl": server_ssl_context(self.tls_reloader.refreshed),
            "client_ssl": client,
        }

    def _failover(self) -> Failover:
        broker = self.config.broker

        async def on_master() -> None:
            if self.registrar is not None:
                epoch = self.failover.epoch if self.failover else 0
                identity = Identity(
                    broker.broker_cluster_name, broker.broker_name, 0, self.endpoint, epoch,
                    self.remoting_address,
                )  # fmt: skip
                await self.registrar.change_identity(identity)

        return Failover(
            etcd=AetcdEtcd(parse_namesrv_addr(broker.controller_addr)),
            cluster=broker.broker_cluster_name,
            broker_name=broker.broker_name,
            broker_id=broker.broker_id,
            address=self.endpoint,
            ttl_ms=broker.controller_heart_beat_timeout_mills,
            wished_role=self.config.store.broker_role,
            store=self.store.role,
            on_master=on_master,
            restart=self.request_restart,
        )

    def request_restart(self, reason: str) -> None:
        """Stop, then start again as a new process (controller mode: a master that lost its
        term, or a replica with a truncation to apply before recovery)."""
        if self.restart_reason:
            return
        self.restart_reason = reason
        log.warning("restarting: %s", reason)
        if self.on_stop is not None:
            self.on_stop()

    # --- metadata -------------------------------------------------------------------------------
    def _managers(self) -> tuple[Any, ...]:
        return (self.topics, self.groups, self.offsets)

    def _parts(self) -> tuple[Service, ...]:
        """The background parts, in start order (stopped in the same order: none feeds
        another)."""
        return (self.persister, self.client_expiry, self.pop_progress)

    # --- shutdown -------------------------------------------------------------------------------
    async def shutdown(self) -> None:
        """Graceful stop, the reverse of ``start``. The order, and why:

        1. Health NOT_SERVING, then unannounce: controller mode hands mastership over and the
           NameServer registration ends, so clients route elsewhere before the ports close.
        2. Stop serving: calls refused as shutting down, parked pulls answered at once (a
           long poll would hold the grace period), the listeners closed, then in-flight calls
           given ``shutdownGracePeriod`` (5 s) to finish.
        3. The background tasks and parts: nothing writes metadata after this.
        4. Metadata persisted with its last changes, then the store (final flush and
           checkpoint): the store last, since every step before may still write to it.
        5. The metrics port (scrapes see the stop to the end)."""
        log.info("shutting down")
        await self._stop_announcing()
        await self._stop_serving()
        await self._stop_background()
        if self._store_started:
            await self.persister.persist()  # the last changes, before the store closes
            await self.store.shutdown()
        if self._metrics_started:
            await self.metrics.close()
        log.info("broker stopped")

    async def _stop_announcing(self) -> None:
        """Shutdown step 1."""
        await self._health.enter_graceful_shutdown()
        if self.failover is not None:  # a master hands over before it leaves the routes
            await self.failover.stop()
        if self.registrar is not None:  # clients stop routing here before the port closes
            await self.registrar.stop()
        if self.ctx is not None and self.ctx.cluster_routes is not None:
            await self.ctx.cluster_routes.close()

    async def _stop_serving(self) -> None:
        """Shutdown step 2: every listener closed before any server's grace period starts,
        so no port takes new connections while another drains."""
        if self.ctx is not None:
            self.ctx.shutting_down = True
        answered = self.long_poll.close()
        if answered:
            log.info("answered %d parked pulls", answered)
        if self._wire is not None:
            self._wire.close_listener()
        if self.remoting is not None:
            self.remoting.close_listener()
        if self._server is not None:
            await self._server.stop(self.config.broker.shutdown_grace_period / 1000)
        if self._wire is not None:
            await self._wire.stop()
        if self.remoting is not None:
            await self.remoting.stop()

    async def _stop_background(self) -> None:
        """Shutdown step 3."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for part in self._parts():
            await part.stop()
