"""This broker as the leader of partitions in other coordinators' transactions: Kafka's
partition-leader side of WriteTxnMarkers.

In a cluster a transaction's coordinator is one broker group's master (FindCoordinator), its
partitions may be any group's. The first transactional batch of a producer id another group
handed out (``ProducerTable.own`` is False) in a partition is admitted here once its
coordinator said the transaction is ongoing with that producer, epoch and partition
(``verify.py``: KIP-890's verification; the verified partition noted in the producer's
``Guard``, which a marker's arrival drops, as Kafka's verification guard), then registered
and noted in the core's transaction index (its records below the LSO); its later batches
there need no asking (``registered``). The coordinator ends it with WriteTxnMarkers
(``handlers.write_txn_markers``): the marker written, the index told (an abort's runs
hidden, written to the aborted-runs topic as the coordinator's own), the LSO released.

Durable across kill -9 and failover: the first batch of such a transaction in a partition
appends a registration to the transaction log (``TXN_TOPIC``, property ``FOREIGN_PID``: the
layout's metadata record with the producer id, epoch, start time, partitions; no
transactional id) before the batch itself, and the batch's durability wait covers it (same
commit log, written before). A replay finds each registration still ONGOING and scans its
partitions for its runs (``TxnLog.scan_runs``), as for the coordinator's own open
transactions; the marker's arrival writes it COMPLETE_*. A marker request also ends every
partition registered for the producer id, not only those it names (a partition numbered
differently by the coordinator for a moment still gets its marker).

Pending offsets (this broker the group's coordinator, another the transactional id's): a
TxnOffsetCommit puts the offsets into the producer's registration (``txn_offsets``: the
record durable before the answer), where OffsetFetch with require_stable sees them pending;
the coordinator's marker for the pseudo-partition ``OFFSETS_TOPIC`` (added at
AddOffsetsToTxn) ends them with the rest: a commit applies them (this group's queues to its
table, waited for in its journal; another group's through ``PeerOffsets.commit``) before the
registration is written COMPLETE_COMMIT, an abort drops them. Kafka keeps them the same way,
at the group coordinator, keyed by producer id, ended by the marker of the group's
``__consumer_offsets`` partition.

Zombies: the epoch of each producer id's last ended transaction is remembered (``ended``,
the last ``ENDED_KEPT`` ids; rebuilt at replay from the COMPLETE_* registrations), and a
batch or TxnOffsetCommit of an older epoch (a producer the marker fenced) is refused
INVALID_PRODUCER_EPOCH: registered, it would wait for a marker that never comes, holding the
partition's LSO or the group's offsets unstable for ever.

A batch the producer sends without AddPartitionsToTxn (a client bug), or late after its
transaction ended, is refused INVALID_TXN_STATE by that verification: registered, no
coordinator would ever end it, and it would hold the partition's LSO for ever.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from wharf.broker.core.port import Port
from wharf.broker.core.txn_index import ABORT, COMMIT, CONTROL, TxnIndex, marker_value
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.txn import layout
from wharf.broker.frontends.kafka.txn.log import FOREIGN_PID, TXN_TOPIC, TxnLog
from wharf.broker.frontends.kafka.txn.state import (
    INVALID_TXN_STATE,
    Offsets,
    TxnError,
    TxnMetadata,
    TxnState,
    merge_offsets,
)
from wharf.store import Written
from wharf.store.model import MessageInput, PutStatus

__all__ = ["MARKER_BODY", "ApplyOffsets", "Guard", "PartitionLeader", "write_markers"]

log = logging.getLogger("broker.kafka")

MARKER_BODY = b"\x00"  # the store holds no empty body
ENDED_KEPT = 100_000  # producer ids whose last ended epoch is remembered: ~100 B each, ~10 MB
# producers with a verification in flight or verified partitions not yet written to: ~300 B
# each, ~3 MB; one pushed out by 10,000 other producers' questions between its own question
# and its append refuses that batch INVALID_TXN_STATE (as a marker arriving meanwhile does)
GUARDS_KEPT = 10_000

# (group, topic, queue id, offset, home brokerName or ""): applied to the table of the group
# holding each queue, waited for durable (offsets.py ``apply_txn_offsets``)
ApplyOffsets = Callable[[list[tuple[str, str, int, int, str]]], Awaitable[None]]


def _now() -> int:
    return int(time.time() * 1000)


async def write_markers(
    port: Port, index: TxnIndex, pid: int, epoch: int, commit: bool,
    partitions: list[tuple[str, int]],
) -> dict[tuple[str, int], int]:  # fmt: skip
    """One marker per partition, appended together and waited for durable together:
    (topic, queue id) -> the marker's offset. A deleted topic's partition is left out."""
    value = marker_value(COMMIT if commit else ABORT, pid, epoch)
    partitions = [p for p in partitions if port.topic(p[0]) is not None]
    send = port.send
    for topic, queue_id in partitions:  # (a partition added but never written to)
        index.touch(topic, queue_id)
    try:
        written = [
            send.append(topic, queue_id, [MessageInput(MARKER_BODY, {CONTROL: value})])
            for topic, queue_id in partitions
        ]
        results = await send.durable_many(written) if written else []
    except Exception as exc:  # the store refused (full disk, shutting down): retried
        raise KafkaError(Code.COORDINATOR_NOT_AVAILABLE, f"transaction markers: {exc}") from exc
    if results and results[-1].status is not PutStatus.PUT_OK:
        raise KafkaError(
            Code.COORDINATOR_NOT_AVAILABLE, f"transaction markers: {results[-1].status}"
        )
    return {
        part: w.appended.first_queue_offset for part, w in zip(partitions, written, strict=True)
    }


@dataclass(slots=True)
class Guard:
    """Kafka's verification guard: taken before the coordinator is asked; a marker arriving
    meanwhile drops it, so an answer given before the transaction ended admits nothing."""

    epoch: int
    partitions: set[tuple[str, int]] = field(default_factory=set)  # verified, not yet written


class PartitionLeader:
    """Other coordinators' open transactions on this broker's partitions, by producer id."""

    def __init__(
        self, port: Port, index: TxnIndex, txn_log: TxnLog, apply_offsets: ApplyOffsets
    ) -> None:
        self.port = port
        self.index = index
        self.log = txn_log
        self._apply_offsets = apply_offsets
        self.open: dict[int, TxnMetadata] = {}  # producer id -> its registration (ONGOING)
        self.ended: OrderedDict[int, int] = OrderedDict()  # producer id -> last ended epoch
        self.guards: OrderedDict[int, Guard] = OrderedDict()  # producer id -> its guard
        self._locks: dict[int, asyncio.Lock] = {}

    def _check_epoch(self, pid: int, epoch: int, meta: TxnMetadata | None) -> None:
        floor = max(meta.producer_epoch if meta is not None else -1, self.ended.get(pid, -1))
        if epoch < floor:
            raise KafkaError(
                Code.INVALID_PRODUCER_EPOCH,
                f"producer {pid} epoch {epoch} was fenced by epoch {floor}",
            )

    def _note_ended(self, pid: int, epoch: int) -> None:
        self.ended[pid] = max(epoch, self.ended.pop(pid, -1))
        while len(self.ended) > ENDED_KEPT:
            self.ended.popitem(last=False)

    def registered(self, pid: int, epoch: int, topic: str, queue_id: int) -> bool:
        """Is (topic, queue) in producer ``pid``'s open transaction here under ``epoch``? Its
        batches then need no verification (the cache of Kafka's verified state)."""
        meta = self.open.get(pid)
        return (
            meta is not None
            and meta.producer_epoch == epoch
            and ((topic, queue_id) in meta.partitions)
        )

    def guard(self, pid: int, epoch: int) -> Guard:
        """The guard to note verified partitions in, taken before asking the coordinator."""
        guard = self.guards.get(pid)
        if guard is None or guard.epoch != epoch:
            guard = self.guards[pid] = Guard(epoch)
        self.guards.move_to_end(pid)
        while len(self.guards) > GUARDS_KEPT:
            self.guards.popitem(last=False)
        return guard

    def admit(self, pid: int, epoch: int, topic: str, queue_id: int) -> Written | None:
        """Before a batch of another group's producer ``pid`` goes into (topic, queue): its
        registration appended when the partition is new to the transaction (the handle to
        wait on with the batch's), None otherwise; a new partition must have been verified
        with the coordinator under a guard still held (``verify.py``), else INVALID_TXN_STATE.
        Sync: in the produce's append turn."""
        meta = self.open.get(pid)
        self._check_epoch(pid, epoch, meta)
        if self.registered(pid, epoch, topic, queue_id):
            return None
        guard = self.guards.get(pid)
        if guard is None or guard.epoch != epoch or (topic, queue_id) not in guard.partitions:
            # its transaction ended while it was verified, or it was never verified
            raise TxnError(
                INVALID_TXN_STATE,
                f"partition {queue_id} of {topic!r} is not in an open transaction of producer "
                f"{pid} epoch {epoch} at its coordinator",
            )
        guard.partitions.discard((topic, queue_id))
        now = _now()
        if meta is None:
            meta = TxnMetadata("", pid, epoch, 0, TxnState.ONGOING, start_ms=now)
        meta = replace(
            meta, producer_epoch=epoch, partitions=meta.partitions | {(topic, queue_id)},
            update_ms=now,
        )  # fmt: skip
        written = self._append(meta)
        self.open[pid] = meta
        return written

    def _append(self, meta: TxnMetadata) -> Written:
        self.log.written += 1
        message = MessageInput(layout.encode(meta), {FOREIGN_PID: str(meta.producer_id)})
        return self.port.send.append(TXN_TOPIC, 0, [message])

    async def txn_offsets(self, pid: int, epoch: int, group: str, offsets: Offsets) -> None:
        """TxnOffsetCommit of another coordinator's transaction (this broker coordinates the
        group): the offsets pending in the producer's registration, durable on return."""
        async with self._locks.setdefault(pid, asyncio.Lock()):
            meta = self.open.get(pid)
            self._check_epoch(pid, epoch, meta)
            now = _now()
            if meta is None:
                meta = TxnMetadata("", pid, epoch, 0, TxnState.ONGOING, start_ms=now)
            meta = replace(
                meta, producer_epoch=epoch, groups=meta.groups | {group},
                offsets=merge_offsets(meta.offsets, group, offsets), update_ms=now,
            )  # fmt: skip
            # appended and taken in one turn: a batch's ``admit`` meanwhile builds on it
            written = self._append(meta)
            self.open[pid] = meta
            await self._durable(written)

    async def _write(self, meta: TxnMetadata) -> None:
        await self._durable(self._append(meta))

    async def _durable(self, written: Written) -> None:
        try:
            result = await self.port.send.durable(written)
        except Exception as exc:
            raise KafkaError(Code.KAFKA_STORAGE_ERROR, f"transaction log: {exc}") from exc
        if result.status is not PutStatus.PUT_OK:
            raise KafkaError(Code.COORDINATOR_NOT_AVAILABLE, f"transaction log: {result.status}")

    async def end(
        self, pid: int, epoch: int, commit: bool, partitions: set[tuple[str, int]]
    ) -> None:
        """WriteTxnMarkers for ``pid`` here: markers in ``partitions`` and every partition
        registered for it, the index ended there, then the registration COMPLETE_*."""
        guard = self.guards.get(pid)
        if guard is not None and guard.epoch <= epoch:  # at once: no await before
            del self.guards[pid]
        lock = self._locks.setdefault(pid, asyncio.Lock())
        async with lock:
            meta = self.open.get(pid)
            # (a marker of an older epoch than the registration ends an older transaction)
            current = meta is not None and epoch >= meta.producer_epoch
            wanted = set(partitions) | (meta.partitions if current and meta else set())
            ordered = sorted(wanted)
            markers = await write_markers(self.port, self.index, pid, epoch, commit, ordered)
            for topic, queue_id in ordered:
                runs = self.index.end(topic, queue_id, pid, commit)
                marker = markers.get((topic, queue_id))
                if runs and not commit and marker is not None:
                    await self.log.write_aborted(topic, queue_id, pid, marker, runs)
            if current and meta is not None and commit and meta.offsets:
                await self._apply(meta)
            self._note_ended(pid, epoch)
            if current and meta is not None:
                done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
                await self._write(replace(meta, state=done, update_ms=_now()))
                self.open.pop(pid, None)
                self._locks.pop(pid, None)

    async def _apply(self, meta: TxnMetadata) -> None:
        """A committed transaction's pending offsets applied (a failure: the marker is
        answered an error and sent again, the offsets applied again: the same values)."""
        offsets = [(g, t, q, off, home) for g, t, q, off, _, home in sorted(meta.offsets)]
        try:
            await self._apply_offsets(offsets)
        except Exception as exc:
            raise KafkaError(Code.COORDINATOR_NOT_AVAILABLE, f"offsets: {exc}") from exc

    async def restore(self, found: dict[int, TxnMetadata], index: TxnIndex) -> None:
        """At replay: the registrations still open (pending offsets with them), their runs
        found again (LSO pinned) into ``index`` (the replay's, adopted once whole)."""
        self.open = {pid: m for pid, m in found.items() if m.state is TxnState.ONGOING}
        self.ended = OrderedDict(
            (pid, m.producer_epoch)
            for pid, m in list(found.items())[-ENDED_KEPT:]
            if m.state is not TxnState.ONGOING
        )
        for meta in self.open.values():
            for topic, queue_id in sorted(meta.partitions):
                for first, last in await self.log.scan_runs(topic, queue_id, meta):
                    index.append(topic, queue_id, meta.producer_id, first, last - first + 1)
        if self.open:
            log.info("kafka: %d open transactions of other coordinators here", len(self.open))

    async def checkpoint(self) -> None:
        """Every open registration written again (a checkpoint's replay starts after the
        older ones)."""
        for pid in list(self.open):
            async with self._locks.setdefault(pid, asyncio.Lock()):
                meta = self.open.get(pid)
                if meta is not None:
                    await self._write(meta)
