"""This broker as the leader of partitions in other coordinators' transactions: Kafka's
partition-leader side of WriteTxnMarkers.

In a cluster a transaction's coordinator is one broker group's master (FindCoordinator), its
partitions may be any group's. A transactional batch of a producer id another group handed
out (``ProducerTable.own`` is False) is admitted here without asking its coordinator, as
Kafka's partition leaders do (before KIP-890's verification), and noted in the core's
transaction index (its records below the LSO); the coordinator ends it with WriteTxnMarkers
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

Not done, as Kafka before KIP-890: a batch the producer sends without AddPartitionsToTxn
(a client bug) is never ended by any coordinator and holds the partition's LSO.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

from wharf.broker.core.port import Port
from wharf.broker.core.txn_index import ABORT, COMMIT, CONTROL, TxnIndex, marker_value
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.txn import layout
from wharf.broker.frontends.kafka.txn.log import FOREIGN_PID, TXN_TOPIC, TxnLog
from wharf.broker.frontends.kafka.txn.state import TxnMetadata, TxnState
from wharf.store import Written
from wharf.store.model import MessageInput, PutStatus

__all__ = ["MARKER_BODY", "PartitionLeader", "write_markers"]

log = logging.getLogger("broker.kafka")

MARKER_BODY = b"\x00"  # the store holds no empty body


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


class PartitionLeader:
    """Other coordinators' open transactions on this broker's partitions, by producer id."""

    def __init__(self, port: Port, index: TxnIndex, txn_log: TxnLog) -> None:
        self.port = port
        self.index = index
        self.log = txn_log
        self.open: dict[int, TxnMetadata] = {}  # producer id -> its registration (ONGOING)
        self._locks: dict[int, asyncio.Lock] = {}

    def admit(self, pid: int, epoch: int, topic: str, queue_id: int) -> Written | None:
        """Before a batch of another group's producer ``pid`` goes into (topic, queue): its
        registration appended when the partition is new to the transaction (the handle to
        wait on with the batch's), None otherwise. Sync: in the produce's append turn."""
        meta = self.open.get(pid)
        if meta is not None and epoch < meta.producer_epoch:
            raise KafkaError(
                Code.INVALID_PRODUCER_EPOCH,
                f"producer {pid} epoch {epoch} was fenced by epoch {meta.producer_epoch}",
            )
        if meta is not None and (topic, queue_id) in meta.partitions:
            return None
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

    async def _write(self, meta: TxnMetadata) -> None:
        try:
            result = await self.port.send.durable(self._append(meta))
        except Exception as exc:
            raise KafkaError(Code.KAFKA_STORAGE_ERROR, f"transaction log: {exc}") from exc
        if result.status is not PutStatus.PUT_OK:
            raise KafkaError(Code.COORDINATOR_NOT_AVAILABLE, f"transaction log: {result.status}")

    async def end(
        self, pid: int, epoch: int, commit: bool, partitions: set[tuple[str, int]]
    ) -> None:
        """WriteTxnMarkers for ``pid`` here: markers in ``partitions`` and every partition
        registered for it, the index ended there, then the registration COMPLETE_*."""
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
            if current and meta is not None:
                done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
                await self._write(replace(meta, state=done, update_ms=_now()))
                self.open.pop(pid, None)
                self._locks.pop(pid, None)

    async def restore(self, found: dict[int, TxnMetadata], index: TxnIndex) -> None:
        """At replay: the registrations still open, their runs found again (LSO pinned) into
        ``index`` (the replay's, adopted once whole)."""
        self.open = {pid: m for pid, m in found.items() if m.state is TxnState.ONGOING}
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
