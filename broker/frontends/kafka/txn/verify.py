"""KIP-890's server-side defence, across broker groups: before the first batch of a
transaction another group's master coordinates goes into a partition this broker leads, the
leader asks that coordinator whether the transaction is ongoing with the batch's producer id
and epoch and has the partition. Only then is it admitted (``PartitionLeader.admit``): a
batch the producer sent without AddPartitionsToTxn (a client bug), or late after its
transaction ended, would be ended by no marker and hold the partition's LSO for ever.

The question is DescribeTransactions (API 65 v0) over ``link.py``'s links (the link account,
an admin, under ACL), not Kafka's inter-broker AddPartitionsToTxn v4 ``verify_only``: every
Wharf broker already serves it, answered from the coordinator's memory with the state, the
producer id and epoch and the partitions (other groups' numbered as the NameServer routes
number them, as the client's Produce does); v4 would have to be offered to clients in
ApiVersions with a second request shape, for the same answer. One question per Produce
request and producer (its partitions together); a partition verified and written to is
registered here for the transaction's life (``PartitionLeader.registered``), so its later
batches ask nothing: steady produce pays nothing.

Answers, as Kafka's leader maps its coordinator's (ReplicaManager, AddPartitionsToTxnManager):
not Ongoing or the partition not in it, INVALID_TXN_STATE; another producer id or no such
transactional id, INVALID_PRODUCER_ID_MAPPING; another epoch, INVALID_PRODUCER_EPOCH
(PRODUCER_FENCED for old clients); PrepareCommit/PrepareAbort (CONCURRENT_TRANSACTIONS), a
coordinator unknown, unreachable (``CALL_TIMEOUT_S``), loading or gone from the NameServers
(the id then hashes to a master that never knew it), NOT_ENOUGH_REPLICAS: retriable, nothing
admitted; the link account refused, INVALID_TXN_STATE (as Kafka maps
CLUSTER_AUTHORIZATION_FAILED). A transactional batch in a Produce without a transactional id
is TRANSACTIONAL_ID_AUTHORIZATION_FAILED (Kafka refuses such a request so).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from wharf.broker.frontends.kafka.cluster import parse_peer
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code
from wharf.broker.frontends.kafka.txn.coordinator import TxnCoordinator
from wharf.broker.frontends.kafka.txn.handlers import STATE_NAMES
from wharf.broker.frontends.kafka.txn.link import link_pool

__all__ = ["TxnVerifier"]

log = logging.getLogger("broker.kafka")

DESCRIBE_TRANSACTIONS = 65
TRANSACTIONAL_ID_NOT_FOUND = 105
# the coordinator's answers that pass (loading, moved, not available): retried by the client
_RETRIABLE = {
    Code.COORDINATOR_LOAD_IN_PROGRESS,
    Code.COORDINATOR_NOT_AVAILABLE,
    Code.NOT_COORDINATOR,
}
_PREPARED = {"PrepareCommit", "PrepareAbort"}


@dataclass(frozen=True, slots=True)
class _Described:
    """The coordinator's view of a transactional id; ``parts`` as (topic, Kafka partition),
    or (topic, this broker's queue) when this broker coordinates it (``local``)."""

    state: str
    producer_id: int
    producer_epoch: int
    parts: frozenset[tuple[str, int]]
    local: bool = False


class _Unverified(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class TxnVerifier:
    def __init__(self, env: KafkaEnv, txns: TxnCoordinator) -> None:
        self.env = env
        self.txns = txns
        self.links = link_pool(env)  # its own links: a slow marker write never delays it

    def needed(self, pid: int, epoch: int, topic: str, queue: int) -> bool:
        return not self.txns.leader.registered(pid, epoch, topic, queue)

    async def verify(
        self, tid: str | None, pid: int, epoch: int, parts: list[tuple[str, int, int]]
    ) -> dict[tuple[str, int], int]:
        """``parts`` (topic, Kafka partition, this broker's queue) of producer ``pid``'s
        batches: each one's code, 0 verified (noted in the producer's guard for ``admit``)."""
        if tid is None:
            return {(t, i): Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t, i, _ in parts}
        guard = self.txns.leader.guard(pid, epoch)  # before the question: see Guard
        try:
            described = await self._describe(tid)
            _check(described, tid, pid, epoch)
        except _Unverified as exc:
            log.info("kafka: producer %d epoch %d of %r not verified: %s", pid, epoch, tid, exc)
            return {(t, i): exc.code for t, i, _ in parts}
        codes: dict[tuple[str, int], int] = {}
        for topic, index, queue in parts:
            if (topic, queue if described.local else index) in described.parts:
                guard.partitions.add((topic, queue))
                codes[(topic, index)] = Code.NONE
            else:
                log.info("kafka: partition %d of %r is not in %r's transaction (producer %d)",
                         index, topic, tid, pid)  # fmt: skip
                codes[(topic, index)] = Code.INVALID_TXN_STATE
        return codes

    async def _describe(self, tid: str) -> _Described:
        cluster = self.env.cluster
        name = await cluster.coordinator_group(tid) if cluster is not None else None
        if cluster is None or name == cluster.broker_name:
            return self._local(tid)
        master = next(
            (m for m in await cluster.members() if m.broker_name == name and m.broker_id == 0),
            None,
        )
        peer = parse_peer(master.broker_name, 0, master.kafka_address) if master else None
        if peer is None:
            raise _Unverified(Code.NOT_ENOUGH_REPLICAS, f"no coordinator of {tid!r} is known")
        try:
            reply = await self.links.get(peer.host, peer.port).call(
                DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}
            )
        except (OSError, EOFError, TimeoutError, ValueError) as exc:  # Kafka: NETWORK_EXCEPTION
            raise _Unverified(
                Code.NOT_ENOUGH_REPLICAS, f"coordinator {name} unreachable: {exc!r}"
            ) from None
        return _described(reply["transaction_states"][0], name or "")

    def _local(self, tid: str) -> _Described:
        """The ids now hash to this broker, the producer id came from another group: that
        group's master left the NameServers (dead past brokerNotActiveTimeoutMillis), or
        the coordinators moved since."""
        if not self.txns.leads():
            raise _Unverified(Code.NOT_ENOUGH_REPLICAS, "this broker's coordinator is loading")
        meta = self.txns.metas.get(tid)
        if meta is None:
            # the producer id is another group's: its coordinator is that group, gone from
            # the NameServers for now (ids hash over the live masters), not this broker
            raise _Unverified(Code.NOT_ENOUGH_REPLICAS, f"{tid!r}'s coordinator is not live")
        return _Described(
            STATE_NAMES[meta.state], meta.producer_id, meta.producer_epoch,
            frozenset(meta.partitions), local=True,
        )  # fmt: skip


def _described(row: dict[str, Any], name: str) -> _Described:
    code = row["error_code"]
    if code == TRANSACTIONAL_ID_NOT_FOUND:
        raise _Unverified(Code.INVALID_PRODUCER_ID_MAPPING, f"unknown at its coordinator {name}")
    if code in _RETRIABLE:
        raise _Unverified(Code.NOT_ENOUGH_REPLICAS, f"coordinator {name}: error {code}")
    if code:  # the link account refused (53) or anything else: not verified
        raise _Unverified(Code.INVALID_TXN_STATE, f"coordinator {name}: error {code}")
    parts = frozenset((t["topic"], p) for t in row["topics"] for p in t["partitions"])
    return _Described(row["transaction_state"], row["producer_id"], row["producer_epoch"], parts)


def _check(described: _Described, tid: str, pid: int, epoch: int) -> None:
    """Kafka's coordinator checks of a verification (handleVerifyPartitionsInTransaction)."""
    if described.producer_id != pid:
        raise _Unverified(
            Code.INVALID_PRODUCER_ID_MAPPING, f"{tid!r} is producer {described.producer_id}"
        )
    if described.producer_epoch != epoch:
        raise _Unverified(
            Code.INVALID_PRODUCER_EPOCH, f"{tid!r} is at epoch {described.producer_epoch}"
        )
    if described.state in _PREPARED:  # CONCURRENT_TRANSACTIONS: ending, retried
        raise _Unverified(Code.NOT_ENOUGH_REPLICAS, f"{tid!r} is {described.state}")
    if described.state != "Ongoing":
        raise _Unverified(Code.INVALID_TXN_STATE, f"{tid!r} has no open transaction")
