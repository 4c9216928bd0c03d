"""How a broker joins its cluster, built from its settings and the parts they need (the
composition root calls these; none holds the root): the NameServer dialer and registrar,
the replication link the store runs (identity, metadata shipped to replicas, TLS, accounts),
where a metadata change goes (``MetadataFanout``) and controller mode's failover."""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from wharf.broker.cluster.registration import Identity, NamesrvRegistrar, parse_namesrv_addr
from wharf.broker.config import BrokerConfig, Config
from wharf.broker.errors import NotReplicatedError
from wharf.broker.failover import AetcdEtcd, Failover
from wharf.broker.frontends.frontend import FrontEndUnavailable
from wharf.broker.kit.tls.contexts import server_ssl_context
from wharf.broker.kit.tls.reload import CertificateReloader
from wharf.broker.meta.persist import dumps
from wharf.broker.meta.persister import MetadataPersister, Table
from wharf.broker.meta.topics import TopicConfigManager
from wharf.broker.tls_settings import ServerTls
from wharf.client.channel import open_channel as open_client_channel
from wharf.client.channel import tls_config as client_tls_config
from wharf.client.errors import InvalidArgumentError
from wharf.store.ha import ReplicaLink
from wharf.v1 import namesrv_pb2
from wharf.wire import load_cert_chain_pem

__all__ = [
    "DELAY_OFFSETS",
    "MetadataFanout",
    "identity_of",
    "make_failover",
    "make_registrar",
    "namesrv_dialer_blocking",
    "replica_link",
    "replication_tls",
]

log = logging.getLogger("broker")
DELAY_OFFSETS = "delayOffset"  # the delay levels' progress, in replicated metadata
LOG_STARTS = "logStartOffsets"  # queues' log starts (DeleteRecords, retention), likewise


def identity_of(
    broker: BrokerConfig,
    endpoint: str,
    addresses: dict[str, str | None],
    broker_id: int | None = None,
    epoch: int = 0,
) -> Identity:
    """What the NameServer records: the endpoint, the remoting address 4.x clients dial (the
    front ends' ready keys) and the Kafka address peers name in their Metadata
    (kafkaAdvertisedAddress, else the ready key, as the Kafka part tells its own clients)."""
    return Identity(
        broker.broker_cluster_name,
        broker.broker_name,
        broker.broker_id if broker_id is None else broker_id,
        endpoint,
        epoch,
        addresses.get("remoting") or "",
        (broker.kafka_advertised_address or addresses.get("kafka") or "")
        if addresses.get("kafka")
        else "",
    )


def namesrv_dialer_blocking(broker: BrokerConfig) -> Callable[[str], grpc.aio.Channel]:
    """How the broker dials a NameServer: TLS with namesrvTlsEnable, calls signed with
    namesrvAccessKey / namesrvSecretKey (the SDK's channel; never the environment's keys)."""
    try:
        tls = client_tls_config(broker.namesrv_tls_enable, broker.namesrv_tls_ca_file or None)
    except InvalidArgumentError as exc:
        raise FrontEndUnavailable(f"namesrvTlsCaFile: {exc}") from None
    if bool(broker.namesrv_access_key) != bool(broker.namesrv_secret_key):
        raise FrontEndUnavailable("namesrvAccessKey and namesrvSecretKey go together")
    keys = broker.namesrv_access_key, broker.namesrv_secret_key

    def dial(address: str) -> grpc.aio.Channel:
        return open_client_channel(address, tls=tls, access_key=keys[0], secret_key=keys[1])

    return dial


def make_registrar(
    broker: BrokerConfig,
    identity: Identity,
    topics: TopicConfigManager,
    dial: Callable[[str], grpc.aio.Channel],
) -> NamesrvRegistrar:
    def snapshot() -> tuple[int, list[namesrv_pb2.TopicQueues]]:
        queues = [
            namesrv_pb2.TopicQueues(
                topic=t.name,
                read_queue_nums=t.read_queue_nums,
                write_queue_nums=t.write_queue_nums,
                perm=t.perm,
            )
            for t in topics.table.values()
        ]
        return topics.version, queues

    return NamesrvRegistrar(
        parse_namesrv_addr(broker.namesrv_addr),
        identity,
        snapshot,
        broker.broker_heartbeat_interval,
        dial,
    )


