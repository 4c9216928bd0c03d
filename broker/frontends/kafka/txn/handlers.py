"""The transaction APIs (``apis_txn.py``) over the coordinator (``coordinator.py``):
InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit,
EndTxn, DescribeTransactions, ListTransactions, and WriteTxnMarkers (another coordinator's
markers for this broker's partitions: txn/partition_leader.py). Requests name Kafka
partitions; the coordinator keeps this broker's queues and, for a partition another broker
group leads, that group's name and queue (``env.txn_home``; its markers go there).
TxnOffsetCommit's offsets are kept by (topic, queue id, home: the brokerName of the group
holding the queue, "" this broker's), so a commit applies each where OffsetCommit keeps it.
When another broker coordinates the transactional id than the group, AddOffsetsToTxn adds
the group coordinator's pseudo-partition (brokerName, ``OFFSETS_TOPIC``) to the transaction
and the offsets wait at the group's coordinator, ended by that marker (Kafka's way: the
group coordinator holds them by producer id; txn/partition_leader.py). The refusals are
``state.TxnError``'s codes (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS
...), the storage ones ``KafkaError``'s.
"""

from __future__ import annotations

from typing import Any

from wharf.broker.frontends.kafka.coordinator import Coordinator
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.groups import check_group
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.frontends.kafka.txn.coordinator import TxnCoordinator
from wharf.broker.frontends.kafka.txn.state import (
    OFFSETS_TOPIC,
    Offsets,
    TxnError,
    TxnMetadata,
    TxnState,
)
from wharf.broker.kit.acl.rules import Perm

__all__ = ["STATE_NAMES", "TxnHandlers"]

# Kafka's names of the states (DescribeTransactions, ListTransactions, kafka-transactions.sh)
STATE_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
TRANSACTIONAL_ID_NOT_FOUND = 105


def _code(exc: TxnError | KafkaError) -> int:
    return int(exc.code)


