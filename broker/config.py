"""Broker configuration: BrokerConfig (this file) next to the store's StoreConfig.

Both are frozen dataclasses resolved ONCE at start (``wharf.broker.settings.load_settings``) and passed
as values. Setting names in TOML are RocketMQ's camelCase names (``autoCreateTopicEnable``), in
the environment ``WHARF_<UPPER_SNAKE>`` (``WHARF_AUTO_CREATE_TOPIC_ENABLE``); see settings.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from wharf.store.config import StoreConfig

__all__ = ["BrokerConfig", "Config", "StoreConfig", "parse_host_port"]


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    # brokerName: reported by QueryRoute and BrokerStatus ("broker-a" as in RocketMQ's samples).
    broker_name: str = "broker-a"
    # Cluster membership (RocketMQ's names). namesrvAddr: "host:port;host2:port2", the
    # NameServers to register with; empty = a standalone broker that registers nowhere.
    namesrv_addr: str = ""
    # brokerClusterName: the cluster this broker group belongs to.
    broker_cluster_name: str = "DefaultCluster"
    # brokerId: static roles: 0 = the group's master, >= 1 a slave. Controller mode: a stable
    # replica id >= 1 (registered as 0 while master, as RocketMQ 5 does).
    broker_id: int = 0
    # enableControllerMode: roles are elected on etcd (controllerAddr, "h:p;h2:p2", its client
    # endpoints); a master whose lease is not renewed within controllerHeartBeatTimeoutMills
    # (10 s, RocketMQ's) is replaced by a caught-up replica (broker/failover/).
    enable_controller_mode: bool = False
    controller_addr: str = ""
    controller_heart_beat_timeout_mills: int = 10_000
    # brokerHeartbeatInterval (ms): heartbeat on each NameServer session (RocketMQ 5: 1 s); a
    # NameServer drops a broker silent for its brokerNotActiveTimeoutMillis (10 s).
    broker_heartbeat_interval: int = 1000
    # namesrvAccessKey / namesrvSecretKey: sign the broker's NameServer calls (registration,
    # cluster routes) for NameServers with aclEnable (registration needs an admin account of
    # their aclFile); "" = unsigned.
    namesrv_access_key: str = ""
    namesrv_secret_key: str = field(default="", repr=False)
    # haAccessKey / haSecretKey: the replication account (store/ha/auth.py). A master with
    # aclEnable accepts only replicas that prove an admin account of its aclFile, from an
    # address that account may use; a replica with these set replicates only from a master
    # that proves the same secret. "" = none (a master without aclEnable takes any replica).
    ha_access_key: str = ""
    ha_secret_key: str = field(default="", repr=False)
    # haTlsEnable: replication over TLS: the master's listener serves the broker's certificate
    # (tlsCertPath / tlsKeyPath, as the gRPC port; with tlsClientAuth = require a replica must
    # present its own, signed by a CA of tlsTrustCertPath), and a replica verifies its master's
    # against haTlsCaFile (a PEM bundle; "" = the system roots) and the host it dials.
    ha_tls_enable: bool = False
    ha_tls_ca_file: str = ""
    # namesrvTlsEnable: dial the NameServers over TLS, trusting namesrvTlsCaFile (a PEM
    # bundle; "" = the system roots).
    namesrv_tls_enable: bool = False
    namesrv_tls_ca_file: str = ""
    # listen: gRPC address. Loopback by default so a fresh `make run` exposes nothing; port 0 =
    # an ephemeral port (the ready file reports the real one).
    listen: str = "127.0.0.1:8081"
    # wireListen: the wire port (the same calls as gRPC over the Wharf wire protocol,
    # wharf.wire: a round trip ~10x cheaper than a grpc.aio stream message; clients dial it as
    # wire://host:port). "" = the listen host and listen port + 2 (8083 by default; an
    # ephemeral port when listen's is 0), as RocketMQ derives its fast remoting port from the
    # listen port; "off" = none. TLS-only when the listen port is (tlsEnable without
    # tlsListen), plaintext otherwise.
    wire_listen: str = ""
    # v2Fronts: front processes for the official 5.x clients (broker/fronts/): each takes
    # apache.rocketmq.v2 calls on v2FrontsListen and forwards them to the wire port, merging
    # NORMAL sends, so gRPC's per-call work (~570 us a call here) leaves the store's core.
    # 0 = none (the clients use the gRPC port, as before). Needs the wire port; not with
    # aclEnable or a TLS-only broker yet.
    v2_fronts: int = 0
    # v2FrontsListen: the fronts' gRPC address ("" = the listen host and listen port + 4:
    # 8085 by default; an ephemeral port when listen's is 0).
    v2_fronts_listen: str = ""
    # wireTlsListen: the wire port's TLS listener when tlsListen keeps plaintext beside TLS
    # ("" = tlsListen's host, an ephemeral port; broker/frontends/frontend.py TlsSource).
    wire_tls_listen: str = ""
    # remotingListen: the RocketMQ 4.x remoting port (broker/frontends/remoting/), namesrvAddr of 4.x
    # clients; 10911 is RocketMQ's own broker port. "off" = none. On its default address a
    # taken port is one warning and the broker serves without it; set explicitly, it stops
    # the broker. remotingTlsListen: its TLS listener beside plaintext (as wireTlsListen).
    remoting_listen: str = "127.0.0.1:10911"
    remoting_tls_listen: str = ""
    # kafkaListen: the Kafka wire protocol (broker/frontends/kafka/), bootstrap.servers of Kafka
    # clients; 9092 is Kafka's. "off" = none; a taken default port as remotingListen.
    # kafkaAdvertisedAddress: the host:port Metadata answers name for this broker ("" = the
    # kafkaListen address, a wildcard host replaced by the advertised host): behind NAT or in
    # a container set it, or clients bootstrap and then dial an address they cannot reach.
    # kafkaTlsListen: its TLS listener beside plaintext (as wireTlsListen).
    kafka_listen: str = "127.0.0.1:9092"
    kafka_advertised_address: str = ""
    kafka_tls_listen: str = ""
    # kafkaGroupInitialRebalanceDelayMs: Kafka's group.initial.rebalance.delay.ms (3000): a
    # group forming from empty waits this long for more members, extended by each newcomer up to
    # the rebalance timeout. Without it the first member to join is assigned every partition
    # and a rebalance follows at once, and a leader that has not yet fetched a new topic's
    # metadata assigns nothing (kafka-python 3.0.12's leader then never completes the rejoin
    # that follows: tests/broker/kafka/clients). 0 = form at once.
    kafka_group_initial_rebalance_delay_ms: int = 3000
    # kafkaTransactionMaxTimeoutMs: Kafka's transaction.max.timeout.ms, the longest
    # transaction.timeout.ms a transactional producer may ask (INVALID_TRANSACTION_TIMEOUT
    # beyond). Kafka's default is 15 min; 1 h here so Flink's KafkaSink (1 h by default) starts.
    kafka_transaction_max_timeout_ms: int = 3_600_000
    # kafkaTransactionalIdExpirationMs: Kafka's transactional.id.expiration.ms (7 days): an id
    # idle that long (no transaction open) is forgotten (its memory freed, a DEAD record).
    kafka_transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    # metricsListen: Prometheus /metrics address (9100, the node-exporter convention).
    metrics_listen: str = "127.0.0.1:9100"
    # advertisedAddress: the address clients should dial (QueryRoute, BrokerStatus). Empty = the
    # listen host with the real bound port. Set it behind Docker/NAT so clients never get a
    # container IP (a classic RocketMQ pain point).
    advertised_address: str = ""
    # autoCreateTopicEnable: the first send to an unknown topic creates it (RocketMQ default on).
    auto_create_topic_enable: bool = True
    # defaultTopicQueueNums: read/write queues of auto-created topics (RocketMQ's broker uses 8).
    default_topic_queue_nums: int = 8
    # enablePropertyFilter: consumers may subscribe with SQL92 property expressions (RocketMQ's
    # default is off; here a filter costs nothing unless a subscription uses one, ~2 us a
    # message read when it does). Off: such subscriptions are refused, as RocketMQ does.
    enable_property_filter: bool = True
    # autoCreateSubscriptionGroup: a heartbeat / pull / send-back from an unknown group creates it.
    auto_create_subscription_group: bool = True
    # longPollingEnable: park pulls with max_wait_ms until a message arrives (else answer at once).
    long_polling_enable: bool = True
    # maxParkedPulls: bound on parked long-poll pulls; beyond it pulls fail RESOURCE_EXHAUSTED
    # (each parked pull holds a gRPC call and a future: memory must stay bounded).
    max_parked_pulls: int = 10_000
    # defaultPullBatchSize / maxPullBatchSize: messages per pull when max_messages is 0, and the
    # cap (RocketMQ's pullBatchSize is 32; 1024 keeps one reply within a few MiB at 1 KiB).
    default_pull_batch_size: int = 32
    max_pull_batch_size: int = 1024
    # maxPullBytes: budget of one pull, in CommitLog record bytes (one record is always
    # returned). 3 MiB keeps a reply, with its per-message view overhead, under the 4 MiB
    # default receive limit of plain gRPC clients (grpcurl, raw stubs).
    max_pull_bytes: int = 3 * 1024 * 1024
    # flushConsumerOffsetInterval (ms): metadata (offsets, topics, groups) persisted this often
    # when dirty (RocketMQ: 5 s), and always at shutdown.
    flush_consumer_offset_interval: int = 5000
    # channelExpiredTimeout (ms): a client without a heartbeat for this long leaves its groups
    # (RocketMQ: 120 s).
    channel_expired_timeout: int = 120_000
    # maxReconsumeTimes: retries before %DLQ% for groups that do not set retryMaxTimes (16).
    max_reconsume_times: int = 16
    # Transactions (RocketMQ's names and defaults): a half message unresolved after
    # transactionTimeOut ms is checked back every transactionCheckInterval ms, at most
    # transactionCheckMax times, then discarded.
    transaction_time_out: int = 6_000
    transaction_check_interval: int = 30_000
    transaction_check_max: int = 15
    # maxInflightStreamRequests: requests of one SendMessageStream processed concurrently, and
    # pulls of one PullMessageStream in flight (parked ones included); the stream stops
    # reading beyond it (flow control: bounded memory per stream). 64 batches in flight let
    # SYNC_FLUSH group commits gather many waiters.
    max_inflight_stream_requests: int = 64
    # maxConcurrentRpcs: RPCs served at once (parked pulls and open streams included); beyond
    # it gRPC answers RESOURCE_EXHAUSTED, so memory held by in-flight requests stays bounded.
    max_concurrent_rpcs: int = 20_000
    # maxUnreadPullBytesPerClient: message bytes of pull replies one client connection may leave
    # unread in the broker's buffers; its next pull beyond it gets RESOURCE_EXHAUSTED
    # (broker/frontends/reply_budget.py); a PullMessageStream call's pulls wait instead while the call
    # holds that much. A held reply costs ~3x its bytes (proto, serialized copy, gRPC
    # slice): 16 MiB held ~50 MiB of RSS for a stopped consumer, which held 584 MiB without it.
    max_unread_pull_bytes_per_client: int = 16 * 1024 * 1024
    # maxUnreadPullBytes: the same for all connections together (many stalled consumers).
    max_unread_pull_bytes: int = 512 * 1024 * 1024
    # grpcMaxMessageSize: largest gRPC request/reply. A batch may carry up to maxMessageSize of
    # body plus framing; 0 = derived: maxMessageSize + 1 MiB, at least 16 MiB.
    grpc_max_message_size: int = 0
    # shutdownGracePeriod (ms): in-flight RPCs get this long to finish on SIGTERM.
    shutdown_grace_period: int = 5000
    # logLevel: DEBUG, INFO, WARNING, ERROR.
    log_level: str = "INFO"
    # aclEnable: authenticate and authorize every wharf.v1 and apache.rocketmq.v2 request
    # (RocketMQ's name; off by default). Accounts: <storePathRootDir>/config/plain_acl.yml,
    # reloaded within ~1 s of a change (broker/kit/acl/; gRPC health and reflection stay open).
    acl_enable: bool = False
    # aclFile: the accounts file; "" = <storePathRootDir>/config/plain_acl.yml (a compose secret
    # mounts it elsewhere).
    acl_file: str = ""
    # aclMaxClockSkew (ms): a signed request's x-mq-date-time may differ from the broker's
    # clock by this much (15 min); older dates are refused as replays.
    acl_max_clock_skew: int = 900_000
    # --- TLS (broker/tls_settings.py; off by default: nothing changes) ---------------------------------
    # tlsEnable: serve gRPC over TLS. Without tlsListen the listen port is TLS-only (grpcio
    # cannot serve plaintext and TLS on one port); with it, listen stays plaintext.
    tls_enable: bool = False
    # tlsListen: a second, TLS port next to the plaintext listen port ("" = none).
    tls_listen: str = ""
    # tlsCertPath / tlsKeyPath: PEM certificate chain and private key. "" = <store>/config/tls/
    # broker.crt and broker.key. Both missing at start: a development pair is generated there
    # (signed by a one-off CA, broker/kit/tls/certs.py; SHA-256 fingerprint logged).
    tls_cert_path: str = ""
    tls_key_path: str = ""
    # tlsClientAuth: none | require (mutual TLS: clients present a certificate signed by a CA
    # of tlsTrustCertPath, a PEM bundle).
    tls_client_auth: str = "none"
    tls_trust_cert_path: str = ""
    # metricsBearerTokenFile: a file holding the token /metrics requires as
    # "Authorization: Bearer <token>" (401 otherwise). "" = no token needed.
    metrics_bearer_token_file: str = ""
    # metricsTlsEnable: with tlsEnable, /metrics is served over TLS too (the same certificate,
    # following its reloads), so the bearer token never crosses the network in clear; false
    # keeps it plaintext (a scraper that cannot verify the certificate).
    metrics_tls_enable: bool = True
    # --- Connection bounds (broker/kit/bounds.py; every asyncio listener: wire, remoting,
    # Kafka, metrics; gRPC by its own server options) -------------------------------------------
    # connectionMaxIdleMs: a wire or gRPC connection with no call in flight (a parked long
    # poll or an open stream is a call in flight) that sent nothing this long is closed; its
    # client reconnects on its next call. 10 min, Kafka's broker default; 0 = never.
    connection_max_idle_ms: int = 600_000
    # serverChannelMaxIdleTimeSeconds: the same for remoting, RocketMQ's name and default
    # (120 s: its clients heartbeat every broker every 30 s). 0 = never.
    server_channel_max_idle_time_seconds: int = 120
    # kafkaConnectionsMaxIdleMs: the same for Kafka (its connections.max.idle.ms, 10 min; the
    # clients' own is 9 min, so a client closes first). 0 = never.
    kafka_connections_max_idle_ms: int = 600_000
    # frameReadTimeoutMs: a request frame begun must arrive whole within this, and a new
    # connection must send its first bytes within it (a slowloris dribbling 1 byte/s is cut
    # like a silent peer); time the broker stopped reading (back-pressure) does not count.
    # 30 s moves a 100 MiB frame at 3.4 MB/s; gRPC: its HTTP/2 preface and SETTINGS
    # (grpc.server_handshake_timeout_ms). 0 = never.
    frame_read_timeout_ms: int = 30_000
    # maxConnectionsPerListener / maxConnectionsPerAddress: connections open on one listener,
    # and from one client address on it; past either a new connection is closed at once (gRPC:
    # the per-listener cap, grpc.max_allowed_incoming_connections). 0 = no cap. Clients behind
    # one NAT address share the per-address cap.
    max_connections_per_listener: int = 10_000
    max_connections_per_address: int = 1_000
    # maxCallsPerConnection: calls open at once on one authenticated wire connection (past it
    # a call is answered RESOURCE_EXHAUSTED), and gRPC's HTTP/2 max_concurrent_streams (a
    # client queues its streams past it). The SDK keeps a handful, a consumer one parked pull
    # per queue it reads.
    max_calls_per_connection: int = 10_000
    # maxCallsBeforeAuth / maxBytesBeforeAuth: with aclEnable (Kafka: SASL), a connection on
    # which no request has authenticated yet may have this many calls open (wire: refused past
    # it; remoting, Kafka: reading pauses) and buffer this many bytes (wire, Kafka: a frame or
    # queued requests past it closes the connection; remoting signs the whole frame, body
    # included, so its first frame may be as large as any). 512 KiB is Kafka's
    # sasl.server.max.receive.size.
    max_calls_before_auth: int = 16
    max_bytes_before_auth: int = 512 * 1024
    # maxBufferedBytesPerConnection: bytes of received requests one connection may have waiting
    # for their handlers (wire: parsed, not yet taken; remoting, Kafka: requests in flight)
    # before the broker stops reading it (TCP then holds the client's writes).
    max_buffered_bytes_per_connection: int = 8 * 1024 * 1024
    # maxBufferedFrameBytes: bytes held in partially received frames by all connections of the
    # wire, remoting and Kafka listeners together; a connection whose bytes take the total past
    # it is closed (8 connections each sending 60 MiB of a Kafka frame held 592 MB of RSS).
    max_buffered_frame_bytes: int = 256 * 1024 * 1024
    # grpcMaxConnectionAgeMs: gRPC connections older than this are sent GOAWAY (their calls get
    # 30 s to end, then the connection closes; clients reconnect): the bound on a peer that
    # dribbles HTTP/2 frames inside a call. 0 = never (long pull streams are not cut).
    grpc_max_connection_age_ms: int = 0


@dataclass(frozen=True, slots=True)
class Config:
    """Everything resolved at start: the broker's settings and the store's."""

    broker: BrokerConfig
    store: StoreConfig

    def replace_store(self, **changes: object) -> Config:
        return dataclasses.replace(self, store=self.store.replace(**changes))

    @property
    def rpc_max_message_size(self) -> int:
        """gRPC's and the wire port's largest message: grpcMaxMessageSize, or what the largest
        send batch needs (the store's maxMessageSize plus 1 MiB of framing, at least 16 MiB)."""
        return self.broker.grpc_max_message_size or max(
            16 * 1024 * 1024, self.store.max_message_size + 1024 * 1024
        )


def parse_host_port(value: str, setting: str) -> tuple[str, int]:
    """'host:port' -> (host, port); raises ValueError naming ``setting``."""
    host, sep, port_text = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{setting}: expected HOST:PORT with a port 0..65535, got {value!r}")
    return host, int(port_text)
