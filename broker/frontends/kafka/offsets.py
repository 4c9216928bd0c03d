"""ListOffsets, OffsetCommit and OffsetFetch.

- ListOffsets (after the core's read-your-writes wait, the port's ``wait_own_writes``: once,
  at most 1 s, for the store's dispatch to show what was acknowledged): timestamp -2 (earliest) = the queue's min offset, -1 (latest) = its max offset
  (the high watermark), any other timestamp = the first offset stored at or after it (the
  store's offset-by-time lookup, by STORE time: a record's own CreateTime may be older);
  none = the max offset, as Kafka answers. v0's ``old_style_offsets`` holds the one offset.
- OffsetCommit: checked by the coordinator (generation, member; generation -1 with no member =
  a simple or admin commit, allowed while the group has no members) and stored through
  the port's ``commit_offset`` in the broker's one offset table (``config/consumerOffset.json``), so
  ``wharf group progress`` and the lag metric see Kafka groups. Kafka's per-offset metadata
  string is not kept: OffsetFetch answers "" for it. Retention times are ignored (offsets live
  until the group or topic is deleted, as RocketMQ's). Answered once the request's offsets
  of this broker's table are in ``consumerOffset.json``'s journal (the port's ``offsets_durable``:
  written, so a kill -9 cannot take them back, and fsynced under SYNC_FLUSH), as Kafka answers
  once the commit is in ``__consumer_offsets``; concurrent commits share one write (a group
  commit, broker/meta/persister.py). A failed write: KAFKA_STORAGE_ERROR (retriable; the
  offset is kept in memory and the next round retries the file). Under SYNC_MASTER the answer
  also waits until the in-sync replicas applied the commit (``MetadataFanout.offsets_durable``,
  as Kafka's commit waits for the offsets partition's ISR): not applied within slaveTimeout,
  COORDINATOR_NOT_AVAILABLE; a master whose lease ran out meanwhile, NOT_COORDINATOR (Kafka's
  codes for those cases; both retriable, the second after looking the coordinator up again).
- OffsetFetch: -1 for a partition without a committed offset; a null topic list (v2+) = every
  partition the group committed.
- In a cluster: ListOffsets of a partition another broker leads is NOT_LEADER_OR_FOLLOWER;
  OffsetCommit / OffsetFetch go to the group's coordinator (else NOT_COORDINATOR), which
  keeps each partition's offset where RocketMQ keeps it: in the offset table of the group that
  holds the queue (its own, or another master's over ``cluster_routes.offsets``, by queue id).
  That master answers the forwarded commit (wharf.v1 UpdateConsumerOffset with ``durable``,
  ``broker/cluster/peer_offsets.py``) on the same terms as this broker's own: once the offset is
  in its file (fsynced under SYNC_FLUSH) and, under SYNC_MASTER, on its in-sync replicas, so
  a kill -9 of that broker after the answer cannot take the commit back. Refused there as not
  durable or fenced (UNAVAILABLE): COORDINATOR_NOT_AVAILABLE;
  by a replica (FAILED_PRECONDITION: the routes were stale; the partition's layout is looked
  up again), gone, or not answering in time: REQUEST_TIMED_OUT (retriable). A null
  topic list (all committed) names the partitions of this broker's own queues only. Only a
  master coordinates (``cluster.py``), and a partition of its own group goes to its own table
  or nowhere: one that stepped down after the coordinator check answers REQUEST_TIMED_OUT.
  Otherwise a master stepping down (its lease lost; the NameServer still naming it for
  ~0.5 s) would forward the commit to itself as to another group's master, whose
  UpdateConsumerOffset answers at once: acknowledged, in no file and on no replica, and gone
  once it came back as a replica (the fault campaign: "committed 1 after 125 was
  acknowledged").
- A committed transaction's offsets (``apply_txn_offsets``) go the same ways: another group's
  queue through ``PeerOffsets.commit``, this group's into its table, waited for durable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from wharf.broker.cluster.peer_offsets import PeerOffsetError
from wharf.broker.errors import NotReplicatedError, UnavailableError
from wharf.broker.frontends.kafka.coordinator import Coordinator
from wharf.broker.frontends.kafka.env import KAFKA_REQUEST, KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.groups import check_group
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Perm
from wharf.store.errors import MasterFencedError

__all__ = ["OffsetHandlers"]

log = logging.getLogger("broker.kafka")

EARLIEST = -2
LATEST = -1
# A durable forwarded commit the partition's master refused (gRPC status name): stored there
# but not on its replicas, or its file write failed, or its lease ran out (UNAVAILABLE):
# COORDINATOR_NOT_AVAILABLE, as for the coordinator's own group. Anything else (a replica,
# FAILED_PRECONDITION; no answer in time; unreachable): REQUEST_TIMED_OUT. All retriable.
_PEER_REFUSALS = {"UNAVAILABLE": Code.COORDINATOR_NOT_AVAILABLE}


class OffsetHandlers:
    def __init__(self, env: KafkaEnv, coordinator: Coordinator) -> None:
        self.env = env
        self.coordinator = coordinator
        # (group, topic, queue id, home) -> an open transaction holds an offset for it (home:
        # the brokerName of the group holding the queue, "" this broker's)
        self.pending_txn: Callable[[str, str, int, str], bool] = lambda g, t, q, home: False

    async def _partition_code(self, conn: KafkaConnection, topic: str, partition: int) -> Code:
        """May ``conn`` use the partition (of any broker) for its group's offsets?"""
        env = self.env
        if not env.allowed(conn, "topic", topic, Perm.SUB):
            return Code.TOPIC_AUTHORIZATION_FAILED
        if not 0 <= partition < (await env.layout(topic)).total:
            return Code.UNKNOWN_TOPIC_OR_PARTITION
        return Code.NONE

    async def _queue(self, conn: KafkaConnection, topic: str, partition: int) -> tuple[int, Code]:
        """This broker's queue of a partition it leads (ListOffsets)."""
        if not self.env.allowed(conn, "topic", topic, Perm.SUB):
            return -1, Code.TOPIC_AUTHORIZATION_FAILED
        return await self.env.queue_of(topic, partition)

    async def _group_code(self, conn: KafkaConnection, group_id: str) -> Code:
        try:
            check_group(self.env, conn, group_id)
        except KafkaError as exc:
            return exc.code
        if not await self.env.coordinates(group_id):
            return Code.NOT_COORDINATOR
        return Code.NONE

    async def list_offsets(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        # "latest" right after a produce's ack includes it (the core's read-your-writes wait).
        port = self.env.ctx.port
        await port.wait_own_writes(KAFKA_REQUEST)
        topics = []
        for t in body["topics"]:
            rows = []
            for p in t["partitions"]:
                index, stamp = p["partition_index"], p["timestamp"]
                queue, code = await self._queue(conn, t["name"], index)
                offset = -1
                if code == Code.NONE:
                    if stamp == EARLIEST:
                        offset = port.min_offset(t["name"], queue)
                    elif stamp == LATEST:
                        offset = port.max_offset(t["name"], queue)
                        if body.get("isolation_level") == 1:  # read_committed: the LSO
                            offset = port.read.txns.lso(t["name"], queue, offset)
                    else:
                        offset = port.offset_at(t["name"], queue, stamp)
                rows.append(
                    {
                        "partition_index": index,
                        "error_code": code,
                        "old_style_offsets": [offset] if offset >= 0 else [],
                        "timestamp": -1,
                        "offset": offset,
                        "leader_epoch": 0,
                    }
                )
            topics.append({"name": t["name"], "partitions": rows})
        return {"topics": topics}

    async def offset_commit(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        group_id = body["group_id"]
        group_code = await self._group_code(conn, group_id)
        if group_code == Code.NONE:
            group_code = self.coordinator.check_commit(
                group_id, body["generation_id"], body["member_id"]
            )
        local: list[dict[str, Any]] = []  # rows committed to this broker's table
        topics = []
        for t in body["topics"]:
            results = await asyncio.gather(*(
                self._commit(conn, group_id, t["name"], p["partition_index"],
                             p["committed_offset"], group_code)
                for p in t["partitions"]
            ))  # fmt: skip
            rows = []
            for p, (code, here) in zip(t["partitions"], results, strict=True):
                rows.append({"partition_index": p["partition_index"], "error_code": code})
                if here:
                    local.append(rows[-1])
            topics.append({"name": t["name"], "partitions": rows})
        if local:
            # Answered once in the files (fsynced under SYNC_FLUSH): before, the answer went
            # out at once and a kill -9 up to flushConsumerOffsetInterval (5 s) later took the
            # commit back, the group re-reading what it had committed.
            code = Code.NONE
            try:
                await self.env.ctx.port.offsets_durable()
            except NotReplicatedError as exc:
                code = Code.COORDINATOR_NOT_AVAILABLE
                log.warning("kafka: commit of %s not replicated: %s", group_id, exc)
            except MasterFencedError:
                code = Code.NOT_COORDINATOR  # another replica may be the master now
            except UnavailableError as exc:  # MetadataNotDurable: the write failed
                code = Code.KAFKA_STORAGE_ERROR
                log.warning("kafka: commit of %s not durable: %s", group_id, exc)
            for row in local:
                row["error_code"] = code or row["error_code"]
        return {"topics": topics}

    async def _commit(
        self, conn: KafkaConnection, group_id: str, topic: str, index: int, offset: int,
        group_code: Code,
    ) -> tuple[Code, bool]:  # fmt: skip
        """The partition's code, and whether it was committed to this broker's table (the
        answer then waits for the table's file)."""
        code = group_code or await self._partition_code(conn, topic, index)
        if code != Code.NONE:
            return code, False
        if offset < 0:
            return Code.INVALID_COMMIT_OFFSET_SIZE, False
        home = await self.env.offsets_home(topic, index)
        if home is None:
            return Code.UNKNOWN_TOPIC_OR_PARTITION, False
        address, queue = home
        if address is None:
            self.env.ctx.port.commit_offset(group_id, topic, queue, offset)
            return Code.NONE, True
        peers = self.env.peer_offsets()
        if not address or peers is None:
            return Code.REQUEST_TIMED_OUT, False  # its group's master is gone: retriable
        try:
            await peers.commit(address, group_id, topic, queue, offset)  # durable there
        except PeerOffsetError as exc:
            log.warning("kafka: commit of %s %s-%d at %s failed: %s", group_id, topic, index,
                        address, exc)  # fmt: skip
            if exc.code == "FAILED_PRECONDITION" and self.env.cluster is not None:
                self.env.cluster.forget(topic)  # no master there now: the retry looks again
            return _PEER_REFUSALS.get(exc.code, Code.REQUEST_TIMED_OUT), False
        return Code.NONE, False

    async def apply_txn_offsets(self, offsets: list[tuple[str, str, int, int, str]]) -> None:
        """A committed transaction's offsets (group, topic, queue id, offset, home) into the
        table of the group holding each queue: this broker's ("" home: returning once in its
        journal, as OffsetCommit) or another group's master (``PeerOffsets.commit``, as
        OffsetCommit's). Raises when one is not taken: the caller retries them all (the
        same values again: harmless)."""
        port = self.env.ctx.port
        peers = self.env.peer_offsets()
        for group, topic, queue, offset, home in offsets:
            if not home:
                continue
            address = await self.env.master_of(topic, home)
            if not address or peers is None:
                raise PeerOffsetError(f"the master of {home} is gone")
            await peers.commit(address, group, topic, queue, offset)
        local = [o for o in offsets if not o[4]]
        for group, topic, queue, offset, _ in local:
            port.commit_offset(group, topic, queue, offset)
        if local:
            await port.offsets_durable()

    async def offset_fetch(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        group_id = body["group_id"]
        port = self.env.ctx.port
        group_code = await self._group_code(conn, group_id)
        requested = body["topics"]
        if group_code != Code.NONE:
            # v0-v1 have no top-level error code: the group's error goes on each partition
            topics = [
                {"name": t["name"], "partitions": [
                    {"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1,
                     "metadata": "", "error_code": group_code}
                    for i in t["partition_indexes"]]}
                for t in requested or ()
            ] if version < 2 else []  # fmt: skip
            return {"topics": topics, "error_code": group_code}
        if requested is None:
            committed = port.offsets_of_group(group_id)
            wanted = [
                (name, await self._own_partitions(name, queues))
                for name, queues in sorted(committed.items())
            ]
        else:
            wanted = [(t["name"], t["partition_indexes"]) for t in requested]
        topics = []
        for name, partitions in wanted:
            rows = await asyncio.gather(
                *(self._fetch(conn, group_id, name, index) for index in partitions)
            )
            if version >= 7 and body["require_stable"]:
                await self._unstable(group_id, name, rows)
            topics.append({"name": name, "partitions": rows})
        return {"topics": topics, "error_code": 0}

    async def _unstable(self, group_id: str, topic: str, rows: list[dict[str, Any]]) -> None:
        """KIP-447: a partition whose offset an open transaction will commit answers
        UNSTABLE_OFFSET_COMMIT (88) to a consumer that asks for stable offsets (it retries),
        so a new owner does not resume from the offset before that transaction's. Pending
        offsets live at the group's coordinator, this broker, whoever coordinates the
        transaction."""
        for row in rows:
            home = await self.env.txn_offset_home(topic, row["partition_index"])
            pending = home is not None and self.pending_txn(group_id, topic, home[1], home[0])
            if row["error_code"] == Code.NONE and pending:
                row["committed_offset"], row["error_code"] = -1, 88

    async def _own_partitions(self, topic: str, queues: Iterable[int]) -> list[int]:
        """The partition numbers of this broker's queues of ``topic`` (a listing of every
        committed offset names this broker's table only)."""
        own = [s for s in (await self.env.layout(topic)).spans if s.leader == self.env.node_id]
        first = own[0].first if own else 0
        return sorted(first + q for q in queues)

    async def _fetch(
        self, conn: KafkaConnection, group_id: str, topic: str, index: int
    ) -> dict[str, Any]:
        code = await self._partition_code(conn, topic, index)
        offset = -1
        home = await self.env.offsets_home(topic, index) if code == Code.NONE else None
        if code == Code.UNKNOWN_TOPIC_OR_PARTITION:
            code = Code.NONE  # Kafka answers -1 for a partition it does not know
        if home is not None:
            address, queue = home
            peers = self.env.peer_offsets()
            if address is None:
                offset = self.env.ctx.port.committed_offset(group_id, topic, queue)
            elif not address or peers is None:
                code = Code.REQUEST_TIMED_OUT  # its group's master is gone: retriable
            else:
                try:
                    offset = await peers.query(address, group_id, topic, queue)
                except PeerOffsetError as exc:
                    log.warning("kafka: offset of %s %s-%d at %s: %s", group_id, topic, index,
                                address, exc)  # fmt: skip
                    code = Code.REQUEST_TIMED_OUT
        return {
            "partition_index": index,
            "committed_offset": offset,
            "committed_leader_epoch": -1,
            "metadata": "",
            "error_code": code,
        }
