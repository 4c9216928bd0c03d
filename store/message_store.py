"""MessageStore: the store's one public facade (RocketMQ's DefaultMessageStore, minus the god
class). It wires the CommitLog, ConsumeQueues, IndexFiles, ReputService, flush services, the
message services and cleanup, runs recovery at start, and delegates by concern:

- writes: ``write`` (append now; the ``Written`` tells durability), ``write_many``, ``put``
  (back-pressure + write + durability), ``append`` (durability nobody awaits): ``write.py``.
- role: ``role`` (master or replica, replication, terms, fence, promotion): ``role.py``;
  what only a master runs (delay levels, timers, transactions, pop): ``services/master.py``.
- reads: ``get_messages``/``get_raw_records`` (pulls, ``read/``), lookups by offset, key and
  time (``read/lookups.py``), ``read_consume_queue``, queue offsets, stats and counts.
- the message services' view of the store (``services/host.py`` ``StoreHost``).
- ``insides``: a running store's parts, for tests and benchmarks only (``insides.py``).

CONTRACT (the broker codes against exactly this):

- One asyncio event loop owns the store. Appends are synchronous and never await, which makes
  them atomic on that loop without a lock. Blocking syscalls (fdatasync, file creation,
  large scans, recovery) run in threads.
- ``start()`` loads and recovers (in a thread), writes the abort marker, starts the services;
  ``shutdown()`` stops them, flushes all, writes the checkpoint, removes the abort marker.
- ``MessageStore(config, observer=None, *, disk_usage=None, replication=None,
  consumers=None)``: ``disk_usage(path) -> ratio`` replaces ``os.statvfs`` for the retention
  thresholds (tests simulate 76/86/91 %); ``replication``: the ``ReplicaLink`` the role wires;
  ``consumers``: the ``ConsumerLink`` (``model.py``: long polls to wake, committed offsets).
- ``put()`` waits (before appending) while dispatch lags more than ``max_dispatch_lag_bytes``
  (a Wharf setting, 64 MiB): consumer lag and crash-restart re-dispatch stay bounded; a
  caller of ``write`` checks ``dispatch_lagging()`` and awaits ``dispatch_room()`` itself.
- ``await wait_dispatched(timeout_s)``: everything appended so far is visible to reads.
- ``pop``: the running ``PopService`` (``wharf.store.pop``), started after recovery and the
  services on a master, stopped first at shutdown (its DLQ copies still go through ``put``).
- visibility: ``wait_dispatched``, ``dispatch_offset``, ``add_arrival_listener``
  (``arrivals.py``: under SYNC_FLUSH a reader ``ConsumerLink.waiting`` names is served inside
  the sync).

WIRING: ``start()`` builds one ``StoreParts`` (``RecoveredState.parts``: what recovery opened,
the maintenance lock, the flush tally) and gives the services those parts plus named callables
for the live state they need (the dispatch position from ``Arrivals``, the disk state to the
``WriteGate``); the writer, the role and ``MasterServices`` get named callables too, and the
store's fire-and-forget work runs on ``BackgroundTasks`` (``service.py``). Nothing below this
module imports it (the import-linter layers contract in pyproject.toml checks that).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from wharf.store.arrivals import Arrivals
from wharf.store.config import SYNC_FLUSH, StoreConfig, parse_delay_levels
from wharf.store.dispatch.reput import CommitLogSource, Dispatcher, ReputService
from wharf.store.errors import NotMasterError, StoreShutDownError
from wharf.store.ha import ReplicaLink
from wharf.store.ha.master import HAMaster
from wharf.store.ha.status import ReplicationStatus
from wharf.store.index.index_files import IndexService
from wharf.store.insides import StoreInsides
from wharf.store.log.commit_log import CommitLog
from wharf.store.log.sync_engine import REFUSED
from wharf.store.model import (
    AppendResult,
    ArrivalListener,
    ConsumerLink,
    GetResult,
    MessageInput,
    PutHook,
    PutResult,
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
    use_group_shared,
    write_abort_marker_blocking,
)
from wharf.store.pop import PopService
from wharf.store.queue.consume_queue import ConsumeQueue, Unit
from wharf.store.queue.journal import PositionsJournal
from wharf.store.queue.table import ConsumeQueueTable, destroy_queues
from wharf.store.read.ahead import get_raw_records_ahead
from wharf.store.read.get_raw import RawGetResult
from wharf.store.read.kept import messages_at, raw_records_at
from wharf.store.read.lookups import look_message, marks_since, query_by_key, queue_stats
from wharf.store.recovery import RecoveredState, recover_blocking
from wharf.store.role import Role
from wharf.store.service import BackgroundTasks
from wharf.store.services.cleanup import CleanupService, DiskUsage, statvfs_used_ratio
from wharf.store.services.master import MasterServices
from wharf.store.services.queue_flush import FlushConsumeQueueService
from wharf.store.services.retention import RetentionService
from wharf.store.services.timer import TimerMessageService
from wharf.store.services.transactions import TransactionService
from wharf.store.stats import build_stats
from wharf.store.write import Batch, WriteGate, Writer, Written, WrittenMany, durable_all

log = logging.getLogger(__name__)

# Part of the facade's public names (``wharf.store`` exports it lazily from here).
__all__ = [
    "ArrivalListener",
    "DiskUsage",
    "MessageStore",
    "StoreObserver",
    "Written",
    "durable_all",
]


class MessageStore:
    def __init__(
        self,
        config: StoreConfig,
        observer: StoreObserver | None = None,
        *,
        disk_usage: DiskUsage | None = None,
        replication: ReplicaLink | None = None,
        consumers: ConsumerLink | None = None,
        put_hook: PutHook | None = None,
    ) -> None:
        """``put_hook``: where messages go (``PutHook``); None: where they are sent."""
        config.validate()
        self._config = config
        self._observer = FlushTally(observer)
        self._paths = StorePaths.of(config.store_path_root_dir)
        use_group_shared(config.store_group_shared)  # before any file is made
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
        self._consumers = consumers or ConsumerLink()
        self._arrivals = Arrivals(self._consumers)
        self._reput: ReputService | None = None
        self._queue_flush: FlushConsumeQueueService | None = None
        self._journal: PositionsJournal | None = None
        self._services: MasterServices[PopService] | None = None  # delays, timers, pop...
        self._cleanup: CleanupService | None = None
        self._maintenance = asyncio.Lock()  # CQ/index flush vs. deletion and truncation
        self._tasks = BackgroundTasks()
        self._gate = WriteGate()  # new -> started -> stopping -> stopped; disk full
        self._role = Role(config, self._paths, replication or ReplicaLink())
        self._writer = Writer(config, self._role, self._gate.check, self._tasks.spawn, put_hook)
        self.recovery_seconds = 0.0
        self.recovered: RecoveredState | None = None
        # Topic retention and compaction (services/retention.py); the broker hands it policies.
        self.retention = RetentionService(config, self._paths)
        self._writer.compacted = self.retention.compacted  # keyed messages only there

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Recover (in a thread), wire the parts, write the abort marker, start the services."""
        if self._gate.state != "new":
            raise RuntimeError(f"store already {self._gate.state}")
        started = time.monotonic()
        await self._role.before_recovery()
        state = await asyncio.to_thread(
            recover_blocking,
            self._config,
            self._paths,
            self.delay_levels_ms,
            self._observer,
            self._role.holds_tail,
        )
        self.recovered = state
        self.recovery_seconds = time.monotonic() - started
        commit_log = self._commit_log = state.commit_log
        source = self._source = CommitLogSource(commit_log, self._sync_flush)
        self._queues, self._index = state.queues, state.index
        reput = self._reput = ReputService(
            source=source,
            dispatcher=Dispatcher(self._queues, self._index, self.delay_levels_ms),
            on_advance=self._arrivals.notify,
            reput_from_offset=state.reput_from_offset,
        )
        self._arrivals.bind(reput, commit_log, source, self._role.notify_durable)
        parts = self._parts = state.parts(
            self._config, self._paths, self._maintenance, self._observer
        )
        self._journal = PositionsJournal(state.queues, self._paths.consume_queue_positions_file)
        self._journal.opened(*state.journal_file)
        self._queue_flush = FlushConsumeQueueService(parts, self._arrivals.position, self._journal)
        services = self._services = MasterServices(
            self._paths,
            self,
            self.delay_levels_ms,
            max_put_bytes=min(4 << 20, self._config.mapped_file_size_commit_log // 4),
            listen=self._arrivals.add,
            marks_since=functools.partial(marks_since, commit_log),
            new_pop=functools.partial(
                PopService,
                self._paths.pop_journal_file,
                read=self.get_messages,
                queue_ids=lambda topic: [q.queue_id for q in self._queues.of_topic(topic)],
                min_offset=self.get_min_offset,
                put=self.put,
                committed=self._consumers.committed,
            ),
        )
        await asyncio.to_thread(services.schedule.load_blocking)
        self._role.attach(
            commit_log,
            reput,
            source,
            self._writer.sync_in_background,
            self._writer.take_offsets,
            services.start,
        )
        await self.retention.open_and_start(state.queues, commit_log)
        cleanup = self._cleanup = CleanupService(
            parts,
            self._disk_usage,
            dispatch_offset=lambda: min(self._arrivals.offset, self.retention.keep_from()),
            on_disk_state=self._gate.on_disk_state,
            consumer_progress=self._consumers.progress,
        )
        log_dir = self._paths.commit_log_dir
        self._gate.disk_used_ratio = await asyncio.to_thread(self._disk_usage, str(log_dir))
        total = (await asyncio.to_thread(shutil.disk_usage, log_dir)).total
        self._writer.start(commit_log, reput, state.queues, cleanup.request_disk_check, total)
        await asyncio.to_thread(write_abort_marker_blocking, self._paths.abort_file)
        commit_log.start()
        reput.last_timestamp = state.last_dispatch_timestamp
        reput.start()
        self._queue_flush.start()
        cleanup.start()
        await self._role.start()
        if not self._role.replica:  # a replica writes nothing of its own: no delays, timers, pops
            await services.start()
        self._gate.state = "started"

    async def shutdown(self) -> None:
        if self._gate.state != "started":
            self._gate.state = "stopped"
            return
        self._gate.state = "stopping"
        assert self._commit_log and self._reput and self._queue_flush and self._cleanup
        assert self._source is not None and self._services is not None
        await self._role.stop_replica()
        await self._services.stop()
        await self._cleanup.stop()
        await self.retention.stop()
        await self._tasks.wait()
        await self._role.stop_master()  # after the last puts: their waiters are answered
        await self._commit_log.shutdown(close_files=False)  # stops flushing after a final sync
        await self._reput.wait_dispatched(self._source.dispatch_limit(), 10.0)
        await self._reput.stop()
        await self._queue_flush.stop()  # final flush of queues/index + checkpoint
        lost_tails = await self._queues.close_durably(
            self._paths.consume_queue_positions_file, self.dispatch_offset
        )
        if self._index is not None:
            self._index.close()
        self._commit_log.close()
        if lost_tails:
            log.warning("%d consume queues could not write their newest units: the next start "
                        "re-dispatches them from the commit log", lost_tails)  # fmt: skip
        else:
            # Last, once everything is durable; unlink + directory fsync (store/paths.py).
            await asyncio.to_thread(remove_abort_marker_blocking, self._paths.abort_file)
        self._gate.state = "stopped"

    # --- writes (``wharf.store.write``: the one write operation and its durability) ----------
    def write(self, topic: str, queue_id: int, batch: Batch, born_host: str = "") -> Written:
        """Append ``batch`` (messages, or producer-encoded records from ``born_host``) now,
        never awaiting; the ``Written`` tells its durability. No dispatch back-pressure: while
        ``dispatch_lagging()``, ``await dispatch_room()`` first (or call ``put``)."""
        return self._writer.write(topic, queue_id, batch, born_host)

    def write_many(
        self, batches: Sequence[tuple[str, int, bytes | memoryview]], born_host: str
    ) -> WrittenMany:
        """``write`` of several (topic, queue id, records) in one commit log write, answered
        as columns (each batch's place or its own error; ``durable()`` waits once for all)."""
        return self._writer.write_many(batches, born_host)

    def write_columns(
        self,
        topics: list[str],
        queue_ids: list[int],
        data: bytes,
        sizes: list[int],
        born_host: str,
    ) -> WrittenMany:
        """``write_many`` of batches laid out one after another in ``data`` (``sizes[i]``
        bytes of records for ``topics[i]``, queue ``queue_ids[i]``): a request's records blob
        written without slicing it."""
        return self._writer.write_columns(topics, queue_ids, data, sizes, born_host)

    def put(
        self, topic: str, queue_id: int, batch: Batch, born_host: str = ""
    ) -> Coroutine[Any, Any, PutResult]:
        """``write`` after the dispatch back-pressure wait, then its durability wait (the
        writer's coroutine itself: no frame of the facade's on the path)."""
        return self._writer.put(topic, queue_id, batch, born_host)

    def append(self, topic: str, queue_id: int, messages: Sequence[MessageInput]) -> AppendResult:
        """``write`` whose durability nobody awaits (under SYNC_FLUSH the sync is requested in
        the background, so dispatch follows)."""
        return self._writer.append(topic, queue_id, messages)

    def dispatch_lagging(self) -> bool:
        """True while ``put`` would first wait for dispatch (``max_dispatch_lag_bytes``)."""
        return self._writer.dispatch_lagging()

    def dispatch_room(self) -> Coroutine[Any, Any, None]:
        """The dispatch back-pressure wait of ``put``, once for several writes."""
        return self._writer.dispatch_room()

    # --- role (``wharf.store.role``: master or replica, replication, terms, fence) -----------
    @property
    def role(self) -> Role:
        """What failover drives (``broker/failover/role.py`` ``StoreRole``)."""
        return self._role

    @property
    def ha_master(self) -> HAMaster | None:
        """The replication listener of a master with haListenPort (None otherwise)."""
        return self._role.ha_master

    def replication_status(self) -> ReplicationStatus:
        """Role, offsets and replicas (a master) or the link to the master (a replica)."""
        return self._role.status()

    def delay_offsets(self) -> dict[int, int]:
        """Delay level -> the SCHEDULE_TOPIC_XXXX queue offset delivered up to (replicas
        follow it, so a promoted replica neither loses nor repeats delayed deliveries)."""
        return self._services.delay_offsets() if self._services is not None else {}

    def follow_delay_offsets(self, table: Mapping[int, int]) -> None:
        """A replica takes its master's delay offsets (and persists them)."""
        if self._services is not None and self._role.replica:
            self._services.follow_delay_offsets(table, self._tasks.spawn)

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
        """RocketMQ's DefaultMessageStore.getMessage (see ``wharf.store.read.get_message``;
        below a compacted queue's ``cleaned_to``, ``wharf.store.read.kept``)."""
        assert self._commit_log is not None
        queue = self._queues.find(topic, queue_id)
        return messages_at(self.retention, queue, self._commit_log, topic, queue_id, offset,
                           max_count, tag_filter, max_bytes)  # fmt: skip

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
        queue = self._queues.find(topic, queue_id)
        return raw_records_at(self.retention, queue, self._commit_log, topic, queue_id, offset,
                              max_count, tag_filter, max_bytes)  # fmt: skip

    def get_raw_records_ahead(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter | None,
        max_bytes: int,
    ) -> tuple[RawGetResult, int] | None:
        """During a sync: ``get_raw_records`` of the records it will make visible, and the
        log offset that must be durable before anyone may read them (``read/ahead.py``);
        None when no plan holds ``offset``."""
        assert self._commit_log is not None
        planned = self._arrivals.planned_units(topic, queue_id, offset)
        if planned is None:
            return None
        units, end = planned
        queue = self._queues.find(topic, queue_id)
        result = get_raw_records_ahead(
            queue, self._commit_log, units, offset, max_count, tag_filter, max_bytes
        )
        return result, end

    def write_when_durable(
        self, end: int, fd: int, data: bytes, done: Callable[[int], None]
    ) -> int:
        """Have the sync thread write ``data`` to socket ``fd`` once the log is durable to
        ``end`` (``sync_engine.py``): DEFERRED (``done(outcome)`` follows on the loop),
        DURABLE (write it yourself now) or REFUSED (wait for durability as usual)."""
        if self._commit_log is None or not self._sync_flush or self._arrivals.replicated:
            return REFUSED
        return self._commit_log.write_when_durable(end, fd, data, done)

    def read_consume_queue(
        self, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[Unit]:
        return self._queues.read_units(topic, queue_id, offset, max_count)

    def look_message_by_offset(self, commit_log_offset: int) -> StoredMessage | None:
        assert self._commit_log is not None
        return look_message(self._commit_log, commit_log_offset)

    def read_bytes(self, commit_log_offset: int, size: int) -> bytes | None:
        """The log's bytes at [offset, offset + size) (None past the end): a record as stored."""
        assert self._commit_log is not None
        return self._commit_log.read_bytes(commit_log_offset, size)

    def query_messages(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[StoredMessage]:
        """By KEYS entry or unique id, through the IndexFiles; newest first."""
        if self._index is None:
            return []
        assert self._commit_log is not None
        return query_by_key(self._index, self._commit_log, topic, key, max_num, begin_ms, end_ms)

    def get_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (max offset if none)."""
        queue = self._queues.find(topic, queue_id)
        if queue is None:
            return 0
        commit_log = self._commit_log
        assert commit_log is not None
        return queue.offset_by_time(timestamp_ms, lambda o, _: commit_log.store_timestamp_at(o))

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.find(topic, queue_id)
        return self.retention.min_offset(topic, queue_id, queue.min_offset if queue else 0)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.find(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    def queue_counts(self) -> dict[str, int]:
        """Each topic with a consume queue: its highest queue id + 1 (``TopicConfigManager.adopt``)."""
        return self._queues.queue_counts()

    def get_queue_stats(self, topic: str) -> list[QueueStat]:
        assert self._commit_log is not None
        return queue_stats(
            self._queues.of_topic(topic), self._commit_log, self.retention.min_offset
        )

    async def delete_topics(self, topics: Sequence[str], timeout_s: float = 5.0) -> None:
        """Forget the topics' queues and their pop state; their files are deleted in a thread.
        First wait (up to ``timeout_s``) for dispatch to reach what is written now: a record of
        a topic dispatched after its queues were dropped re-created the queue, and a queue file
        created in a thread for a queue dropped meanwhile was never closed (a soak deleting a
        topic every 5 s, right after sending to it, leaked ~10 descriptors a minute)."""
        if not await self.wait_dispatched(timeout_s):
            log.warning("deleting topics %s before dispatch caught up", ", ".join(topics))
        if self._services is not None:
            self._services.forget(topics)

        def remove() -> list[ConsumeQueue]:
            doomed = []
            for topic in topics:
                doomed.extend(self._queues.remove_topic(topic))
                self.retention.forget(topic)
                self._writer.forget_topic(topic)
            return doomed

        # Recorded first: a restart after a crash must not load the deleted queues.
        doomed = (
            await self._journal.remove_topics(topics, remove)
            if self._journal is not None
            else remove()
        )
        if doomed:
            self._tasks.spawn(destroy_queues(doomed, self._maintenance))

    # --- listeners / status ------------------------------------------------------------------
    def add_arrival_listener(
        self, listener: ArrivalListener, quiet: Callable[[], bool] | None = None
    ) -> None:
        """Another listener of every queue dispatch advances (``ConsumerLink.on_arrival`` is
        the first); ``quiet()`` True (nobody to wake) leaves it out of a report."""
        self._arrivals.add(listener, quiet=quiet)

    async def wait_dispatched(self, timeout_s: float = 5.0) -> bool:
        """True once everything appended so far is visible to reads (``arrivals.py``)."""
        return await self._arrivals.wait_dispatched(timeout_s)

    @property
    def dispatch_pending(self) -> bool:
        """Appended data is not yet visible to reads (acks precede dispatch)."""
        return self._arrivals.pending

    @property
    def dispatch_offset(self) -> int:
        return self._arrivals.offset

    @property
    def dispatch_timestamp(self) -> int:
        return self._arrivals.timestamp

    def stats(self) -> StoreStats:
        assert self._parts is not None, "stats() of a store that was never started"
        return build_stats(
            self._parts,
            dispatch_offset=self.dispatch_offset,
            disk_used_ratio=self._gate.disk_used_ratio,
            not_writable_reason=self.not_writable_reason,
            messages_put_total=self._writer.messages_put_total,
            bytes_put_total=self._writer.bytes_put_total,
            recovery_seconds=self.recovery_seconds,
            sends_held=self._writer.throttled_puts,
            sends_refused_busy=self._writer.busy_refusals,
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
        if self._services is not None and not self._role.replica:
            report.extend(self._services.health())
        return report

    @property
    def not_writable_reason(self) -> str:
        return self._gate.not_writable_reason(self._commit_log)

    @property
    def writable(self) -> bool:
        return not self.not_writable_reason

    @property
    def config(self) -> StoreConfig:
        return self._config

    @property
    def pop(self) -> PopService:
        """Pop consumption (invisible time, ack, DLQ): see ``wharf.store.pop``."""
        pop = self._services.pop if self._services is not None else None
        if pop is None:
            if self._role.replica:
                raise NotMasterError("pop consumption is served by the master, not a SLAVE")
            raise StoreShutDownError("pop is available once the store has started")
        return pop

    @property
    def insides(self) -> StoreInsides:
        """A running store's parts, for tests and benchmarks (``wharf.store.insides``)."""
        assert self._commit_log is not None and self._parts is not None, "not started"
        assert self._reput and self._queue_flush and self._cleanup and self._services
        return StoreInsides(
            commit_log=self._commit_log,
            queues=self._queues,
            index=self._index,
            paths=self._paths,
            checkpoint=self._parts.checkpoint,
            reput_service=self._reput,
            queue_flush_service=self._queue_flush,
            cleanup_service=self._cleanup,
            schedule_service=self._services.schedule,
            writer=self._writer,
        )

    @property
    def timer(self) -> TimerMessageService:
        """Delivery at any time: ``cancel`` (recall), ``stats``."""
        assert self._services is not None
        return self._services.timer

    @property
    def transactions(self) -> TransactionService:
        """Half messages: ``end`` (commit / rollback), check-back bookkeeping, ``stats``."""
        assert self._services is not None
        return self._services.transactions

    # --- StoreHost (services/host.py: the message services' view of the store) ---------------
    def commit_log_end(self) -> int:
        assert self._commit_log is not None
        return self._commit_log.max_offset