class TxnHandlers:
    def __init__(self, env: KafkaEnv, txns: TxnCoordinator, groups: Coordinator) -> None:
        self.env = env
        self.txns = txns
        self.groups = groups

    async def init_producer_id(self, tid: str, timeout_ms: int) -> dict[str, Any]:
        try:
            meta = await self.txns.init_producer_id(tid, timeout_ms)
        except (TxnError, KafkaError) as exc:
            return {"error_code": _code(exc), "producer_id": -1, "producer_epoch": -1}
        return {"error_code": 0, "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch}  # fmt: skip

    async def add_partitions(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        env = self.env
        wanted: set[tuple[str, int]] = set()
        remote: set[tuple[str, str, int]] = set()  # (another group, topic, its queue)
        codes: dict[tuple[str, int], int] = {}
        for t in body["topics"]:
            for index in t["partitions"]:
                code: int = Code.NONE
                queue = -1
                if not env.allowed(conn, "topic", t["name"], Perm.PUB):
                    code = Code.TOPIC_AUTHORIZATION_FAILED
                else:
                    group, queue, code = await env.txn_home(t["name"], index)
                    topic = env.ctx.port.topic(t["name"])
                    if (
                        code == Code.NONE
                        and group is None
                        and (topic is None or queue >= topic.write_queue_nums)
                    ):
                        code = Code.UNKNOWN_TOPIC_OR_PARTITION
                codes[(t["name"], index)] = code
                if code == Code.NONE and group is not None:
                    remote.add((group, t["name"], queue))
                elif code == Code.NONE:
                    wanted.add((t["name"], queue))
        if all(c == Code.NONE for c in codes.values()):
            try:
                await self.txns.add_partitions(
                    body["transactional_id"], body["producer_id"], body["producer_epoch"],
                    wanted, frozenset(remote),
                )  # fmt: skip
            except (TxnError, KafkaError) as exc:
                codes = dict.fromkeys(codes, _code(exc))
        else:  # Kafka: the others OPERATION_NOT_ATTEMPTED (55), nothing added
            codes = {k: (c if c != Code.NONE else 55) for k, c in codes.items()}
        results: dict[str, list[dict[str, int]]] = {}
        for (name, index), code in codes.items():
            results.setdefault(name, []).append(
                {"partition_index": index, "partition_error_code": code}
            )
        return {"results": [{"name": n, "results": r} for n, r in results.items()]}

    async def add_offsets(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        group = body["group_id"]
        try:
            check_group(self.env, conn, group)
            home = await self.env.group_coordinator(group)
            if home is None:
                raise KafkaError(Code.COORDINATOR_NOT_AVAILABLE, f"no coordinator of {group!r}")
            await self.txns.add_offsets(
                body["transactional_id"], body["producer_id"], body["producer_epoch"],
                group, home,
            )  # fmt: skip
        except (TxnError, KafkaError) as exc:
            return {"error_code": _code(exc)}
        return {"error_code": 0}

    async def txn_offset_commit(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        group = body["group_id"]
        code: int = Code.NONE
        try:
            check_group(self.env, conn, group)
        except KafkaError as exc:
            code = exc.code
        if code == Code.NONE and not await self.env.coordinates(group):
            code = Code.NOT_COORDINATOR
        if code == Code.NONE and version >= 3 and body["generation_id"] >= 0:
            # KIP-447: a zombie of an old generation cannot commit its offsets
            code = self.groups.check_commit(group, body["generation_id"], body["member_id"])
        offsets: Offsets = {}
        rows: dict[tuple[str, int], int] = {}
        for t in body["topics"]:
            for p in t["partitions"]:
                index = p["partition_index"]
                rows[(t["name"], index)] = code
                if code != Code.NONE:
                    continue
                home = await self.env.txn_offset_home(t["name"], index)
                if home is None:
                    rows[(t["name"], index)] = Code.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                offsets[(t["name"], home[1], home[0])] = (
                    p["committed_offset"],
                    p["committed_metadata"] or "",
                )
        if code == Code.NONE and all(c == Code.NONE for c in rows.values()):
            try:
                await self._pending(body, group, offsets)
            except (TxnError, KafkaError) as exc:
                rows = dict.fromkeys(rows, _code(exc))
        topics: dict[str, list[dict[str, int]]] = {}
        for (name, index), c in rows.items():
            topics.setdefault(name, []).append({"partition_index": index, "error_code": c})
        return {"topics": [{"name": n, "partitions": p} for n, p in topics.items()]}

    async def _pending(self, body: dict[str, Any], group: str, offsets: Offsets) -> None:
        """The offsets held until the transaction ends: in its metadata when this broker
        coordinates the transactional id too, else in the producer's registration here,
        ended by the coordinator's marker (txn/partition_leader.py)."""
        tid, pid, epoch = body["transactional_id"], body["producer_id"], body["producer_epoch"]
        if await self.env.coordinates(tid):
            await self.txns.txn_offsets(tid, pid, epoch, group, offsets)
            return
        await self.txns.ready.wait()
        if not self.txns.leads():
            raise KafkaError(Code.NOT_COORDINATOR, "this broker does not lead: ask again")
        await self.txns.leader.txn_offsets(pid, epoch, group, offsets)

    async def end_txn(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            await self.txns.end_txn(
                body["transactional_id"], body["producer_id"], body["producer_epoch"],
                body["committed"],
            )  # fmt: skip
        except (TxnError, KafkaError) as exc:
            return {"error_code": _code(exc)}
        return {"error_code": 0}

    async def write_txn_markers(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Another coordinator's markers for partitions this broker leads (admin accounts
        only under ACL: Kafka's CLUSTER_ACTION)."""
        env = self.env
        admin = env.allowed(conn, "admin", "", Perm.ANY)
        await self.txns.ready.wait()
        out = []
        for marker in body["markers"]:
            rows: dict[tuple[str, int], int] = {}
            queues: set[tuple[str, int]] = set()
            offsets = False  # the pseudo-partition of the offsets pending here
            for t in marker["topics"]:
                for index in t["partition_indexes"]:
                    code: int = Code.CLUSTER_AUTHORIZATION_FAILED
                    if admin and t["name"] == OFFSETS_TOPIC:
                        code, offsets = Code.NONE, True
                    elif admin:
                        queue, code = await env.queue_of(t["name"], index)
                        if code == Code.NONE:
                            queues.add((t["name"], queue))
                    rows[(t["name"], index)] = code
            if (queues or offsets) and not self.txns.leads():
                rows = dict.fromkeys(rows, Code.NOT_LEADER_OR_FOLLOWER)
            elif queues or offsets:
                try:
                    await self.txns.leader.end(
                        marker["producer_id"], marker["producer_epoch"],
                        marker["transaction_result"], queues,
                    )  # fmt: skip
                except KafkaError as exc:
                    rows = {k: (c or int(exc.code)) for k, c in rows.items()}
            topics: dict[str, list[dict[str, int]]] = {}
            for (name, index), c in rows.items():
                topics.setdefault(name, []).append({"partition_index": index, "error_code": c})
            out.append({"producer_id": marker["producer_id"],
                        "topics": [{"name": n, "partitions": p} for n, p in topics.items()]})  # fmt: skip
        return {"markers": out}

    # --- operators -----------------------------------------------------------------------------
    async def describe_transactions(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        admin = self.env.allowed(conn, "admin", "", Perm.ANY)
        states = []
        for tid in body["transactional_ids"]:
            meta = self.txns.metas.get(tid) if admin else None
            if meta is None:
                code = TRANSACTIONAL_ID_NOT_FOUND if admin else 53
                states.append({"error_code": code, "transactional_id": tid,
                               "transaction_state": "", "transaction_timeout_ms": 0,
                               "transaction_start_time_ms": -1, "producer_id": -1,
                               "producer_epoch": -1, "topics": []})  # fmt: skip
                continue
            states.append(await self._described(meta))
        return {"transaction_states": states}

    async def _described(self, meta: TxnMetadata) -> dict[str, Any]:
        """Every partition of the transaction, other groups' too (a partition leader's
        verification reads them: txn/verify.py)."""
        topics: dict[str, list[int]] = {}
        for topic, queue in sorted(meta.partitions):
            topics.setdefault(topic, []).append(await self._partition(topic, queue))
        for group, topic, queue in sorted(meta.remote):
            if topic == OFFSETS_TOPIC:
                continue  # a group's pending offsets at its coordinator: no partition
            index = await self._remote_partition(topic, group, queue)
            if index is not None:
                topics.setdefault(topic, []).append(index)
        return {
            "error_code": 0,
            "transactional_id": meta.transactional_id,
            "transaction_state": STATE_NAMES[meta.state],
            "transaction_timeout_ms": meta.timeout_ms,
            "transaction_start_time_ms": meta.start_ms if meta.open else -1,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
        }

    async def _partition(self, topic: str, queue: int) -> int:
        """The Kafka partition of this broker's queue."""
        env = self.env
        own = [s for s in (await env.layout(topic)).spans if s.leader == env.node_id]
        return (own[0].first if own else 0) + queue

    async def _remote_partition(self, topic: str, group: str, queue: int) -> int | None:
        """The Kafka partition of group ``group``'s queue (None: that group holds the topic
        no more), numbered as the NameServer routes number it for clients."""
        spans = [s for s in (await self.env.layout(topic)).spans if s.broker_name == group]
        if not spans and self.env.cluster is not None:
            layout = await self.env.layout(topic, fresh=True)
            spans = [s for s in layout.spans if s.broker_name == group]
        return spans[0].first + queue if spans and queue < spans[0].count else None

    async def list_transactions(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        names = {v: k for k, v in STATE_NAMES.items()}
        wanted = {names[s] for s in body["state_filters"] if s in names}
        unknown = [s for s in body["state_filters"] if s not in names]
        pids = set(body["producer_id_filters"])
        admin = self.env.allowed(conn, "admin", "", Perm.ANY)
        rows = [
            {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
             "transaction_state": STATE_NAMES[m.state]}
            for m in (self.txns.metas.values() if admin else ())
            if (not body["state_filters"] or m.state in wanted)
            and (not pids or m.producer_id in pids)
        ]  # fmt: skip
        return {"error_code": 0, "unknown_state_filters": unknown, "transaction_states": rows}
