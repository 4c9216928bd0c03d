"""MessageStore: the store's one public facade (RocketMQ's DefaultMessageStore, minus the god
class). It wires the CommitLog, ConsumeQueues, IndexFiles, ReputService, flush services,
ScheduleMessageService and cleanup services, and runs recovery at start.

CONTRACT (the broker codes against exactly this):

- One asyncio event loop owns the store. Appends are synchronous and never await, which makes
  them atomic on that loop without a lock. Blocking syscalls (fdatasync, file creation,
  large scans, recovery) run in threads.
- ``start()`` loads and recovers (in a thread), writes the abort marker, starts the services.
  ``shutdown()`` stops services, flushes everything, writes the checkpoint, removes the abort
  marker.

Additions to the original contract (all additive):

- ``MessageStore(config, observer=None, *, disk_usage=None)``: ``disk_usage(path) -> ratio``
  replaces ``os.statvfs`` for the retention thresholds (tests simulate 76/86/91 %).
- ``read_consume_queue(topic, queue_id, offset, max_count)``: raw ConsumeQueue units
  ``(commit log offset, size, tagsCode)``; the schedule service reads deliver times with it.
- ``look_message_by_msg_id(offset_msg_id)``: the offset message id -> message (or None).
- ``await wait_dispatched(timeout_s)``: everything appended so far is visible to reads.
- ``remove_arrival_listener``, ``dispatch_offset`` (the reput position), ``delay_levels_ms``,
  ``health()`` (per background service: running, runs, failures, last error).
- A batch whose messages carry different DELAY levels is refused (one batch = one queue).
- ``pop``: the running ``PopService`` (``wharf.store.pop``: pop / ack / change-invisible with
  invisible time, journal ``<root>/pop/journal``), started after recovery and the services,
  stopped first at shutdown (its DLQ copies still go through ``put``).
- ``put()`` waits (before appending) while dispatch lags more than ``max_dispatch_lag_bytes``
  (a Wharf setting, 64 MiB): consumer lag and crash-restart re-dispatch stay bounded.
- ``put``/``put_records`` in two parts, for a caller that appends on the spot: the synchronous
  ``put_append``/``put_records_append`` (no dispatch back-pressure: ``dispatch_lagging()`` is
  True while ``put`` would wait first), then ``await durable(result)``; or, under SYNC_FLUSH
  without replicas to wait for, ``flush_waiter(result)`` (the group commit's future, filed at
  once; cancelling it withdraws the wait) and, once it is done, ``flushed_result``. ``put`` is
  composed of exactly these.
- ``set_dispatch_waiters(fn)``: ``fn()`` True while a reader waits (the broker: a parked
  long poll). Under SYNC_FLUSH each sync's callback then dispatches up to 64 KiB itself
  (``ReputService.dispatch_inline``) before the writers it covers are answered, so the
  parked pull is woken before the ack is built (~0.4 ms less from the sync to the pull
  reply for a lone message); larger syncs, or nobody waiting, leave dispatch to the reput
  task, woken by the resumed writers, as before.

WIRING: ``start()`` builds one ``StoreParts`` (``wharf.store.parts``: what recovery opened, the
maintenance lock, the flush tally) and gives the services those parts plus named callables for
the facade's live state (dispatch position, disk state); the schedule service gets the facade
as a ``ScheduleHost`` (four calls). Nothing below this module imports it (the import-linter
layers contract in pyproject.toml checks that). The ``commit_log``/``queues``/... properties at
the end are for tests and benchmarks, which look inside a running store.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from wharf import hops
from wharf.store.codec import decode_offset_msg_id
from wharf.store.codec.properties import TIMER_TOPIC, TRANS_HALF_TOPIC
from wharf.store.config import SYNC_FLUSH, StoreConfig, parse_delay_levels
from wharf.store.dispatch.reput import CommitLogSource, Dispatcher, QueueAdvance, ReputService
from wharf.store.errors import (
    CorruptRecordError,
    DiskFullError,
    InSyncReplicasNotEnoughError,
    InvalidMessageError,
    MasterFencedError,
    NotMasterError,
    StoreError,
    StoreNotWritableError,
    StoreShutDownError,
)
from wharf.store.fast.record_check import check_records
from wharf.store.ha import SLAVE, SYNC_MASTER, ReplicaLink, epochs, truncation
from wharf.store.ha.epochs import Epochs
from wharf.store.ha.master import HAMaster
from wharf.store.ha.slave import HASlave
from wharf.store.ha.status import ReplicationStatus, master_status, replica_status
from wharf.store.index.index_files import IndexService
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.commit_log import CommitLog, RecordsBatch
from wharf.store.model import (
    AppendResult,
    GetResult,
    MessageInput,
    PutResult,
    PutStatus,
    QueueStat,
    StoredMessage,
    StoreStats,
    TagFilter,
)
from wharf.store.observer import FlushTally, StoreObserver
from wharf.store.parts import StoreParts
from wharf.store.paths import (
    StorePaths,
    remove_abort_marker_blocking,
    write_abort_marker_blocking,
)
from wharf.store.pop import PopService
from wharf.store.queue import positions
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue, Unit
from wharf.store.queue.journal import PositionsJournal
from wharf.store.queue.table import ConsumeQueueTable
from wharf.store.read.get_message import get_messages
from wharf.store.read.get_raw import RawGetResult, get_raw_records
from wharf.store.recovery import RecoveredState, recover_blocking
from wharf.store.services.cleanup import CleanupService, DiskUsage, statvfs_used_ratio
from wharf.store.services.ledger import lower_log_offset_blocking
from wharf.store.services.queue_flush import FlushConsumeQueueService
from wharf.store.services.schedule import (
    ScheduleMessageService,
    delay_level_of,
    to_schedule_topic,
)
from wharf.store.services.timer import TimerMessageService, timer_times, to_timer_topic
from wharf.store.services.transactions import TransactionService, is_half, to_half_topic
from wharf.store.stats import build_stats

log = logging.getLogger(__name__)

# Called after dispatch made new messages visible: (topic, queue_id, new max offset).
ArrivalListener = Callable[[str, int, int], None]

_MAX_QUEUE_ID = 0x7FFFFFFF

# Part of the facade's public names (``wharf.store`` exports it lazily from here).
__all__ = ["ArrivalListener", "DiskUsage", "MessageStore", "StoreObserver"]


class MessageStore:
    def __init__(
        self,
        config: StoreConfig,
        observer: StoreObserver | None = None,
        *,
        disk_usage: DiskUsage | None = None,
        replication: ReplicaLink | None = None,
    ) -> None:
        config.validate()
        self._config = config
        self._observer = FlushTally(observer)
        self._paths = StorePaths.of(config.store_path_root_dir)
        self.delay_levels_ms = parse_delay_levels(config.message_delay_level)
        self._disk_usage: DiskUsage = disk_usage or statvfs_used_ratio
        self._sync_flush = config.flush_disk_type == SYNC_FLUSH
        self._parts: StoreParts | None = None  # set by start()
        self._commit_log: CommitLog | None = None
        self._source: CommitLogSource | None = None
        self._queues = ConsumeQueueTable(
            self._paths.consume_queue_root, config.mapped_file_size_consume_queue
        )
        self._index: IndexService | None = None
        self._offset_table: dict[tuple[str, int], int] = {}
        self._listeners: list[ArrivalListener] = []
        self._consumer_progress: Callable[[], Mapping[tuple[str, int], Mapping[str, int]]] = dict
        self._committed: Callable[[str, str, int], int] = lambda group, topic, queue_id: -1
        self._reput: ReputService | None = None
        self._dispatch_waiters: Callable[[], bool] | None = None
        self._queue_flush: FlushConsumeQueueService | None = None
        self._journal: PositionsJournal | None = None
        self._schedule: ScheduleMessageService | None = None
        self._timer: TimerMessageService | None = None
        self._transactions: TransactionService | None = None
        self._cleanup: CleanupService | None = None
        self._pop: PopService | None = None
        self._maintenance = asyncio.Lock()  # CQ/index flush vs. deletion and truncation
        self._background: set[asyncio.Task[None]] = set()
        self._state = "new"  # new -> started -> stopping -> stopped
        self._disk_full_reason = ""
        self._link = replication or ReplicaLink()
        self._replica = config.broker_role == SLAVE or self._link.controller
        self._epochs: Epochs = []  # master terms (controller mode), loaded at start
        self._fence: Callable[[], str] | None = None
        self._ha_master: HAMaster | None = None
        self._ha_slave: HASlave | None = None
        self.disk_used_ratio = 0.0
        self.recovery_seconds = 0.0
        self.recovered: RecoveredState | None = None
        self.messages_put_total = 0
        self.throttled_puts = 0  # puts that waited for dispatch to catch up
        self.bytes_put_total = 0
        # Disk use is re-sampled after this many appended bytes (set at start: 1 % of the
        # filesystem, 1..64 MiB), not only every cleanResourceInterval.
        self._disk_check_bytes = 64 << 20
        self._bytes_since_disk_check = 0

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._state != "new":
            raise RuntimeError(f"store already {self._state}")
        started = time.monotonic()
        if self._link.controller:  # a truncation decided before a restart comes first
            await asyncio.to_thread(
                truncation.apply_blocking,
                self._paths,
                self._config.mapped_file_size_commit_log,
                self._lower_ledgers_blocking,
            )
            self._epochs = await asyncio.to_thread(epochs.load_blocking, self._paths.epochs_file)
        state = await asyncio.to_thread(
            recover_blocking, self._config, self._paths, self.delay_levels_ms, self._observer
        )
        self.recovered = state
        self.recovery_seconds = time.monotonic() - started
        self._commit_log = state.commit_log
        self._source = CommitLogSource(state.commit_log, self._sync_flush)
        if self._config.broker_role == SYNC_MASTER:
            # Consumers never see what the in-sync replicas lack (a failover cannot take back
            # a message someone consumed).
            self._source.confirm = self._confirm_offset
        self._queues = state.queues
        self._index = state.index
        self._offset_table = {
            (queue.topic, queue.queue_id): queue.max_offset for queue in self._queues
        }
        dispatcher = Dispatcher(self._queues, self._index, self.delay_levels_ms)
        self._reput = ReputService(
            source=self._source,
            dispatcher=dispatcher,
            on_advance=self._notify_arrivals,
            reput_from_offset=state.reput_from_offset,
        )
        if self._sync_flush:
            state.commit_log.group_commit.on_durable = self._after_sync
            state.commit_log.group_commit.on_requested = self._during_sync
        parts = StoreParts(
            config=self._config,
            paths=self._paths,
            commit_log=state.commit_log,
            checkpoint=state.checkpoint,
            queues=state.queues,
            index=state.index,
            maintenance=self._maintenance,
            observer=self._observer,
        )
        self._parts = parts
        self._journal = PositionsJournal(state.queues, self._paths.consume_queue_positions_file)
        self._journal.opened(*state.journal_file)
        self._queue_flush = FlushConsumeQueueService(parts, self._dispatch_position, self._journal)
        self._schedule = ScheduleMessageService(
            self, self.delay_levels_ms, self._paths.delay_offset_file
        )
        await asyncio.to_thread(self._schedule.load_blocking)
        self._timer = TimerMessageService(
            self,
            self._paths.timer_checkpoint_file,
            max_put_bytes=min(4 << 20, self._config.mapped_file_size_commit_log // 4),
        )
        self._transactions = TransactionService(self, self._paths.transaction_checkpoint_file)
        self._cleanup = CleanupService(
            parts,
            self._disk_usage,
            dispatch_offset=lambda: self.dispatch_offset,
            on_disk_state=self._on_disk_state,
            consumer_progress=lambda: self._consumer_progress(),
        )
        self.disk_used_ratio = await asyncio.to_thread(
            self._disk_usage, str(self._paths.commit_log_dir)
        )
        total = (await asyncio.to_thread(shutil.disk_usage, self._paths.commit_log_dir)).total
        self._disk_check_bytes = max(1 << 20, min(64 << 20, total // 100))
        await asyncio.to_thread(write_abort_marker_blocking, self._paths.abort_file)
        self._commit_log.start()
        self._reput.last_timestamp = state.last_dispatch_timestamp
        self._reput.start()
        self._queue_flush.start()
        self._cleanup.start()
        await self._start_replication(state.commit_log)
        if not self._replica:  # a replica writes nothing of its own: no delays, timers, pops
            await self._start_master_services()
        self._state = "started"

    async def _start_master_services(self) -> None:
        """What only a master runs: delay levels, timers, transaction checks, pop (at start,
        or when a replica is promoted)."""
        assert self._schedule and self._timer and self._transactions
        # Loaded here, not at start: a replica's log grows with its master's deliveries and
        # resolutions, so the walk for them from the checkpoint's P must happen when it takes
        # over (a ledger loaded at a replica's start would deliver them again).
        await asyncio.to_thread(self._timer.load_blocking)
        await asyncio.to_thread(self._transactions.load_blocking)
        self._schedule.start()
        self._listeners.append(self._schedule.on_arrival)
        self._timer.start()
        self._listeners.append(self._timer.on_arrival)
        self._transactions.start()
        self._pop = PopService(
            self._paths.pop_journal_file,
            read=self.get_messages,
            queue_ids=lambda topic: [q.queue_id for q in self._queues.of_topic(topic)],
            min_offset=self.get_min_offset,
            put=self.put,
            committed=lambda group, topic, queue_id: self._committed(group, topic, queue_id),
        )
        await self._pop.start()
        self._listeners.append(self._pop.on_arrival)

    async def shutdown(self) -> None:
        if self._state != "started":
            self._state = "stopped"
            return
        self._state = "stopping"
        assert self._commit_log and self._reput and self._queue_flush and self._cleanup
        assert self._source is not None
        if self._ha_slave is not None:
            await self._ha_slave.stop()
        if self._pop is not None:
            await self._pop.stop()
        if self._schedule is not None:
            await self._schedule.stop()
        if self._timer is not None:
            await self._timer.stop()
        if self._transactions is not None:
            await self._transactions.stop()
        await self._cleanup.stop()
        for task in list(self._background):
            await task
        if self._ha_master is not None:  # after the last puts: their waiters are answered
            await self._ha_master.stop()
        await self._commit_log.shutdown(close_files=False)  # stops flushing after a final sync
        await self._reput.wait_dispatched(self._source.dispatch_limit(), 10.0)
        await self._reput.stop()
        await self._queue_flush.stop()  # final flush of queues/index + checkpoint
        positions_file = self._paths.consume_queue_positions_file
        if all(queue.unflushed_bytes == 0 for queue in self._queues):
            # Only what is durable: a failed final flush leaves the next start to read files.
            await asyncio.to_thread(
                self._queues.save_positions_blocking, positions_file, self.dispatch_offset
            )
        else:
            await asyncio.to_thread(positions.remove_blocking, positions_file)
        self._queues.close()
        if self._index is not None:
            self._index.close()
        self._commit_log.close()
        # Last, once everything is durable; unlink + directory fsync (store/paths.py).
        await asyncio.to_thread(remove_abort_marker_blocking, self._paths.abort_file)
        self._state = "stopped"

    # --- writes ------------------------------------------------------------------------------
    def append(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> AppendResult:
        """Validate and append a batch (consecutive queue offsets in one queue). Never awaits.
        Messages with a DELAY property go to SCHEDULE_TOPIC_XXXX queue level-1 (the real
        topic/queue kept in REAL_TOPIC/REAL_QID). Raises InvalidMessageError (nothing written),
        StoreNotWritableError. In SYNC_FLUSH mode a background group-commit request is filed
        (``put`` is the call that waits for it): dispatch only follows synced data."""
        result = self._append(topic, queue_id, messages)
        if self._sync_flush:
            self._spawn(self._sync_in_background(result.end_offset))
        return result

    async def _sync_in_background(self, end_offset: int) -> None:
        assert self._commit_log is not None and self._reput is not None
        try:
            await self._commit_log.wait_flushed(end_offset)
        except StoreNotWritableError:
            return  # sticky failure / shutdown: already surfaced to writers and in health()
        self._reput.wakeup_for(end_offset)

    def _append(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> AppendResult:
        self._check_writable()
        if not messages:
            raise InvalidMessageError("a batch needs at least one message")
        _check_queue_id(queue_id)
        level = delay_level_of(messages)
        now = int(time.time() * 1000)
        if level > 0:
            topic, queue_id, messages = to_schedule_topic(
                topic, queue_id, min(level, len(self.delay_levels_ms)), messages
            )
        elif topic not in (TIMER_TOPIC, TRANS_HALF_TOPIC) and is_half(messages):
            topic, queue_id, messages = to_half_topic(topic, queue_id, messages)
        elif topic != TIMER_TOPIC:
            cfg = self._config
            times = timer_times(messages, now, cfg.timer_max_delay_sec)
            if times is not None:
                topic, queue_id, messages = to_timer_topic(topic, queue_id, times, messages)
        return self._append_to_queue(
            topic,
            queue_id,
            len(messages),
            lambda log, first: log.append(topic, queue_id, first, messages, now),
        )

    def _append_to_queue(
        self,
        topic: str,
        queue_id: int,
        count: int,
        write: Callable[[CommitLog, int], AppendResult],
    ) -> AppendResult:
        """Give ``write`` the queue's next offset, then advance it by ``count`` and account
        for the batch (one place for every kind of append)."""
        key = (topic, queue_id)
        first_queue_offset = self._offset_table.get(key, 0)
        commit_log = self._commit_log
        assert commit_log is not None and self._reput is not None
        result = write(commit_log, first_queue_offset)
        self._offset_table[key] = first_queue_offset + count
        self._account(commit_log, count, result.end_offset - result.offsets[0])
        return result

    def _account(self, commit_log: CommitLog, count: int, nbytes: int) -> None:
        """After an append of ``count`` messages in ``nbytes``: totals, the disk check, the
        wakeups of the flush, the dispatch and the replicas."""
        self.messages_put_total += count
        self.bytes_put_total += nbytes
        self._bytes_since_disk_check += nbytes
        if self._bytes_since_disk_check >= self._disk_check_bytes and self._cleanup is not None:
            self._bytes_since_disk_check = 0
            self._cleanup.request_disk_check()
        if hops.ENABLED:
            hops.stamp("b.appended")
        if not self._sync_flush:
            commit_log.wakeup_flush()
            assert self._reput is not None
            self._reput.wakeup()
        if self._ha_master is not None:
            self._ha_master.notify_append()  # replication runs alongside the local flush

    async def put(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> PutResult:
        """append() plus the durability wait of the flush mode: SYNC_FLUSH awaits the group
        commit (FLUSH_DISK_TIMEOUT after syncFlushTimeout); ASYNC_FLUSH wakes the flush service
        and returns at once."""
        await self._dispatch_backpressure()
        return await self._durable(self.put_append(topic, queue_id, messages))

    def put_append(
        self, topic: str, queue_id: int, messages: Sequence[MessageInput]
    ) -> AppendResult:
        """``put`` in two parts, for a caller that appends on the spot and waits elsewhere:
        this synchronous append (no dispatch back-pressure: check ``dispatch_lagging()``
        first and call ``put`` instead while it is True), then ``durable(result)`` or, under
        SYNC_FLUSH, ``flush_waiter(result)`` + ``flushed_result``. ``put`` is exactly these."""
        return self._append(topic, queue_id, messages)

    async def durable(self, result: AppendResult) -> PutResult:
        """The durability part of ``put``/``put_records`` for what ``put_append`` or
        ``put_records_append`` returned (the same statuses and errors)."""
        return await self._durable(result)

    async def durable_many(self, results: Sequence[AppendResult]) -> list[PutResult]:
        """``durable`` of several appends made in order: one wait, for the last one (durability
        reaches offsets in order), whose status every result gets (a time-out of the last one
        is reported for all: a retry of an earlier one may store it twice, as after any
        time-out)."""
        last = await self._durable(results[-1])
        return [PutResult(last.status, result) for result in results[:-1]] + [last]

    async def _durable(self, result: AppendResult) -> PutResult:
        """The durability wait of a put: none in ASYNC_FLUSH; SYNC_FLUSH awaits the group
        commit, then lets dispatch follow (it only dispatches what is on disk). A SYNC_MASTER
        also awaits its replicas, in parallel with the flush: FLUSH_DISK_TIMEOUT first, then
        the replicas' verdict (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE)."""
        ha = self._ha_master
        replicated = (
            ha.wait_replicated(result.end_offset) if ha is not None and ha.sync_master else None
        )
        status = PutStatus.PUT_OK
        if self._sync_flush:
            assert self._commit_log is not None
            status = self._flush_status(
                result, await self._commit_log.wait_flushed(result.end_offset)
            )
        if replicated is not None:
            verdict = await replicated
            if status is PutStatus.PUT_OK:
                status = verdict
        return self._acknowledged(result, status)

    def flush_waiter(self, result: AppendResult) -> asyncio.Future[bool] | None:
        """SYNC_FLUSH without replicas to wait for (not a SYNC_MASTER): the group commit's
        future for ``result``, filed now (the sync starts at once); when it is done,
        ``flushed_result(result, waiter)`` is the PutResult ``durable`` would have returned.
        Cancelling it withdraws the wait. None when the durability wait is more (or nothing):
        then await ``durable(result)``. Raises FlushFailedError/StoreShutDownError at once."""
        ha = self._ha_master
        if not self._sync_flush or (ha is not None and ha.sync_master):
            return None
        assert self._commit_log is not None
        return self._commit_log.flush_waiter(result.end_offset)

    def flushed_result(self, result: AppendResult, waiter: asyncio.Future[bool]) -> PutResult:
        """The PutResult of a done ``flush_waiter``: PUT_OK or FLUSH_DISK_TIMEOUT; raises the
        sync's error, or MasterFencedError when this master was fenced meanwhile."""
        return self._acknowledged(result, self._flush_status(result, waiter.result()))

    def _flush_status(self, result: AppendResult, flushed: bool) -> PutStatus:
        """After the group commit answered: dispatch follows (it only dispatches synced data)."""
        assert self._reput is not None
        if hops.ENABLED:
            hops.stamp("b.put_resumed")
        self._reput.wakeup_for(result.end_offset)
        return PutStatus.PUT_OK if flushed else PutStatus.FLUSH_DISK_TIMEOUT

    def _acknowledged(self, result: AppendResult, status: PutStatus) -> PutResult:
        if self._fence is not None:
            reason = self._fence()
            if reason:  # stored, but this master may no longer speak for the group
                raise MasterFencedError(f"{reason}: the message may not be kept")
        return PutResult(status, result)

    def _confirm_offset(self) -> int:
        ha = self._ha_master
        return ha.confirm_offset() if ha is not None else self.commit_log_end()

    async def _start_replication(self, commit_log: CommitLog) -> None:
        """A SLAVE dials its master; a master with haListenPort listens for replicas."""
        config, link = self._config, self._link
        assert self._reput is not None
        reput = self._reput
        if self._replica:

            def appended() -> None:
                if self._sync_flush:  # dispatch follows the sync, as for a master's appends
                    self._spawn(self._sync_in_background(commit_log.max_offset))
                else:
                    commit_log.wakeup_flush()
                    reput.wakeup()

            self._ha_slave = HASlave(
                commit_log,
                config,
                (link.cluster, link.broker_name, link.broker_id),
                link.master_address or (lambda: config.ha_master_address),
                appended,
                link.apply_metadata,
                epochs=lambda: self._epochs,
                on_epochs=self._take_epochs,
                on_truncate=self._truncate_and_restart,
                credentials=link.credentials,
                ssl_context=link.client_ssl,
            )
            self._ha_slave.start()
        elif config.ha_listen_port >= 0:
            self._ha_master = HAMaster(
                commit_log,
                config,
                reput.wakeup,
                link.metadata,
                replica_secret=link.replica_secret,
                ssl_context=link.server_ssl,
            )
            await self._ha_master.start()

    async def _take_epochs(self, entries: Epochs) -> None:
        """A replica adopts its master's terms at each handshake."""
        if entries != self._epochs:
            self._epochs = list(entries)
            await asyncio.to_thread(epochs.save_blocking, self._paths.epochs_file, self._epochs)

    def _lower_ledgers_blocking(self, offset: int) -> None:
        """The commit log is cut at ``offset``: the timer's and the transactions' checkpoints
        must not walk for closing records from a P past it (the bytes there will be other
        records, replicated from the new master)."""
        for path in (self._paths.timer_checkpoint_file, self._paths.transaction_checkpoint_file):
            lower_log_offset_blocking(path, offset)

    async def _truncate_and_restart(self, offset: int) -> None:
        await asyncio.to_thread(truncation.request_blocking, self._paths, offset)
        if self._link.restart is not None:
            self._link.restart(f"replica log truncation at {offset}")

    # --- controller mode -----------------------------------------------------------------------
    def set_write_fence(self, fence: Callable[[], str] | None) -> None:
        """``fence()`` returns why this master must not acknowledge now ('' = it may): the
        controller's lease has run out. Checked before an append and before an ack."""
        self._fence = fence

    def delay_offsets(self) -> dict[int, int]:
        """Delay level -> the SCHEDULE_TOPIC_XXXX queue offset delivered up to (replicas
        follow it, so a promoted replica neither loses nor repeats delayed deliveries)."""
        return dict(self._schedule.offset_table) if self._schedule is not None else {}

    def follow_delay_offsets(self, table: Mapping[int, int]) -> None:
        """A replica takes its master's delay offsets (and persists them)."""
        schedule = self._schedule
        if schedule is None or not self._replica or table == schedule.offset_table:
            return
        schedule.offset_table = dict(table)
        self._spawn(schedule.persist())

    def replica_redial(self) -> None:
        """A replica's master moved: reconnect to where ``ReplicaLink.master_address`` points."""
        if self._ha_slave is not None:
            self._ha_slave.redial()

    @property
    def epochs(self) -> Epochs:
        return list(self._epochs)

    async def promote(self, epoch: int, sync_master: bool) -> None:
        """A replica becomes the master of term ``epoch``: it stops copying, dispatches all it
        has and takes the queue offsets from its ConsumeQueues (a reused offset would lose
        messages, RocketMQ #7689), records (epoch, log end) durably before any write, then
        starts what only a master runs (delays, timers, transaction checks, pop) and its
        replication listener."""
        if not self._replica:
            raise RuntimeError("promote() of a store that is already a master")
        assert self._commit_log is not None and self._reput is not None and self._source
        if self._ha_slave is not None:
            await self._ha_slave.stop()
            self._ha_slave = None
        commit_log = self._commit_log
        end = commit_log.max_offset
        if not await self._reput.wait_dispatched(end, 60.0):
            raise StoreNotWritableError(f"dispatch did not reach {end}: cannot take over")
        self._offset_table = {(q.topic, q.queue_id): q.max_offset for q in self._queues}
        self._epochs = [*(e for e in self._epochs if e[0] < epoch), (epoch, end)]
        await asyncio.to_thread(epochs.save_blocking, self._paths.epochs_file, self._epochs)
        if sync_master:
            self._source.confirm = self._confirm_offset
        self._replica = False
        await self._start_master_services()
        self._ha_master = HAMaster(
            commit_log,
            self._config,
            self._reput.wakeup,
            self._link.metadata,
            sync_master=sync_master,
            epochs=lambda: self._epochs,
            replica_secret=self._link.replica_secret,
            ssl_context=self._link.server_ssl,
        )
        await self._ha_master.start()
        log.warning("promoted to master of term %d at log end %d (%s)", epoch, end,
                    "SYNC_MASTER" if sync_master else "ASYNC_MASTER")  # fmt: skip

    async def put_records(
        self, topic: str, queue_id: int, data: bytes, born_host: str
    ) -> PutResult:
        """``put`` for a send batch of pre-encoded records (``wharf.store.codec.send_records``): checked
        (InvalidMessageError names the first bad record; nothing is written then), patched with
        the broker-owned fields and appended with one copy. Properties are stored as given: a
        DELAY property does not re-address anything here (delayed messages go through ``put``)."""
        await self._dispatch_backpressure()
        return await self._durable(self.put_records_append(topic, queue_id, data, born_host))

    def put_records_append(
        self, topic: str, queue_id: int, data: bytes, born_host: str
    ) -> AppendResult:
        """The synchronous append of ``put_records`` (see ``put_append`` for the two parts)."""
        positions = check_records(data, topic, self._config.max_message_size)
        self._check_writable()
        _check_queue_id(queue_id)
        return self._append_to_queue(
            topic,
            queue_id,
            len(positions),
            lambda log, first: log.append_records(
                topic, queue_id, first, data, positions, born_host
            ),
        )

    def put_records_append_many(
        self, batches: Sequence[tuple[str, int, bytes]], born_host: str
    ) -> list[AppendResult | Exception]:
        """``put_records_append`` of several (topic, queue id, records) at once, appended
        together (``CommitLog.append_records_many``: one write). A batch that fails its checks
        gets its error in its place and is not written; the others are. A failed write raises
        (nothing of it is in the queues' offsets). Where they do not fit the segment together,
        each is appended on its own, an error failing its batch alone."""
        self._check_writable()
        if len(batches) == 1:
            return [self._records_or_error(t, q, data, born_host) for t, q, data in batches]
        results: list[AppendResult | Exception] = []
        checked: list[RecordsBatch] = []
        where: list[int] = []
        next_offsets: dict[tuple[str, int], int] = {}
        offset_table = self._offset_table
        limit = self._config.max_message_size
        for index, (topic, queue_id, data) in enumerate(batches):
            try:
                positions = check_records(data, topic, limit)
                _check_queue_id(queue_id)
            except InvalidMessageError as exc:
                results.append(exc)
                continue
            key = (topic, queue_id)
            first = next_offsets.get(key)
            if first is None:
                first = offset_table.get(key, 0)
            next_offsets[key] = first + len(positions)
            checked.append(RecordsBatch(topic, queue_id, first, data, positions))
            where.append(index)
            results.append(_NOT_YET)  # replaced by its AppendResult below
        if not checked:
            return results
        commit_log = self._commit_log
        assert commit_log is not None and self._reput is not None
        appended = commit_log.append_records_many(checked, born_host)
        if appended is None:  # not in the rest of the segment together: one by one
            return [self._records_or_error(t, q, data, born_host) for t, q, data in batches]
        offset_table.update(next_offsets)
        count = nbytes = 0
        for index, result in zip(where, appended, strict=True):
            results[index] = result
            count += len(result.sizes)
            nbytes += result.end_offset - result.offsets[0]
        self._account(commit_log, count, nbytes)
        return results

    def _records_or_error(
        self, topic: str, queue_id: int, data: bytes, born_host: str
    ) -> AppendResult | Exception:
        try:
            return self.put_records_append(topic, queue_id, data, born_host)
        except StoreError as exc:  # this batch's alone, as a request of its own would get
            return exc

    def dispatch_lagging(self) -> bool:
        """True while ``put`` would first wait for dispatch to catch up (it is more than
        ``max_dispatch_lag_bytes`` behind the written end)."""
        limit = self._config.max_dispatch_lag_bytes
        commit_log, reput = self._commit_log, self._reput
        if limit <= 0 or commit_log is None or reput is None:
            return False
        return commit_log.wrote_offset - reput.reput_from_offset > limit

    async def dispatch_room(self) -> None:
        """The dispatch back-pressure wait of ``put``, for a caller appending several batches
        with ``put_append``/``put_records_append`` at once (see ``_dispatch_backpressure``)."""
        await self._dispatch_backpressure()

    async def _dispatch_backpressure(self) -> None:
        """Hold a put while dispatch is more than ``max_dispatch_lag_bytes`` behind, until it
        is back to half of that (bounded by syncFlushTimeout; a failing reput stops the wait)."""
        if not self.dispatch_lagging():
            return
        assert self._commit_log is not None and self._reput is not None
        self.throttled_puts += 1
        target = self._commit_log.wrote_offset - self._config.max_dispatch_lag_bytes // 2
        await self._reput.wait_dispatched(target, self._config.sync_flush_timeout / 1000)

    def _check_writable(self) -> None:
        if self._fence is not None:
            reason = self._fence()
            if reason:
                raise MasterFencedError(reason)
        ha = self._ha_master
        if ha is not None:
            refusal = ha.refusal()
            if refusal:
                raise InSyncReplicasNotEnoughError(refusal)
        if self._replica:
            raise NotMasterError(
                f"this broker is a SLAVE of {self._link.broker_name} (brokerRole): it takes "
                "writes from its master only; send to the master"
            )
        if self._state != "started":
            raise StoreShutDownError(f"the store is {self._state}: writes are refused")
        if self._disk_full_reason:
            raise DiskFullError(self._disk_full_reason)
        # A sticky flush failure is raised by CommitLog.append itself (FlushFailedError).

    # --- reads -------------------------------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter | None = None,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> GetResult:
        """RocketMQ's DefaultMessageStore.getMessage (see ``wharf.store.read.get_message``)."""
        assert self._commit_log is not None
        return get_messages(
            self._queues.find(topic, queue_id),
            self._commit_log,
            offset,
            max_count,
            tag_filter,
            max_bytes,
        )

    def get_raw_records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter | None = None,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> RawGetResult:
        """``get_messages`` without decoding: the stored records' bytes, selected by tag HASH
        only (readers re-check exact tags; see ``wharf.store.read.get_raw``)."""
        assert self._commit_log is not None
        return get_raw_records(
            self._queues.find(topic, queue_id),
            self._commit_log,
            offset,
            max_count,
            tag_filter,
            max_bytes,
        )

    def read_consume_queue(
        self, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[Unit]:
        queue = self._queues.find(topic, queue_id)
        if queue is None or offset >= queue.max_offset:
            return []
        return list(queue.read_units(max(offset, queue.min_offset), max_count))

    def look_message_by_offset(self, commit_log_offset: int) -> StoredMessage | None:
        assert self._commit_log is not None
        if commit_log_offset < 0:
            return None
        try:
            return self._commit_log.read_message(commit_log_offset)
        except CorruptRecordError:
            # Offsets come from users (offset message ids): one that is not a record start is
            # "not found", not a store fault.
            return None

    def _store_time(self, offset: int, size: int) -> int | None:
        assert self._commit_log is not None
        return self._commit_log.store_timestamp_at(offset)

    def look_message_by_msg_id(self, offset_msg_id: str) -> StoredMessage | None:
        _, offset = decode_offset_msg_id(offset_msg_id)
        return self.look_message_by_offset(offset)

    def query_messages(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[StoredMessage]:
        """By KEYS entry or unique id, through the IndexFiles; newest first. Hash collisions
        and records outside [begin_ms, end_ms] are dropped after decoding."""
        if self._index is None or max_num <= 0 or not key:
            return []
        # Index time is whole seconds since the file's begin: widen, then check exactly.
        offsets = self._index.query_offsets(
            topic, key, max(max_num * 2, max_num + 16), begin_ms - 1000, end_ms
        )
        found: list[StoredMessage] = []
        for offset in offsets:
            msg = self.look_message_by_offset(offset)
            if msg is None or msg.topic != topic:
                continue
            if not begin_ms <= msg.store_timestamp <= end_ms:
                continue
            if key != msg.unique_id and key not in msg.keys:
                continue
            found.append(msg)
            if len(found) >= max_num:
                break
        return found

    def get_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (max offset if none)."""
        queue = self._queues.find(topic, queue_id)
        if queue is None:
            return 0
        assert self._commit_log is not None
        return queue.offset_by_time(timestamp_ms, self._store_time)

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.find(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.find(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    def get_queue_stats(self, topic: str) -> list[QueueStat]:
        assert self._commit_log is not None
        stats = []
        for queue in self._queues.of_topic(topic):
            last = queue.get_unit(queue.max_offset - 1) if queue.max_offset else None
            stamp = 0
            if last is not None and last[1] != BLANK_UNIT_SIZE:
                stamp = self._store_time(last[0], last[1]) or 0
            stats.append(QueueStat(queue.queue_id, queue.min_offset, queue.max_offset, stamp))
        return stats

    async def delete_topics(self, topics: Sequence[str], timeout_s: float = 5.0) -> None:
        """Forget the topics' queues and their pop state; their files are deleted in a thread.
        First wait (up to ``timeout_s``) for dispatch to reach what is written now: a record of
        a topic dispatched after its queues were dropped re-created the queue, and a queue file
        created in a thread for a queue dropped meanwhile was never closed (a soak deleting a
        topic every 5 s, right after sending to it, leaked ~10 descriptors a minute)."""
        if not await self.wait_dispatched(timeout_s):
            log.warning("deleting topics %s before dispatch caught up", ", ".join(topics))
        if self._pop is not None:
            self._pop.forget(topics=topics)

        def remove() -> list[ConsumeQueue]:
            doomed = []
            for topic in topics:
                doomed.extend(self._queues.remove_topic(topic))
                for key in [k for k in self._offset_table if k[0] == topic]:
                    del self._offset_table[key]
            return doomed

        # Recorded first: a restart after a crash must not load the deleted queues.
        doomed = (
            await self._journal.remove_topics(topics, remove)
            if self._journal is not None
            else remove()
        )
        if doomed:
            self._spawn(self._destroy_queues(doomed))

    async def _destroy_queues(self, queues: list) -> None:
        async with self._maintenance:
            for queue in queues:
                await asyncio.to_thread(queue.destroy_blocking)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- listeners / status ------------------------------------------------------------------
    def set_consumer_progress(
        self, provider: Callable[[], Mapping[tuple[str, int], Mapping[str, int]]]
    ) -> None:
        """The broker's committed offsets, ``(topic, queue_id) -> {group: offset}``: retention
        counts the messages it deletes that a group had not consumed (the store keeps no
        consumer offsets itself)."""
        self._consumer_progress = provider

    def set_committed_offsets(self, committed: Callable[[str, str, int], int]) -> None:
        """The broker's committed offset of (group, topic, queue id), -1 for none: pop never
        hands out a group's messages below it (``PopService``'s floor)."""
        self._committed = committed

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        self._listeners.append(listener)

    def set_dispatch_waiters(self, waiting: Callable[[], bool] | None) -> None:
        """``waiting()``: True while a reader waits for new messages (a parked long poll).
        Under SYNC_FLUSH each sync then dispatches what it made durable in its own callback,
        before its writers are answered (see ``_after_sync``)."""
        self._dispatch_waiters = waiting

    def _after_sync(self) -> None:
        """SYNC_FLUSH, after each sync and before its writers are answered: while a reader
        waits, dispatch a small sync right here (``ReputService.dispatch_inline``: up to
        64 KiB; a larger one wakes the reput task), so the parked pull is woken before the
        writers' acks are built. With nobody waiting, dispatch follows the writers as
        before: answering them first keeps a producer's requests in flight short."""
        waiting = self._dispatch_waiters
        if waiting is not None and self._reput is not None and waiting():
            self._reput.dispatch_inline()

    def _during_sync(self) -> None:
        """SYNC_FLUSH, right after a sync was requested: while a reader waits, read and plan
        the dispatch of what was written (``ReputService.prepare_inline``) while the fdatasync
        runs, so ``_after_sync`` only applies it (a lone 1 KiB record: the read and plan
        were ~70 of the ~110 us between the sync's end and the start of the ConsumeQueue
        writes, measured with hop stamps on this 2-core VM)."""
        waiting = self._dispatch_waiters
        if waiting is not None and self._reput is not None and waiting():
            assert self._commit_log is not None
            self._reput.prepare_inline(self._commit_log.max_offset)

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _notify_arrivals(self, advanced: QueueAdvance) -> None:
        for (topic, queue_id), max_offset in advanced.items():
            for listener in list(self._listeners):
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:
                    log.exception("arrival listener %r failed for %s/%d", listener, topic, queue_id)

    async def wait_dispatched(self, timeout_s: float = 5.0) -> bool:
        """True once everything appended so far is visible to reads (in SYNC_FLUSH mode that
        includes waiting for its sync)."""
        assert self._reput is not None and self._commit_log is not None
        return await self._reput.wait_dispatched(self._visible_end(), timeout_s)

    @property
    def dispatch_pending(self) -> bool:
        """Appended data is not yet visible to reads (acks precede dispatch)."""
        return self._commit_log is not None and self.dispatch_offset < self._visible_end()

    def _visible_end(self) -> int:
        """What dispatch will reach without new events: the written end, or under SYNC_MASTER
        the replicas' confirm offset (a paused replica holds it for up to
        haMaxTimeSlaveNotCatchup: a pull must not wait for that as for a flush)."""
        assert self._commit_log is not None
        end = self._commit_log.wrote_offset
        source = self._source
        if source is not None and source.confirm is not None:
            end = min(end, source.confirm())
        return end

    @property
    def dispatch_offset(self) -> int:
        return self._reput.reput_from_offset if self._reput is not None else 0

    @property
    def dispatch_timestamp(self) -> int:
        return self._reput.last_timestamp if self._reput is not None else 0

    def _dispatch_position(self) -> tuple[int, int]:
        """The queue flush service's view of dispatch: (offset, last message's timestamp)."""
        return self.dispatch_offset, self.dispatch_timestamp

    def _on_disk_state(self, used_ratio: float, full_reason: str) -> None:
        """The cleanup service's report of each pass: the ratio is cached for ``stats()``; a
        non-empty reason refuses writes with DiskFullError until a pass reports "" again."""
        self.disk_used_ratio = used_ratio
        if full_reason and not self._disk_full_reason:
            log.error("store not writable: %s", full_reason)
        elif not full_reason and self._disk_full_reason:
            log.warning("store writable again: disk use back under the warning level")
        self._disk_full_reason = full_reason

    def stats(self) -> StoreStats:
        assert self._parts is not None, "stats() of a store that was never started"
        return build_stats(
            self._parts,
            dispatch_offset=self.dispatch_offset,
            disk_used_ratio=self.disk_used_ratio,
            not_writable_reason=self.not_writable_reason,
            messages_put_total=self.messages_put_total,
            bytes_put_total=self.bytes_put_total,
            recovery_seconds=self.recovery_seconds,
        )

    def health(self) -> list[dict[str, object]]:
        """Each background service's state: running, runs, failures, last error."""
        services = (
            self._commit_log.group_commit if self._commit_log is not None else None,
            self._commit_log.flush_service if self._commit_log is not None else None,
            self._reput,
            self._queue_flush,
            self._cleanup,
        )
        report = [service.health() for service in services if service is not None]
        for extra in (self._schedule, self._timer):
            if extra is not None and not self._replica:
                report.append(extra.health())
        return report

    @property
    def not_writable_reason(self) -> str:
        if self._state != "started":
            return f"store {self._state}"
        if self._disk_full_reason:
            return self._disk_full_reason
        return self._commit_log.not_writable_reason if self._commit_log is not None else ""

    @property
    def writable(self) -> bool:
        return not self.not_writable_reason

    @property
    def config(self) -> StoreConfig:
        return self._config

    @property
    def pop(self) -> PopService:
        """Pop consumption (invisible time, ack, DLQ): see ``wharf.store.pop``."""
        if self._pop is None:
            if self._replica:
                raise NotMasterError("pop consumption is served by the master, not a SLAVE")
            raise StoreShutDownError("pop is available once the store has started")
        return self._pop

    @property
    def ha_master(self) -> HAMaster | None:
        """The replication listener of a master with haListenPort (None otherwise)."""
        return self._ha_master

    @property
    def ha_slave(self) -> HASlave | None:
        """A SLAVE's connection to its master (None on a master)."""
        return self._ha_slave

    @property
    def is_replica(self) -> bool:
        return self._replica

    def replication_status(self) -> ReplicationStatus:
        """Role, offsets and replicas (a master) or the link to the master (a SLAVE)."""
        end = self.commit_log_end()
        epoch = self._epochs[-1][0] if self._epochs else 0
        if self._replica:
            return replica_status(self._ha_slave, end, epoch)
        return master_status(
            self._config.broker_role, self._ha_master, end, epoch, self._link.broker_id
        )

    # --- a running store's insides, for tests and benchmarks (nothing in the store uses them) --
    @property
    def commit_log(self) -> CommitLog:
        assert self._commit_log is not None
        return self._commit_log

    @property
    def queues(self) -> ConsumeQueueTable:
        return self._queues

    @property
    def index(self) -> IndexService | None:
        return self._index

    @property
    def paths(self) -> StorePaths:
        return self._paths

    @property
    def reput_service(self) -> ReputService:
        assert self._reput is not None
        return self._reput

    @property
    def queue_flush_service(self) -> FlushConsumeQueueService:
        assert self._queue_flush is not None
        return self._queue_flush

    @property
    def cleanup_service(self) -> CleanupService:
        assert self._cleanup is not None
        return self._cleanup

    @property
    def schedule_service(self) -> ScheduleMessageService:
        assert self._schedule is not None
        return self._schedule

    @property
    def timer(self) -> TimerMessageService:
        """Delivery at any time: ``cancel`` (recall), ``stats``."""
        assert self._timer is not None
        return self._timer

    @property
    def transactions(self) -> TransactionService:
        """Half messages: ``end`` (commit / rollback), check-back bookkeeping, ``stats``."""
        assert self._transactions is not None
        return self._transactions

    # --- TimerHost / TransactionHost (the services' view of the store) ------------------------
    def commit_log_end(self) -> int:
        assert self._commit_log is not None
        return self._commit_log.max_offset

    def marks_since(self, commit_log_offset: int, prop: str) -> list[int]:
        """The integer value of property ``prop`` in every record from ``commit_log_offset``
        on: a start-up walk for the records that closed ledger entries after a checkpoint
        (delivered timer copies, transaction resolutions)."""
        assert self._commit_log is not None
        found: list[int] = []
        offset = commit_log_offset
        end = self._commit_log.max_offset
        while offset < end:
            batch = self._commit_log.iter_dispatch(offset, 4 << 20)
            for req in batch.requests:
                text = req.properties.get(prop, "")
                if text.isdigit():
                    found.append(int(text))
            if batch.next_offset <= offset:
                break
            offset = batch.next_offset
        return found

    @property
    def checkpoint(self) -> StoreCheckpoint:
        assert self._parts is not None
        return self._parts.checkpoint


_NOT_YET = RuntimeError("not appended")


def _check_queue_id(queue_id: int) -> None:
    if not isinstance(queue_id, int) or not 0 <= queue_id <= _MAX_QUEUE_ID:
        raise InvalidMessageError(f"queue id {queue_id!r} must be an int in [0, 2^31-1]")
