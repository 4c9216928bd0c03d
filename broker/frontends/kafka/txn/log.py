"""The coordinator's durable state, as records of two broker topics in the shared commit log
(system topics: ``rmq_sys_`` names live in no topic table, no client lists, reads or writes
them), so they are flushed and replicated exactly as the partitions' records are (SYNC_FLUSH,
SYNC_MASTER) and a new master or a restarted broker reads them back from its own log:

- ``TXN_TOPIC`` (queue 0): one ``layout.encode(meta)`` per state change, the transactional id
  in ``TXN_ID``; the last record of an id is its state (DEAD: forgotten).
- ``CHECKPOINT_TOPIC`` (queue 0): ``layout.encode_checkpoint``, written after every live id's
  metadata was written again (``TxnCoordinator`` does it every ``CHECKPOINT_RECORDS``
  records): a replay reads the transaction log from the last checkpoint's offset only, so
  start-up reads ~that many records, not the whole retained log (measured ~120 us a record
  on a loaded 2-core VM: 100,000 records ~12 s).
- ``ABORTED_TOPIC`` (queue 0): one ``layout.encode_aborted`` per partition of an aborted
  transaction, written once its abort marker is durable: what hides those records again after
  a restart (``TxnIndex``). Its own topic rather than a field of the transaction's record:
  an id's records could be compacted to its last one (Kafka compacts ``__transaction_state``),
  these never are; they age out with the commit log like the records they hide (written after
  them, they outlive them).

Every write waits until durable (what the answer to the client then promises: the
coordinator answers after it). The aborted-runs topic is replayed whole (one record per
partition of an aborted transaction, as long as the commit log keeps it).
"""

from __future__ import annotations

import asyncio
import logging

from wharf.broker.core.port import Port
from wharf.broker.core.txn_index import CONTROL, parse_marker
from wharf.broker.frontends.kafka.env import KAFKA_REQUEST
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.txn import layout
from wharf.broker.frontends.kafka.txn.state import TxnMetadata, TxnState
from wharf.store.codec.kafka_records import KAFKA_PRODUCER
from wharf.store.model import MessageInput, PutStatus, StoredMessage

__all__ = ["ABORTED_TOPIC", "CHECKPOINT_TOPIC", "FOREIGN_PID", "TXN_ID", "TXN_TOPIC", "TxnLog"]

log = logging.getLogger("broker.kafka")

TXN_TOPIC = "rmq_sys_KAFKA_TXN"
ABORTED_TOPIC = "rmq_sys_KAFKA_TXN_ABORTED"
CHECKPOINT_TOPIC = "rmq_sys_KAFKA_TXN_CHECKPOINT"
TXN_ID = "TXN_ID"
FOREIGN_PID = "TXN_FOREIGN_PID"  # partition_leader.py's registrations (no TXN_ID)
READ_CHUNK = 512  # records a replay read takes at once (~1 ms of decoding)
READ_BYTES = 8 << 20


# (ids' states, aborted-runs records, partitions named, other coordinators' registrations)
Replayed = tuple[
    dict[str, TxnMetadata],
    list[tuple[str, int, int, int, list]],
    set[tuple[str, int]],
    dict[int, TxnMetadata],
]