def replica_link(
    config: Config,
    managers: Sequence[Any],
    store: Callable[[], Any],
    on_applied: Callable[[bool], None],
    failover: Callable[[], Failover | None],
    restart: Callable[[str], None],
    replica_secret: Callable[[str, str], str] | None,
    tls: dict[str, ssl.SSLContext],
) -> ReplicaLink:
    """What the store's replication needs from the broker: identity, and the metadata a
    replica follows (topics, groups, consumer offsets, delay offsets) as JSON bytes: the
    master ships a snapshot whenever its bytes change (checked every second), a replica
    replaces its tables with it wholesale (RocketMQ #1094: a replica never keeps offsets of
    its own), but for the queues' log starts, which only grow (the store's retention takes
    them: ``RetentionService.follow_starts``). ``on_applied(topics_changed)`` after a replica
    applied a snapshot."""
    broker = config.broker

    def snapshot() -> bytes:
        tables: dict[str, Any] = {m.FILE_NAME: m.to_json() for m in managers}
        tables[DELAY_OFFSETS] = {str(k): v for k, v in store().delay_offsets().items()}
        retention = getattr(store(), "retention", None)  # a test's stand-in store has none
        if retention is not None:
            tables[LOG_STARTS] = retention.replicated_starts()
        return dumps(tables).encode()

    def apply(payload: bytes) -> None:
        try:
            tables = json.loads(payload)
        except ValueError:
            log.error("ignoring replicated metadata that is not JSON (%d bytes)", len(payload))
            return
        versions = [getattr(m, "version", None) for m in managers]
        for manager in managers:
            manager.table.clear()
            manager.load(tables.get(manager.FILE_NAME))
            manager.dirty = True
        delays = tables.get(DELAY_OFFSETS) or {}
        store().follow_delay_offsets({int(k): int(v) for k, v in delays.items()})
        retention = getattr(store(), "retention", None)
        starts = tables.get(LOG_STARTS)
        if retention is not None and isinstance(starts, dict):
            retention.follow_starts(starts)
        on_applied(versions != [getattr(m, "version", None) for m in managers])

    def master_address() -> str:
        # Controller mode: the master etcd names (the failover is made right after the
        # store and started once the broker serves; until then there is none to dial).
        current = failover()
        return current.master_ha if current is not None else ""

    controller_mode = broker.enable_controller_mode
    return ReplicaLink(
        broker.broker_cluster_name,
        broker.broker_name,
        broker.broker_id,
        snapshot,
        apply,
        master_address=master_address if controller_mode else None,
        controller=controller_mode,
        restart=restart if controller_mode else None,
        replica_secret=replica_secret,
        credentials=(broker.ha_access_key, broker.ha_secret_key),
        **tls,
    )


def replication_tls(
    broker: BrokerConfig, tls: ServerTls | None, reloader: CertificateReloader | None
) -> dict[str, ssl.SSLContext]:
    """haTlsEnable: the replication listener's context (the broker's certificate, following
    its reloads) and the one a replica dials with (haTlsCaFile; its own certificate shown
    when the master asks: tlsClientAuth = require there)."""
    if not broker.ha_tls_enable or reloader is None or tls is None:
        return {}
    try:
        client = ssl.create_default_context(cafile=broker.ha_tls_ca_file or None)
        load_cert_chain_pem(client, tls.cert_pem, tls.key_pem or b"")
    except (OSError, ssl.SSLError) as exc:
        raise FrontEndUnavailable(f"haTlsCaFile {broker.ha_tls_ca_file!r}: {exc}") from None
    return {"server_ssl": server_ssl_context(reloader.refreshed), "client_ssl": client}


class MetadataFanout:
    """Where a change of the metadata tables goes: the persister (written soon), the
    replicas (shipped now by the replication listener, when this broker has one) and, for
    topics, the NameServer (the registration's next beat now, once ``registrar`` is set:
    routes name a topic only after the NameServer heard of it)."""

    def __init__(self, persister: MetadataPersister, store: Callable[[], Any]) -> None:
        self._persister = persister
        self._store = store  # set after this is made: the broker builds the store at start
        self.registrar: NamesrvRegistrar | None = None

    def changed(self) -> None:
        """Topics or groups changed here: persist soon, and ship them to replicas now."""
        self._persister.wakeup()
        ha = getattr(self._store(), "ha_master", None)  # a test's stand-in store has none
        if ha is not None:
            ha.notify_metadata()

    async def offsets_durable(self, table: Table, sync: bool) -> None:
        """What a Kafka OffsetCommit's answer waits for: the offsets in ``table``'s file
        (fsynced with ``sync``) and, under SYNC_MASTER, applied by the replicas every
        acknowledgement needs, both at once; then this master must still hold its term.
        With the once-a-second snapshot alone, a failover right after an answer would take
        the commit back and the group re-read what it had committed (the fault campaign:
        "committed 1 after 103 was acknowledged"). Raises
        MetadataNotDurable, NotReplicatedError (slaveTimeout, 3 s) or MasterFencedError."""
        store = self._store()
        ha = getattr(store, "ha_master", None)  # a test's stand-in store has none
        replicated = ha.metadata_replicated() if ha is not None else None
        await self._persister.table_durable(table, sync)
        if replicated is not None and not await replicated:
            raise NotReplicatedError(
                "the commit is stored here, but the in-sync replicas did not apply it within "
                "slaveTimeout: retry (a failover now could take it back)"
            )
        role = getattr(store, "role", None)
        if role is not None:
            role.check_ack()  # a master whose lease ran out speaks for nobody

    def topics_changed(self) -> None:
        self.changed()
        if self.registrar is not None:
            self.registrar.wake()

    def applied(self, topics_changed: bool) -> None:
        """A replica took its master's tables: persist them; new topics are announced."""
        self._persister.wakeup()
        if topics_changed and self.registrar is not None:
            self.registrar.wake()


def make_failover(
    config: Config,
    endpoint: str,
    store_role: Any,
    on_master: Callable[[], Awaitable[None]],
    restart: Callable[[str], None],
) -> Failover:
    broker = config.broker
    return Failover(
        etcd=AetcdEtcd(parse_namesrv_addr(broker.controller_addr)),
        cluster=broker.broker_cluster_name,
        broker_name=broker.broker_name,
        broker_id=broker.broker_id,
        address=endpoint,
        ttl_ms=broker.controller_heart_beat_timeout_mills,
        wished_role=config.store.broker_role,
        store=store_role,
        on_master=on_master,
        restart=restart,
    )
