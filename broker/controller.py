"""BrokerController, the composition root: owns the store, the metadata managers, the long-poll
holder and the metrics, builds the core (``BrokerContext``) over them, composes the list of
front-end parts (``broker/frontends/roster.py``; the interface and its order: ``frontends/frontend.py``)
and runs the lifecycle (start -> serve -> graceful shutdown). ``start`` and ``shutdown``
state their order and why. Nothing here is specific to one protocol.

Attributes other components read (the metrics read a typed ``BrokerView``):

- ``config``: the resolved ``Config`` (``config.store`` as the store really runs, with
  ``store_host`` set from the reserved ports).
- ``store``: the ``MessageStore``; ``topics``, ``groups``, ``offsets``: the metadata managers;
  ``clients``: the client registry; ``long_poll``; ``metrics``; ``ctx``: the core.
- ``front_ends``: the composed parts, in serve order; ``front_end(name)`` one of them.
- ``endpoint``: the advertised address; ``grpc_port``, ``tls_port``, ``metrics_port``.
- ``started_at``: ``time.time()`` when the broker began serving; 0.0 before.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from wharf.broker.addresses import default_endpoint, store_config_for
from wharf.broker.cluster import links
from wharf.broker.cluster.registration import NamesrvRegistrar, parse_namesrv_addr
from wharf.broker.cluster.routes import ClusterRoutes
from wharf.broker.config import Config, parse_host_port
from wharf.broker.context import BrokerContext
from wharf.broker.core.addressing import system_topics
from wharf.broker.core.background import ClientExpiry, PopProgress
from wharf.broker.core.clients import ClientRegistry
from wharf.broker.core.long_poll import LongPollHolder
from wharf.broker.core.transactions import TransactionChecker
from wharf.broker.failover import Failover
from wharf.broker.frontends.acl_guard import AclGuard
from wharf.broker.frontends.composed import FrontEnds
from wharf.broker.frontends.frontend import FrontEndUnavailable, PortBook, Serving, TlsSource
from wharf.broker.frontends.reply_budget import ReplyBudget
from wharf.broker.frontends.roster import PARTS
from wharf.broker.frontends.tls_source import load_tls
from wharf.broker.kit.acl.rules import FILE_NAME as ACL_FILE_NAME
from wharf.broker.kit.acl.rules import AclFileError
from wharf.broker.kit.health import HealthBoard
from wharf.broker.kit.tls.reload import CertificateReloader
from wharf.broker.meta.groups import SubscriptionGroupManager
from wharf.broker.meta.offsets import ConsumerOffsetManager
from wharf.broker.meta.persister import MetadataPersister
from wharf.broker.meta.topics import TopicConfigManager
from wharf.broker.metrics import BrokerMetrics
from wharf.broker.metrics.http import read_token_file_blocking
from wharf.broker.metrics.view import BrokerView, broker_view
from wharf.broker.settings import parse_delay_levels
from wharf.broker.tls_settings import ServerTls
from wharf.store import ConsumerLink
from wharf.store.codec import SCHEDULE_TOPIC
from wharf.store.codec.ids import OffsetMsgIdFormatter, UniqueIdGenerator
from wharf.store.fast import load as load_compiled
from wharf.store.ha import SLAVE
from wharf.store.service import Service

if TYPE_CHECKING:
    from wharf.store.message_store import MessageStore

__all__ = ["BrokerController", "StartupError", "default_endpoint"]

log = logging.getLogger("broker")
# The UNIQ_KEY ids of a batch formatted in C when built (~0.6 us an id in Python: a Kafka
# Produce draws one per record, tests/bench/kafka.py); the SDK does the same (client/ids.py).
_encoder = load_compiled("_record_encoder")
_counter_ids = None if _encoder is None else _encoder.counter_ids


class StartupError(RuntimeError):
    """The broker cannot start for a reason the operator can fix (port taken ...)."""


async def read_metrics_token(path: str) -> str | None:
    """Step 1 of start: the metrics bearer token file (metricsBearerTokenFile), read now."""
    if not path:
        return None
    try:
        return await asyncio.to_thread(read_token_file_blocking, path)
    except ValueError as exc:
        raise StartupError(str(exc)) from None


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
        self.health = HealthBoard()
        self.started_at = 0.0
        self.endpoint = ""
        self.metrics_port = 0
        self.tls: ServerTls | None = None  # as loaded at start (tls_reloader.current: now)
        self.tls_reloader: CertificateReloader | None = None
        self.ctx: BrokerContext | None = None
        self.front_ends = FrontEnds()
        self._tasks: list[asyncio.Task[Any]] = []
        self.registrar: NamesrvRegistrar | None = None  # with namesrvAddr
        self.failover: Failover | None = None  # with enableControllerMode
        self.restart_reason = ""  # why the broker asked to be restarted ('' = it did not)
        self.on_stop: Callable[[], None] | None = None  # serve() sets it: stop the broker
        self._metadata_dir = Path(config.store.store_path_root_dir) / "config"
        self._metrics_started = False
        self._store_started = False
        self.persister = MetadataPersister(
            self._metadata_dir, self._managers(), broker.flush_consumer_offset_interval / 1000
        )
        self.client_expiry = ClientExpiry(self.clients)
        self.pop_progress = PopProgress(lambda: self.store.pop, self.offsets)
        self.fanout = links.MetadataFanout(self.persister, lambda: self.store)
        self.topics.on_change = self.groups.on_change = self.fanout.changed
        self.topics.durable = self.groups.durable = self.persister.durable  # admin answers wait
        sync_offsets = config.store.flush_disk_type == "SYNC_FLUSH"  # else written, not fsynced
        self.offsets.durable = lambda: self.fanout.offsets_durable(self.offsets, sync_offsets)
        # aclEnable: the guard every front end runs first (broker/frontends/acl_guard.py).
        self.acl: AclGuard | None = None
        if broker.acl_enable:
            self.acl = AclGuard(
                Path(broker.acl_file) if broker.acl_file else self._metadata_dir / ACL_FILE_NAME,
                broker.acl_max_clock_skew / 1000,
                self.metrics.observe_rpc,
            )

    # --- start ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the broker; its ports accept connections only once it serves ("ready means
        ready": a client dialing a port whose server does not run yet waits for a reply that
        comes seconds later, where a refused connection is retried at once):

        1. Settings' files (metrics token, TLS material, ACL file): a bad one stops the broker
           before anything else starts.
        2. Every front end reserves its ports (bound, not listening): a taken port fails now,
           not after recovery, and the real ports go into the store host.
        3. The store: recovery (seconds on a large or fresh store).
        4. Metadata, the core, every front end attached (handlers, ACL, TLS), health SERVING,
           the background parts: everything a call needs, before anything can call.
        5. The front ends serve, in list order; a failure stops those already serving, in
           reverse. Then the metrics port.
        6. Announce: NameServer registration, then controller mode's election.

        The caller writes the ready file (``ready()``) after this returns."""
        ports = PortBook()
        try:
            await self._start(ports)
        except FrontEndUnavailable as exc:
            raise StartupError(str(exc)) from None
        finally:
            ports.close()  # reservations no part listens on (gRPC binds next to its own)

    async def _start(self, ports: PortBook) -> None:
        self.long_poll.bind_loop(asyncio.get_running_loop())
        token = await read_metrics_token(self.config.broker.metrics_bearer_token_file)  # 1.
        broker = self.config.broker
        self.tls, self.tls_reloader, tls = await load_tls(
            broker, self.config.store.store_path_root_dir
        )
        self.front_ends.reserve(PARTS, self.config, ports, tls)  # 2.
        listen_host, _ = parse_host_port(broker.listen, "listen")
        self.endpoint = broker.advertised_address or default_endpoint(listen_host, self.grpc_port)
        owner = self.front_ends.store_host(self.endpoint)
        store_config = store_config_for(self.config.store, owner or self.endpoint, listen_host)
        self.config = dataclasses.replace(self.config, store=store_config)
        await self._start_store()  # 3.
        await asyncio.to_thread(self.persister.load_blocking)  # 4.
        if self.store.dispatch_pending:  # recovery's re-dispatch may make queues: count them
            await self.store.wait_dispatched(5.0)
        self.topics.adopt(self.store.queue_counts())  # records whose config a crash lost
        self.front_ends.attach(self._compose(tls))
        dial = await self._start_background()
        await self.front_ends.serve()  # 5.: in list order, those serving stopped on failure
        await self._open_metrics(token, tls)
        self.started_at = time.time()
        assert self.ctx is not None
        self.ctx.started_at = self.started_at
        await self._announce(dial)  # 6.
        log.info("broker %s serving (advertised %s): %s; metrics on port %d",
                 self.config.broker.broker_name, self.endpoint,
                 ", ".join(f"{k} {v}" for k, v in self.ready().items() if v),
                 self.metrics_port)  # fmt: skip

    async def _start_store(self) -> None:
        """Step 3: the store, wired to the broker's tables (arrivals wake parked pulls,
        consumer progress bounds retention), then recovery; the ACL file before it: the
        store's replication listener checks accounts."""
        store_config = self.config.store
        if self._store_factory is None:
            from wharf.store.message_store import MessageStore

            self._store_factory = MessageStore
        long_poll, offsets = self.long_poll, self.offsets
        levels = len(parse_delay_levels(store_config.message_delay_level))
        kwargs: dict[str, Any] = {
            "observer": self.metrics,
            "put_hook": system_topics(levels, store_config.timer_max_delay_sec),
            "consumers": ConsumerLink(
                on_arrival=long_poll.on_arrival,
                quiet=long_poll.quiet,
                on_planned=long_poll.on_planned,
                waiting=lambda: long_poll.parked_count > 0,
                progress=offsets.by_queue,
                committed=offsets.query,
            ),
        }
        if store_config.broker_role == SLAVE or store_config.ha_listen_port >= 0:
            kwargs["replication"] = self._replica_link()
        self.store = self._store_factory(store_config, **kwargs)
        if self.config.broker.enable_controller_mode:
            self.failover = links.make_failover(
                self.config, self.endpoint, self.store.role, self._on_master,
                self.request_restart,
            )  # fmt: skip
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

    def _compose(self, tls: TlsSource) -> Serving:
        """Step 4, once the metadata files are loaded: the core every front end shares (send,
        read, clients, transactions) and the transaction check-back over its targets."""
        broker, store_config = self.config.broker, self.config.store
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
            unique_ids=UniqueIdGenerator(
                store_config.store_host.rpartition(":")[0], counter_ids=_counter_ids
            ),
            offset_ids=OffsetMsgIdFormatter(store_config.store_host),
            replies=ReplyBudget(
                broker.max_unread_pull_bytes_per_client, broker.max_unread_pull_bytes
            ),
        )
        self.ctx.ha_address = self.ha_address
        self.ctx.failover = self.failover
        self.checker = TransactionChecker(
            lambda: self.store.transactions,
            self.ctx.check_targets.targets,
            broker.transaction_time_out,
            broker.transaction_check_interval,
            broker.transaction_check_max,
        )
        return Serving(self.ctx.front_end_kit(), self.acl, tls, self.health)

    async def _start_background(self) -> Callable[[str], grpc.aio.Channel] | None:
        """Health SERVING (a health check answered at all says SERVING), the background parts
        and tasks; with namesrvAddr the NameServer dialer (returned, for step 6) and the
        routes of other brokers' topics (forwarded calls)."""
        assert self.ctx is not None
        await self.health.set_serving(True)
        self.metrics.attach(self._metrics_view())
        dial = None
        broker = self.config.broker
        if broker.namesrv_addr:
            try:
                dial = await asyncio.to_thread(links.namesrv_dialer_blocking, broker)
            except FrontEndUnavailable as exc:
                raise StartupError(str(exc)) from None
            self.ctx.cluster_routes = ClusterRoutes(parse_namesrv_addr(broker.namesrv_addr), dial)
        for part in self._parts():
            part.start()
        self._tasks = [asyncio.create_task(self.checker.run(), name="transaction-check-back")]
        if self.acl is not None:
            self._tasks.append(asyncio.create_task(self.acl.watch(), name="acl-reload"))
        return dial

    async def _open_metrics(self, token: str | None, tls: TlsSource) -> None:
        metrics_listen = self.config.broker.metrics_listen
        host, port = parse_host_port(metrics_listen, "metricsListen")
        secure = tls.enabled and self.config.broker.metrics_tls_enable
        try:
            self.metrics_port = await self.metrics.serve(
                host, port, token, tls.ssl_context() if secure else None
            )
        except OSError as exc:
            raise StartupError(
                f"metricsListen {metrics_listen}: {exc}; pick another with --metrics-listen"
            ) from None
        self._metrics_started = True

    async def _announce(self, dial: Callable[[str], grpc.aio.Channel] | None) -> None:
        """Step 6: NameServer registration, then controller mode's election (clients and
        replicas routed here find it serving)."""
        broker = self.config.broker
        if dial is not None:
            identity = links.identity_of(broker, self.endpoint, self.ready())
            self.registrar = self.fanout.registrar = links.make_registrar(
                broker, identity, self.topics, dial
            )
            self.topics.on_change = self.fanout.topics_changed
            self.registrar.start()
        if self.failover is not None:
            await self.failover.start()

    # --- what the front ends serve ----------------------------------------------------------------
    def front_end(self, name: str) -> Any:
        """The composed part called ``name`` (None when off or left out)."""
        return self.front_ends.find(name)

    def ready(self) -> dict[str, str | None]:
        """Every front end's ready-file keys (``__main__.ready_info`` adds the rest)."""
        return self.front_ends.ready()

    @property
    def grpc_port(self) -> int:
        grpc_front = self.front_end("grpc")
        return grpc_front.port if grpc_front is not None else 0

    @property
    def tls_port(self) -> int:
        grpc_front = self.front_end("grpc")
        return grpc_front.tls_port if grpc_front is not None else 0

    def _metrics_view(self) -> BrokerView:
        """What the metrics read at scrape time (on the loop): a typed view, not this object."""
        return broker_view(
            self.store, self.config.broker, self.topics, self.groups, self.offsets,
            lambda: self.long_poll.parked_count, lambda: self.started_at,
            lambda: self.registrar.registered if self.registrar else {},
            self.front_ends.connections,
        )  # fmt: skip

    # --- cluster ----------------------------------------------------------------------------------
    async def _on_master(self) -> None:
        """Controller mode: elected; the NameServer hears this broker is its group's master."""
        if self.registrar is not None:
            epoch = self.failover.epoch if self.failover else 0
            identity = links.identity_of(
                self.config.broker, self.endpoint, self.ready(), broker_id=0, epoch=epoch
            )
            await self.registrar.change_identity(identity)

    @property
    def ha_address(self) -> str:
        """host:port of the replication listener ('' when this broker has none)."""
        ha = getattr(self.store, "ha_master", None)
        if ha is None or not ha.port:
            return ""
        return f"{self.config.store.ha_listen_host}:{ha.port}"

    def _replica_link(self) -> Any:
        try:
            tls_contexts = links.replication_tls(self.config.broker, self.tls, self.tls_reloader)
        except FrontEndUnavailable as exc:
            raise StartupError(str(exc)) from None
        return links.replica_link(
            self.config, self._managers(), lambda: self.store, self.fanout.applied,
            lambda: self.failover, self.request_restart,
            self.acl.replication_secret if self.acl is not None else None, tls_contexts,
        )  # fmt: skip

    def request_restart(self, reason: str) -> None:
        """Stop, then start again as a new process (controller mode: a master that lost its
        term, or a replica with a truncation to apply before recovery)."""
        if self.restart_reason:
            return
        self.restart_reason = reason
        log.warning("restarting: %s", reason)
        if self.on_stop is not None:
            self.on_stop()

    def _managers(self) -> tuple[Any, ...]:
        return (self.topics, self.groups, self.offsets)

    def _parts(self) -> tuple[Service, ...]:
        """The background parts, in start order (stopped in the same order: none feeds
        another)."""
        return (self.persister, self.client_expiry, self.pop_progress)

    # --- shutdown -------------------------------------------------------------------------------
    async def shutdown(self) -> None:
        """Graceful stop, the reverse of ``start``:

        1. Health NOT_SERVING, then unannounce: controller mode hands mastership over and the
           NameServer registration ends, so clients route elsewhere before the ports close.
        2. Stop serving: calls refused as shutting down, parked pulls answered at once (a
           long poll would hold the grace period), every front end's listener closed, then
           all of them given one ``shutdownGracePeriod`` (5 s) for calls in flight.
        3. The background tasks and parts: nothing writes metadata after this.
        4. Metadata persisted with its last changes, then the store (final flush and
           checkpoint): the store last, since every step before may still write to it.
        5. The metrics port (scrapes see the stop to the end)."""
        log.info("shutting down")
        await self.health.set_serving(False)
        if self.failover is not None:  # a master hands over before it leaves the routes
            await self.failover.stop()
        if self.registrar is not None:  # clients stop routing here before the port closes
            await self.registrar.stop()
        if self.ctx is not None and self.ctx.cluster_routes is not None:
            await self.ctx.cluster_routes.close()
        if self.ctx is not None:
            self.ctx.shutting_down = True
        answered = self.long_poll.close()
        if answered:
            log.info("answered %d parked pulls", answered)
        await self.front_ends.stop(self.config.broker.shutdown_grace_period / 1000)
        await self._stop_background()
        if self._store_started:
            await self.persister.persist()  # the last changes, before the store closes
            await self.store.shutdown()
        if self._metrics_started:
            await self.metrics.close()
        log.info("broker stopped")

    async def _stop_background(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for part in self._parts():
            await part.stop()