class TxnLog:
    def __init__(self, port: Port) -> None:
        self.port = port
        self.written = 0  # transaction-log records since the last checkpoint

    async def _append(self, topic: str, message: MessageInput) -> int:
        """Append and wait until durable; the record's queue offset."""
        send = self.port.send
        try:
            written = send.append(topic, 0, [message])
            result = await send.durable(written)
        except Exception as exc:
            raise KafkaError(Code.KAFKA_STORAGE_ERROR, f"transaction log: {exc}") from exc
        if result.status is not PutStatus.PUT_OK:
            # Stored but not confirmed (disk or replicas): retriable; a retry writes it again.
            raise KafkaError(Code.COORDINATOR_NOT_AVAILABLE, f"transaction log: {result.status}")
        return int(written.appended.first_queue_offset)

    async def write(self, meta: TxnMetadata) -> int:
        """The metadata's record, durable; its offset in the transaction log."""
        body = layout.encode(meta)
        self.written += 1
        return await self._append(TXN_TOPIC, MessageInput(body, {TXN_ID: meta.transactional_id}))

    async def write_checkpoint(self, start: int, partitions: set[tuple[str, int]]) -> None:
        await self._append(
            CHECKPOINT_TOPIC, MessageInput(layout.encode_checkpoint(start, partitions))
        )
        self.written = 0

    def _checkpoint(self) -> tuple[int, set[tuple[str, int]]]:
        """The last checkpoint: (from offset, partitions); (-1, none) without one."""
        last = self.port.max_offset(CHECKPOINT_TOPIC, 0) - 1
        if last < self.port.min_offset(CHECKPOINT_TOPIC, 0):
            return -1, set()
        found = self.port.read_now(CHECKPOINT_TOPIC, 0, last, 1, None, READ_BYTES).messages
        return layout.decode_checkpoint(found[0].body) if found else (-1, set())

    async def write_aborted(
        self, topic: str, queue_id: int, producer_id: int, marker: int, runs: list[list[int]]
    ) -> None:
        body = layout.encode_aborted(topic, queue_id, producer_id, marker, runs)
        await self._append(ABORTED_TOPIC, MessageInput(body))

    def marker_at(self, topic: str, queue_id: int, offset: int, producer_id: int) -> bool:
        """Does ``offset`` hold ``producer_id``'s marker (not a topic made again since)?"""
        found = self.port.read_now(topic, queue_id, offset, 1, None, READ_BYTES).messages
        if not found or found[0].queue_offset != offset:
            return False
        control = found[0].properties.get(CONTROL)
        return control is not None and parse_marker(control)[1] == producer_id

    async def _messages(self, topic: str, queue_id: int, start: int = -1) -> list[StoredMessage]:
        port = self.port
        offset = max(port.min_offset(topic, queue_id), start)
        high = port.max_offset(topic, queue_id)
        out: list[StoredMessage] = []
        while offset < high:
            result = port.read_now(topic, queue_id, offset, READ_CHUNK, None, READ_BYTES)
            if not result.messages:
                offset = max(result.next_begin_offset, offset + 1)
                continue
            out.extend(result.messages)
            offset = result.messages[-1].queue_offset + 1
            await asyncio.sleep(0)  # a long log never holds the loop
        return out

    async def replay(self) -> Replayed:
        """Every transactional id's last state (DEAD left out), every aborted-runs record,
        every partition any record names (each may hold markers: the log outlives them, its
        records written around them in the same commit log), and the last registration of
        each other coordinator's producer id (``FOREIGN_PID``, txn/partition_leader.py)."""
        await self.port.wait_own_writes(KAFKA_REQUEST)
        metas: dict[str, TxnMetadata] = {}
        foreign: dict[int, TxnMetadata] = {}
        start, touched = self._checkpoint()
        records = await self._messages(TXN_TOPIC, 0, start)
        self.written = len(records)  # (a long replay: the next checkpoint comes soon)
        for message in records:
            tid = message.properties.get(TXN_ID)
            pid = message.properties.get(FOREIGN_PID)
            try:
                if tid is not None:
                    metas[tid] = meta = layout.decode(tid, message.body)
                elif pid is not None:
                    foreign[int(pid)] = meta = layout.decode("", message.body)
                else:
                    continue
                touched |= meta.partitions
            except ValueError as exc:  # a newer broker's record: stop rather than guess
                raise RuntimeError(f"transaction log at {message.queue_offset}: {exc}") from exc
        aborted = [layout.decode_aborted(m.body) for m in await self._messages(ABORTED_TOPIC, 0)]
        live = {t: m for t, m in metas.items() if m.state is not TxnState.DEAD}
        return live, aborted, touched, foreign

    async def scan_runs(self, topic: str, queue_id: int, meta: TxnMetadata) -> list[list[int]]:
        """The runs of ``meta``'s open transaction in one queue, from the log: its producer's
        batches stored from the transaction's start (its first AddPartitions, same clock as
        the store's timestamps) up to its own marker if one was written already."""
        pid = f"{meta.producer_id}:"
        start = self.port.offset_at(topic, queue_id, meta.start_ms)
        runs: list[list[int]] = []
        for m in await self._messages(topic, queue_id, start):
            control = m.properties.get(CONTROL)
            if control is not None:
                if parse_marker(control)[1] == meta.producer_id:
                    break  # this transaction's marker: its records end here
                continue
            mark = m.properties.get(KAFKA_PRODUCER)
            if mark is None or not mark.startswith(pid):
                continue
            count = int(mark.rsplit(":", 1)[1])
            first, last = m.queue_offset, m.queue_offset + count - 1
            if runs and runs[-1][1] + 1 == first:
                runs[-1][1] = last
            else:
                runs.append([first, last])
        return runs
