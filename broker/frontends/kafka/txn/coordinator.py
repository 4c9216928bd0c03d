"""The transaction coordinator: Kafka's per-transactional-id rules (``state.py``) driven over
the transaction log (``log.py``), the partitions' transaction index (the core's ``TxnIndex``:
LSO and aborted runs, for every protocol's reads) and the markers.

One call per request, serialised per transactional id (a lock each): the next metadata is
computed by ``state.py``, written to the log (durable), then taken, then answered. Ending a
transaction (EndTxn, a fencing InitProducerId, a timeout):

1. the PREPARE_* state is written: from here the outcome is decided (a restart finishes it);
2. a marker goes to every partition of the transaction (``CONTROL`` property, one offset
   each), all appended together and waited for durable together;
3. then the index ends the transaction in each partition (an abort's runs hidden from now on,
   the LSO released), an abort's runs written to the aborted-runs topic, a commit's offsets
   (TxnOffsetCommit) applied to the table of the group holding each queue and waited for
   (this broker's journal; another group's master through ``PeerOffsets.commit``);
4. the COMPLETE_* state is written.

A crash between any two steps replays to step 2 again (markers written twice are harmless:
every reader skips markers). Until step 3 the transaction's records stay below the LSO, so no
read_committed consumer and no other protocol sees them early; Kafka's read_uncommitted does,
as Kafka's.

Timeouts: ``tick`` (every second, ``run``) aborts transactions open longer than their
``transaction.timeout.ms`` with the epoch bumped (the late producer is fenced), and forgets
ids idle for ``transactional.id.expiration.ms`` (7 days, Kafka's) with a DEAD record.
Every ``CHECKPOINT_RECORDS`` log records, ``checkpoint`` writes each live id's metadata again
and a checkpoint naming where that began, so a start-up replays that much, not the whole log.
Memory: ~1 KiB an id (its metadata, its lock, its partitions' names), so 100,000 live ids
~100 MB; the partitions of one transaction are bounded by the topics' queues.

Leadership: only a leading broker (the master; always, alone) coordinates. A replica replays
at start like any broker but writes nothing and answers NOT_COORDINATOR; once it leads
(controller mode: elected and promoted, looked for every ``LEAD_POLL_S``), ``run`` replays
the replicated logs again into a fresh index adopted whole (reads answer nothing new
meanwhile: ``TxnIndex.loading``), and only then does the Kafka front end lead (``leads``,
``KafkaEnv.settled``), so a transaction its predecessor left prepared is finished and an open
one times out or is fenced as after a restart. What a new master finds is what was
replicated: with SYNC_MASTER, everything an answer promised (txn/README.md "Failover").

Partitions of other broker groups (``TxnMetadata.remote``, a cluster): step 2 sends their
markers with WriteTxnMarkers to each group's master (``send_markers``, txn/markers.py; the
leader's side: txn/partition_leader.py) after this broker's own; a partition not acknowledged
leaves the transaction PREPARE_* (EndTxn answered COORDINATOR_NOT_AVAILABLE, the client
retries) and ``tick`` sends again every second until every partition acknowledged, then
COMPLETE_*. What was acknowledged is remembered until then (``_marked``), so a retry writes
only the missing markers; after a restart all are written again (harmless). A consumer group
another master coordinates is one such partition too, (brokerName, ``OFFSETS_TOPIC``):
AddOffsetsToTxn adds it, the TxnOffsetCommit leaves the offsets pending there and its marker
applies or drops them (txn/partition_leader.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from wharf.broker.core.port import Port
from wharf.broker.core.txn_index import TxnIndex
from wharf.broker.frontends.kafka.env import KAFKA_REQUEST
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.txn import state
from wharf.broker.frontends.kafka.txn.log import TXN_TOPIC, TxnLog
from wharf.broker.frontends.kafka.txn.partition_leader import (
    ApplyOffsets,
    PartitionLeader,
    write_markers,
)
from wharf.broker.frontends.kafka.txn.state import TxnError, TxnMetadata, TxnState

__all__ = ["TxnCoordinator"]

log = logging.getLogger("broker.kafka")

# transaction-log records between checkpoints (txn/log.py): what a start-up replays at most,
# beside one record per live id (~120 us a record on a loaded 2-core VM: ~12 s)
CHECKPOINT_RECORDS = 100_000
PRUNE_TICKS = 60  # once a minute, aborted runs that retention deleted are let go
TICK_S = 1.0  # how often timeouts are checked: a transaction lives at most its timeout + 1 s
LEAD_POLL_S = 0.05  # how often a replica looks whether it leads now
EXPIRATION_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms
NOT_COORDINATOR = 16

# (brokerName, producer id, epoch, commit, [(topic, queue id)]) -> the partitions acknowledged
SendMarkers = Callable[
    [str, int, int, bool, list[tuple[str, int]]], Awaitable[set[tuple[str, int]]]
]


async def _no_peers(
    broker: str, pid: int, epoch: int, commit: bool, parts: list[tuple[str, int]]
) -> set[tuple[str, int]]:
    return set()  # no cluster: no other group's partition is ever added


def _now() -> int:
    return int(time.time() * 1000)


def _holds(meta: TxnMetadata, group: str, key: tuple[str, int, str]) -> bool:
    return any((o[1], o[2], o[5]) == key for o in meta.offsets if o[0] == group)


class TxnCoordinator:
    def __init__(
        self,
        port: Port,
        index: TxnIndex,
        allocate: Callable[[], Awaitable[int]],
        apply_offsets: ApplyOffsets,
        max_timeout_ms: int,
        expiration_ms: int = EXPIRATION_MS,
        leading: Callable[[], bool] = lambda: True,
        send_markers: SendMarkers = _no_peers,
    ) -> None:
        self.port = port
        self.index = index
        self.log = TxnLog(port)
        # other coordinators' transactions here: their partitions and pending offsets
        self.leader = PartitionLeader(port, index, self.log, apply_offsets)
        self._send_markers = send_markers
        # the partitions of a PREPARE_* whose markers are written (cleared at COMPLETE_*)
        self._marked: dict[str, set[tuple[str, str, int]]] = {}
        self._allocate = allocate
        self._apply_offsets = apply_offsets
        self.max_timeout_ms = max_timeout_ms
        self.expiration_ms = expiration_ms
        self.metas: dict[str, TxnMetadata] = {}
        self._by_pid: dict[int, str] = {}  # producer id -> transactional id
        self._offset_holders: dict[str, set[str]] = {}  # group -> ids with a transaction open
        # every partition a transaction ever named (each may hold markers): the checkpoints'
        self.touched: set[tuple[str, int]] = set()
        self.checkpoint_records = CHECKPOINT_RECORDS
        self._locks: dict[str, asyncio.Lock] = {}
        self.ready = asyncio.Event()
        self._leading = leading
        self._replayed_leading = False  # the last replay ran while leading
        self._task: asyncio.Task[None] | None = None

    # --- start, replay, timeouts ---------------------------------------------------------------
    async def replay(self) -> None:
        """Read the logs back: every id's state, the aborted runs hidden, the open
        transactions' records found again (their LSO pinned). Then the prepared ones are
        finished by ``tick``."""
        self.ready.clear()
        self.metas.clear()
        self._by_pid.clear()
        self._offset_holders.clear()
        self._marked.clear()
        leading = self._leading()
        # Built aside and adopted whole: a new master's other protocols read meanwhile, and
        # wait (``loading``) rather than see an index being filled.
        self.index.loading = True
        index = TxnIndex()
        metas, aborted, touched, foreign = await self.log.replay()
        self.touched = touched
        for topic, queue_id in touched:  # their markers stay hidden from every other reader
            index.touch(topic, queue_id)
        kept = 0
        for topic, queue_id, pid, marker, runs in aborted:
            if self.log.marker_at(topic, queue_id, marker, pid):
                index.restore_aborted(topic, queue_id, runs)
                kept += 1
        for meta in metas.values():
            self._take(meta)
            if meta.open:
                # (an abort after an epoch overflow: the records carry the id of before)
                data = meta if meta.last_producer_id < 0 else replace(
                    meta, producer_id=meta.last_producer_id
                )  # fmt: skip
                for topic, queue_id in sorted(meta.partitions):
                    runs = await self.log.scan_runs(topic, queue_id, data)
                    for first, last in runs:
                        index.append(topic, queue_id, data.producer_id, first, last - first + 1)
        await self.leader.restore(foreign, index)
        self.index.adopt(index)
        opened = sum(1 for m in metas.values() if m.open)
        log.info("kafka: %d transactional ids replayed (%d open), %d aborted runs",
                 len(metas), opened, kept)  # fmt: skip
        self._replayed_leading = leading
        self.ready.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    def stop_soon(self) -> None:
        """Cancel the timeouts' task (an end it was writing is finished at the next start)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def run(self) -> None:
        await self.ready.wait()
        ticks = 0
        while True:
            try:
                if not self._leading():
                    pass  # a replica writes nothing; it replays once it leads
                elif not self._replayed_leading:
                    log.info("kafka: leading now: the transaction logs are read again")
                    await self.replay()
                else:
                    await self.tick(_now())
                    if self.log.written >= self.checkpoint_records:
                        await self.checkpoint()
                    ticks += 1
                    if ticks % PRUNE_TICKS == 0:
                        self.index.prune(self.port.min_offset)
            except Exception:
                log.exception("kafka: transaction timeouts")
            # Not leading yet: the promotion is looked for every 50 ms (a flag), so the new
            # master's Kafka front end, which waits for this replay (``leads``), serves ~50
            # ms after the store's promotion rather than up to a tick later.
            await asyncio.sleep(TICK_S if self._replayed_leading else LEAD_POLL_S)

    async def tick(self, now_ms: int) -> None:
        """Finish prepared transactions (after a replay or a failed write), abort expired
        ones, forget ids idle past their expiration."""
        for tid, meta in list(self.metas.items()):
            if not self._due(meta, now_ms):
                continue  # (no lock taken: 100,000 idle ids cost ~20 ms a second)
            async with self._lock(tid):
                meta = self.metas.get(tid, meta)
                if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    try:
                        await self._finish(meta)
                    except KafkaError as exc:  # (markers of a group whose master is gone)
                        log.info("kafka: transaction of %r not finished yet: %s", tid, exc)
                elif meta.state is TxnState.ONGOING:
                    pid = meta.producer_id if meta.producer_epoch < state.MAX_EPOCH else -1
                    if pid < 0 and now_ms - meta.start_ms > meta.timeout_ms:
                        pid = await self._allocate()
                    aborted = state.expired(meta, now_ms, pid)
                    if aborted is not None:
                        log.info("kafka: transaction of %r open %d ms (timeout %d): aborted",
                                 tid, now_ms - meta.start_ms, meta.timeout_ms)  # fmt: skip
                        await self._end(aborted)
                elif now_ms - meta.update_ms > self.expiration_ms:
                    dead = TxnMetadata(tid, meta.producer_id, meta.producer_epoch,
                                       meta.timeout_ms, TxnState.DEAD, update_ms=now_ms)  # fmt: skip
                    await self.log.write(dead)
                    self._forget(tid)

    async def checkpoint(self) -> None:
        """Every live id's metadata written again, each under its lock (a change made
        meanwhile lands after it), then a checkpoint naming where that began: a replay
        starts there (txn/log.py)."""
        await self.port.wait_own_writes(KAFKA_REQUEST)
        start = self.port.max_offset(TXN_TOPIC, 0)  # at or before the first record below
        for tid in list(self.metas):
            async with self._lock(tid):
                meta = self.metas.get(tid)
                if meta is not None:
                    await self.log.write(meta)
        await self.leader.checkpoint()
        await self.log.write_checkpoint(start, set(self.touched))
        log.info("kafka: transaction log checkpoint at %d (%d ids)", start, len(self.metas))

    def _due(self, meta: TxnMetadata, now_ms: int) -> bool:
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return True
        if meta.state is TxnState.ONGOING:
            return now_ms - meta.start_ms > meta.timeout_ms
        return now_ms - meta.update_ms > self.expiration_ms

    # --- the requests --------------------------------------------------------------------------
    async def init_producer_id(self, tid: str, timeout_ms: int) -> TxnMetadata:
        """InitProducerId: the id and epoch to answer; an open transaction of the id is
        aborted first (answered once its markers are written, not CONCURRENT_TRANSACTIONS
        and a retry: one round trip for the new producer)."""
        await self.ready.wait()
        self._check_leading()
        async with self._lock(tid):
            meta = self.metas.get(tid)
            if meta is not None and meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                await self._finish(meta)
                meta = self.metas[tid]
            overflow = meta is not None and meta.producer_epoch >= state.MAX_EPOCH
            new_pid = await self._allocate() if meta is None or overflow else -1
            nxt = state.init_producer_id(
                meta, tid, timeout_ms, self.max_timeout_ms, _now(), new_pid
            )
            if nxt.state is TxnState.PREPARE_ABORT:  # fencing: the old transaction aborts
                await self._end(nxt)
                nxt = state.init_producer_id(
                    self.metas[tid], tid, timeout_ms, self.max_timeout_ms, _now(), new_pid
                )
            await self.log.write(nxt)
            self._take(nxt)
            return nxt

    async def add_partitions(
        self, tid: str, pid: int, epoch: int, partitions: set[tuple[str, int]],
        remote: frozenset[tuple[str, str, int]] = frozenset(),
    ) -> None:  # fmt: skip
        async with self._lock(tid):
            meta = self._meta(tid)
            nxt = state.add_partitions(meta, pid, epoch, partitions, _now(), remote)
            if (nxt.partitions, nxt.remote, nxt.state) != (
                meta.partitions,
                meta.remote,
                meta.state,
            ):
                await self.log.write(nxt)
            self._take(nxt)

    async def add_offsets(self, tid: str, pid: int, epoch: int, group: str, home: str = "") -> None:
        """AddOffsetsToTxn; ``home``: the brokerName of another group coordinating ``group``,
        whose pending offsets the transaction's end marks (``OFFSETS_TOPIC``)."""
        remote = frozenset({(home, state.OFFSETS_TOPIC, 0)} if home else ())
        async with self._lock(tid):
            meta = self._meta(tid)
            nxt = state.add_groups(meta, pid, epoch, group, _now(), remote)
            if (nxt.groups, nxt.remote, nxt.state) != (meta.groups, meta.remote, meta.state):
                await self.log.write(nxt)
            self._take(nxt)

    async def txn_offsets(
        self, tid: str, pid: int, epoch: int, group: str,
        offsets: state.Offsets,
    ) -> None:  # fmt: skip
        async with self._lock(tid):
            nxt = state.txn_offsets(self._meta(tid), pid, epoch, group, offsets, _now())
            await self.log.write(nxt)
            self._take(nxt)

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> None:
        async with self._lock(tid):
            meta = self._meta(tid)
            if meta.state is TxnState.EMPTY and meta.producer_id == pid:
                # EndTxn without a transaction (librdkafka aborts after a failed init): Kafka
                # answers INVALID_TXN_STATE; a producer that sent nothing has nothing to end.
                state.end_txn(meta, pid, epoch, commit, _now())  # fencing checks only
                return
            nxt = state.end_txn(meta, pid, epoch, commit, _now())
            if nxt is not None:
                await self._end(nxt)

    # --- produce -------------------------------------------------------------------------------
    def check_produce(self, tid: str | None, pid: int, epoch: int, topic: str, queue: int) -> None:
        """A transactional batch may go in only inside its producer's open transaction that
        added its partition (else no marker would ever end it, and the LSO would stay)."""
        known = self._by_pid.get(pid)
        meta = self.metas.get(known) if known is not None else None
        if meta is None or (tid is not None and known != tid):
            raise KafkaError(Code.UNKNOWN_PRODUCER_ID, f"producer {pid} has no transaction here")
        if epoch < meta.producer_epoch:
            raise KafkaError(
                Code.INVALID_PRODUCER_EPOCH,
                f"producer {pid} epoch {epoch} was fenced by epoch {meta.producer_epoch}",
            )
        if meta.state is not TxnState.ONGOING or (topic, queue) not in meta.partitions:
            raise TxnError(
                state.INVALID_TXN_STATE,
                f"partition {queue} of {topic!r} is not in an open transaction of producer "
                f"{pid} (AddPartitionsToTxn first)",
            )

    # --- internals -----------------------------------------------------------------------------
    def _lock(self, tid: str) -> asyncio.Lock:
        lock = self._locks.get(tid)
        if lock is None:
            lock = self._locks[tid] = asyncio.Lock()
        return lock

    def leads(self) -> bool:
        """Leading, with the logs replayed as the leader (the index is the leader's)."""
        return self._leading() and self._replayed_leading

    def _check_leading(self) -> None:
        if not self._leading() or not self._replayed_leading:
            raise TxnError(NOT_COORDINATOR, "this broker does not lead (a replica): ask again")

    def _meta(self, tid: str) -> TxnMetadata:
        self._check_leading()
        if not self.ready.is_set():
            raise TxnError(state.CONCURRENT_TRANSACTIONS, "the coordinator is loading")
        meta = self.metas.get(tid)
        if meta is None:
            raise TxnError(
                state.INVALID_PRODUCER_ID_MAPPING, f"transactional id {tid!r} is not known"
            )
        return meta

    def _take(self, meta: TxnMetadata) -> None:
        old = self.metas.get(meta.transactional_id)
        if old is not None and old.producer_id != meta.producer_id:
            self._by_pid.pop(old.producer_id, None)
        self.metas[meta.transactional_id] = meta
        self._by_pid[meta.producer_id] = meta.transactional_id
        self.touched |= meta.partitions
        for group in meta.groups if meta.open else ():
            self._offset_holders.setdefault(group, set()).add(meta.transactional_id)
        if old is not None and not meta.open:
            for group in old.groups:
                holders = self._offset_holders.get(group)
                if holders is not None:
                    holders.discard(meta.transactional_id)
                    if not holders:
                        del self._offset_holders[group]

    def pending_offsets(self, group: str, topic: str, queue_id: int, home: str) -> bool:
        """Does an open transaction hold an offset of ``group`` for this queue (OffsetFetch
        with require_stable answers UNSTABLE_OFFSET_COMMIT then)? Its own transactions' and
        those other coordinators left pending here (``PartitionLeader``)."""
        key = (topic, queue_id, home)
        for tid in self._offset_holders.get(group, ()):
            meta = self.metas.get(tid)
            if meta is not None and meta.open and _holds(meta, group, key):
                return True
        return any(_holds(meta, group, key) for meta in self.leader.open.values())

    def _forget(self, tid: str) -> None:
        meta = self.metas.pop(tid, None)
        if meta is not None:
            self._by_pid.pop(meta.producer_id, None)
        self._locks.pop(tid, None)

    async def _end(self, prepared: TxnMetadata) -> None:
        """Steps 1-4 of the module docstring. ``prepared`` takes effect at once in memory, so
        no batch of the producer goes in meanwhile (``check_produce``)."""
        old = self.metas.get(prepared.transactional_id)
        self._take(prepared)
        if old is not None and old.producer_id != prepared.producer_id:
            self._by_pid[old.producer_id] = prepared.transactional_id  # its marker still to come
        await self.log.write(prepared)
        await self._finish(prepared, old.producer_id if old is not None else None)

    async def _finish(self, prepared: TxnMetadata, data_pid: int | None = None) -> None:
        commit = prepared.state is TxnState.PREPARE_COMMIT
        # The records were written under the producer id of before an epoch overflow.
        if data_pid is None:
            data_pid = prepared.last_producer_id
        pid = prepared.producer_id if data_pid < 0 else data_pid
        tid = prepared.transactional_id
        marked = self._marked.setdefault(tid, set())
        if ("", "", -1) not in marked:  # this broker's partitions: once a PREPARE_*
            await self._finish_local(prepared, pid, commit)
            marked.add(("", "", -1))
        await self._finish_remote(prepared, pid, commit, marked)
        if commit and prepared.offsets:
            try:
                await self._apply_offsets(
                    [(g, t, q, off, home) for g, t, q, off, _, home in prepared.offsets]
                )
            except Exception as exc:  # the offsets' journal failed: retried (tick, a retry)
                raise KafkaError(Code.COORDINATOR_NOT_AVAILABLE, f"offsets: {exc}") from exc
        done = state.complete(prepared, _now())
        await self.log.write(done)
        self._take(done)
        self._marked.pop(tid, None)

    async def _finish_local(self, prepared: TxnMetadata, pid: int, commit: bool) -> None:
        partitions = sorted(prepared.partitions)
        epoch = prepared.producer_epoch
        markers = (
            await write_markers(self.port, self.index, pid, epoch, commit, partitions)
            if partitions
            else {}
        )
        for topic, queue_id in partitions:
            runs = self.index.end(topic, queue_id, pid, commit)
            marker = markers.get((topic, queue_id))
            if runs and not commit and marker is not None:
                await self.log.write_aborted(topic, queue_id, pid, marker, runs)

    async def _finish_remote(
        self, prepared: TxnMetadata, pid: int, commit: bool, marked: set[tuple[str, str, int]]
    ) -> None:
        """WriteTxnMarkers to every other group with a partition not acknowledged yet."""
        by_group: dict[str, list[tuple[str, int]]] = {}
        for broker, topic, queue_id in sorted(prepared.remote - marked):
            by_group.setdefault(broker, []).append((topic, queue_id))
        for broker, parts in by_group.items():
            done = await self._send_markers(broker, pid, prepared.producer_epoch, commit, parts)
            marked |= {(broker, topic, queue_id) for topic, queue_id in done}
        missing = prepared.remote - marked
        if missing:
            raise KafkaError(
                Code.COORDINATOR_NOT_AVAILABLE,
                f"transaction markers of {len(missing)} partitions of "
                f"{sorted({b for b, _, _ in missing})} not written yet (retried every second)",
            )
