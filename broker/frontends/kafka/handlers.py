"""The handler table: API key -> coroutine, over the broker's context (``KafkaEnv``), plus
InitProducerId. One ``KafkaHandlers`` per broker: it owns the group coordinator and the
idempotent producers' table, started and stopped with the part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wharf.broker.frontends.kafka.admin import AdminHandlers
from wharf.broker.frontends.kafka.admin_acls import AclHandlers
from wharf.broker.frontends.kafka.admin_configs import ConfigHandlers
from wharf.broker.frontends.kafka.admin_groups import GroupAdminHandlers
from wharf.broker.frontends.kafka.admin_scram import ScramAdminHandlers
from wharf.broker.frontends.kafka.coordinator import Coordinator
from wharf.broker.frontends.kafka.delete_records import DeleteRecordsHandler
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.fetch import FetchHandler
from wharf.broker.frontends.kafka.groups import GroupHandlers
from wharf.broker.frontends.kafka.metadata import MetadataHandlers
from wharf.broker.frontends.kafka.offsets import OffsetHandlers
from wharf.broker.frontends.kafka.produce import ProduceHandler
from wharf.broker.frontends.kafka.producers import ProducerTable, group_base
from wharf.broker.frontends.kafka.sasl import SaslHandlers
from wharf.broker.frontends.kafka.server import Handler, KafkaConnection
from wharf.broker.frontends.kafka.txn.coordinator import TxnCoordinator
from wharf.broker.frontends.kafka.txn.handlers import TxnHandlers
from wharf.broker.frontends.kafka.txn.markers import MarkerSender
from wharf.broker.frontends.kafka.txn.verify import TxnVerifier
from wharf.store.model import StoredMessage

__all__ = ["KafkaHandlers"]


class KafkaHandlers:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env
        ctx = env.ctx
        port = ctx.port

        def read(topic: str, queue_id: int, offset: int, count: int) -> list[StoredMessage]:
            result = port.read_now(topic, queue_id, offset, count, None, 8 << 20)
            return list(getattr(result, "messages", []))

        def queue_range(topic: str, queue_id: int) -> tuple[int, int]:
            return port.min_offset(topic, queue_id), port.max_offset(topic, queue_id)

        def leading() -> bool:  # the Kafka front end leads (always, alone; once settled)
            return env.cluster is None or env.cluster.is_master

        config_dir = Path(port.store_config.store_path_root_dir) / "config"
        config = ctx.config
        base = group_base(config.broker_name) if config.namesrv_addr else 0
        self.producers = ProducerTable(
            config_dir, read, queue_range, config.broker_id, leading, base
        )
        self.coordinator = Coordinator(ctx.config.kafka_group_initial_rebalance_delay_ms)
        self.metadata = MetadataHandlers(env)
        self.offsets = OffsetHandlers(env, self.coordinator)
        self.markers = MarkerSender(env)  # WriteTxnMarkers to other groups' masters
        self.txn_coordinator = TxnCoordinator(
            port, port.read.txns, self.producers.allocate, self.offsets.apply_txn_offsets,
            ctx.config.kafka_transaction_max_timeout_ms,
            ctx.config.kafka_transactional_id_expiration_ms, env.promoted, self.markers.send,
        )  # fmt: skip
        # A new master's Kafka front end leads once the coordinator replayed the replicated
        # logs as the leader (not merely once the store is promoted): before, its first
        # reads used the replica's index (read_committed saw open transactions' records and
        # markers as records) and its first transactions requests met a coordinator about
        # to clear its state.
        env.settled = self.txn_coordinator.leads
        self.txns = TxnHandlers(env, self.txn_coordinator, self.coordinator)
        # (partition = queue: a transaction's offsets are of this broker's queues)
        self.offsets.pending_txn = self.txn_coordinator.pending_offsets
        # (a foreign transaction's first batch in a partition asks its coordinator: verify.py)
        self.verifier = TxnVerifier(env, self.txn_coordinator)
        self.produce = ProduceHandler(env, self.producers, self.txn_coordinator, self.verifier)
        self.fetch = FetchHandler(env, self.txn_coordinator.ready)
        self.groups = GroupHandlers(env, self.coordinator)
        self.configs = ConfigHandlers(env)
        self.admin = AdminHandlers(env, self.producers, self.configs)
        self.group_admin = GroupAdminHandlers(env, self.coordinator)
        self.acls = AclHandlers(env)
        self.scram = ScramAdminHandlers(env)
        self.sasl = SaslHandlers(env)
        self.records = DeleteRecordsHandler(env)

    def load_blocking(self) -> None:
        self.producers.load_blocking()

    async def replay(self) -> None:
        """The transaction log read back before the listeners open (txn/coordinator.py)."""
        await self.txn_coordinator.replay()

    def start(self) -> None:
        self.coordinator.start()
        self.txn_coordinator.start()
        self.env.ctx.port.clients.add_view(self.coordinator)

    def stop(self) -> None:
        self.env.ctx.port.clients.remove_view(self.coordinator)
        self.coordinator.stop()
        self.txn_coordinator.stop_soon()
        self.markers.close()
        self.verifier.links.close()

    def table(self) -> dict[int, Handler]:
        return {
            0: self.produce.produce,
            1: self.fetch.fetch,
            2: self.offsets.list_offsets,
            3: self.metadata.metadata,
            8: self.offsets.offset_commit,
            9: self.offsets.offset_fetch,
            10: self.metadata.find_coordinator,
            11: self.groups.join_group,
            12: self.groups.heartbeat,
            13: self.groups.leave_group,
            14: self.groups.sync_group,
            15: self.groups.describe_groups,
            16: self.groups.list_groups,
            17: self.sasl.handshake,
            18: self.metadata.api_versions,
            19: self.admin.create_topics,
            20: self.admin.delete_topics,
            21: self.records.delete_records,
            22: self.init_producer_id,
            24: self.txns.add_partitions,
            25: self.txns.add_offsets,
            26: self.txns.end_txn,
            27: self.txns.write_txn_markers,
            28: self.txns.txn_offset_commit,
            29: self.acls.describe_acls,
            30: self.acls.create_acls,
            31: self.acls.delete_acls,
            32: self.configs.describe_configs,
            33: self.configs.alter_configs,
            36: self.sasl.authenticate,
            37: self.admin.create_partitions,
            42: self.group_admin.delete_groups,
            44: self.configs.incremental_alter_configs,
            47: self.group_admin.offset_delete,
            50: self.scram.describe,
            51: self.scram.alter,
            65: self.txns.describe_transactions,
            66: self.txns.list_transactions,
        }

    async def init_producer_id(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        if body["transactional_id"] is not None:
            return await self.txns.init_producer_id(
                body["transactional_id"], body["transaction_timeout_ms"]
            )
        return {
            "error_code": 0,
            "producer_id": await self.producers.allocate(),
            "producer_epoch": 0,
        }
