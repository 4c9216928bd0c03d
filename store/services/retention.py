"""RetentionService (``MessageStore.retention``): per-topic retention and compaction, driven by
the topics' policies (``retention/policy.py``) that the broker hands over (``follow``).

Every ``compactionCheckInterval`` (15 s, Kafka's log.cleaner.backoff.ms) and on ``wakeup``:

1. **Retention** of topics whose policy has ``delete``: each queue's log start offset moves to
   the first record stored within ``retention.ms`` and to the first of the newest records
   that fit ``retention.bytes`` (sizes as stored; per queue, as Kafka's is per partition);
   DeleteRecords moves it on request (``delete_records``). A move is written to
   ``config/logStartOffsets.json`` (``retention/starts.py``) before it is applied: the queue's
   min offset moves up, so every protocol's earliest offset is the new start and a read below
   it is answered "offset too small, next = start" (Kafka: OFFSET_OUT_OF_RANGE, the client
   resets). Kafka deletes whole segments, so it keeps up to a segment more; here the start
   moves record by record. **Disk**: the commit log is shared by every topic, so its segments
   are still deleted by the store's own rule (``fileReservedTime``, disk pressure,
   ``services/cleanup.py``); a shorter topic retention hides records from that moment and
   frees their queue files with the segment, and a compacted queue's kept log drops them at
   its next pass.
2. **Compaction** of topics whose policy has ``compact`` (``services/compaction.py``).

Replicas run the same service on their own copy of the log: the same records and the same
policies (a replica follows its master's topic table) give the same logical view, each
broker's kept logs its own files. Nothing of compaction is replicated. The log start offsets
are: DeleteRecords moves a start on the master alone, and a replica promoted without it
served the deleted records again. The master's table (``replicated_starts``) goes to its
replicas in the replicated metadata (``store/ha/metadata.py``, beside topics, groups and
consumer offsets), and a replica takes every start that grows one of its own
(``follow_starts``): written to its own ``logStartOffsets.json`` before applied, at the next
run of this loop (woken at once). Why the metadata and not the commit log stream: the
replica's commit log is a byte copy of the master's (anything else is a ReplicationError),
and a start is per-queue state, not a record; the metadata frames already carry such tables
(consumer and delay offsets), are shipped at once on a change and acknowledged per version,
so DeleteRecords can answer once the in-sync replicas hold the move, as an OffsetCommit does
(``broker/core/processor.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from wharf.store.codec.layout import CQ_UNIT
from wharf.store.config import StoreConfig
from wharf.store.log.commit_log import CommitLog
from wharf.store.paths import StorePaths
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from wharf.store.queue.table import ConsumeQueueTable
from wharf.store.retention.kept_log import KeptLog
from wharf.store.retention.keys import CompactedTopics
from wharf.store.retention.policy import TopicPolicy
from wharf.store.retention.starts import LogStarts, QueueKey
from wharf.store.retention.stats import RetentionStats
from wharf.store.retention.transactions import NoTransactions, TransactionView
from wharf.store.service import Service
from wharf.store.services.compaction import NOTHING_PINNED, Compaction

log = logging.getLogger(__name__)
PolicySource = Callable[[], Mapping[str, TopicPolicy]]
SIZE_SCAN_UNITS = 4096  # units read a step when summing sizes from the end (80 KiB)


def _no_policies() -> Mapping[str, TopicPolicy]:
    return {}


class RetentionService(Service):
    """Topic retention and compaction; built with the facade, opened at start."""

    def __init__(self, config: StoreConfig, paths: StorePaths) -> None:
        super().__init__("RetentionService", config.compaction_check_interval / 1000)
        self.config = config
        self.paths = paths
        self.starts = LogStarts(paths.log_starts_file)
        self.figures = RetentionStats()
        self.compaction: Compaction | None = None
        self._policies: PolicySource = _no_policies
        self._txns: TransactionView = NoTransactions()
        self._queues: ConsumeQueueTable | None = None
        self._moving = asyncio.Lock()
        self._gone: set[str] = set()  # deleted topics whose files and starts go next run
        self._followed: dict[QueueKey, int] = {}  # a replica: its master's starts, to apply
        self.compacted = CompactedTopics()  # what the writer checks (retention/keys.py)

    # --- wiring ------------------------------------------------------------------------------
    def follow(self, policies: PolicySource, transactions: TransactionView | None = None) -> None:
        """Where the topics' policies come from (the broker: its topic table), asked at every
        run, and its Kafka transactions (``retention/transactions.py``); then look soon."""
        self._policies = policies
        if transactions is not None:
            self._txns = transactions
            if self.compaction is not None:
                self.compaction.txns = transactions
        self.refresh()
        self.wakeup()

    async def open_and_start(self, queues: ConsumeQueueTable, commit_log: CommitLog) -> None:
        """At start, after recovery: the log starts applied, the kept logs loaded, the loop
        started (its first run looks at once)."""
        self._queues = queues
        compaction = Compaction(
            self.config, self.paths, queues, commit_log, self.starts, self.figures
        )
        compaction.txns = self._txns
        starts = await asyncio.to_thread(self.starts.load_blocking)
        await asyncio.to_thread(compaction.load_blocking)
        self.compaction = compaction
        for (topic, queue_id), offset in starts.items():
            queue = queues.find(topic, queue_id)
            if queue is not None:
                queue.advance_min_offset(offset)
        self.start()

    # --- what reads, cleanup and the broker ask ----------------------------------------------
    def covering(self, topic: str, queue_id: int, offset: int) -> KeptLog | None:
        """The kept log that answers a read at ``offset`` (None: the consume queue does)."""
        compaction = self.compaction
        return None if compaction is None else compaction.covering(topic, queue_id, offset)

    def min_offset(self, topic: str, queue_id: int, queue_min: int) -> int:
        """A queue's log start offset: its consume queue's min offset unless a kept log
        answers below that (then the kept log's base), never below a moved start."""
        start = self.starts.get(topic, queue_id)
        kept = None if self.compaction is None else self.compaction.kept.get((topic, queue_id))
        if kept is not None and kept.state.cleaned_to > kept.state.base:
            return max(start, kept.state.base)
        return max(queue_min, start)

    def refresh(self) -> None:
        """The topics' policies changed (the broker calls it when a topic with attributes
        changes; ``follow`` and every run do too): the compacted topics the writer checks are
        taken again, at once (a keyless message is refused from the first write after)."""
        policies = self._policies()
        self.compacted.topics = frozenset(t for t, p in policies.items() if p.compact)

    def keep_from(self) -> int:
        """The lowest commit log offset compaction still needs (cleanup keeps it)."""
        if self.compaction is None:
            return NOTHING_PINNED
        return self.compaction.keep_from(self._policies())

    def forget(self, topic: str) -> None:
        """A deleted topic: its kept logs stop answering now (a topic made again under the
        name starts empty); their files and its log starts go at the next run."""
        if self.compaction is not None:
            self.compaction.forget(topic)
        self._gone.add(topic)
        self.wakeup()

    def stats(self) -> RetentionStats:
        return self.figures

    async def delete_records(self, topic: str, queue_id: int, offset: int) -> int:
        """Kafka's DeleteRecords: the queue's log start offset moved up to ``offset`` (at most
        its max offset), durably; returns the new log start offset."""
        queue = self._queues.find(topic, queue_id) if self._queues is not None else None
        if queue is None:
            return 0
        await self._move({(topic, queue_id): min(offset, queue.max_offset)})
        return self.min_offset(topic, queue_id, queue.min_offset)

    # --- replication of the starts (see the module docstring) --------------------------------
    def replicated_starts(self) -> dict[str, dict[str, int]]:
        """The master's log starts as its replicas take them (``{topic: {queue id: start}}``,
        sorted: the metadata snapshot is compared by its bytes)."""
        table: dict[str, dict[str, int]] = {}
        for (topic, queue_id), offset in sorted(self.starts.items()):
            table.setdefault(topic, {})[str(queue_id)] = offset
        return table

    def follow_starts(self, table: Mapping[str, Mapping[str, int]]) -> None:
        """A replica: its master's log starts; those that grow one here are written and
        applied by the loop's next run (woken now). Malformed entries are skipped; a start
        never moves down, and a topic missing from the table keeps its starts (its deletion
        comes with the topic table)."""
        moves = self._followed
        for topic, queues in table.items():
            if not isinstance(queues, Mapping):
                continue
            for queue_id, offset in queues.items():
                try:
                    key, start = (str(topic), int(queue_id)), int(offset)
                except (TypeError, ValueError):
                    continue
                if start > max(self.starts.get(*key), moves.get(key, 0)):
                    moves[key] = start
        if moves:
            self.wakeup()

    # --- the loop ------------------------------------------------------------------------------
    async def run_once(self) -> None:
        compaction, queues = self.compaction, self._queues
        if compaction is None or queues is None:
            return
        if self._followed:
            followed, self._followed = self._followed, {}
            try:
                await self._move(followed)
            except BaseException:  # not written: taken again at the next run
                for key, start in followed.items():
                    self._followed[key] = max(start, self._followed.get(key, 0))
                raise
        policies = dict(self._policies())
        self.refresh()
        now_ms = int(time.time() * 1000)
        moves: dict[QueueKey, int] = {}
        for topic, policy in policies.items():
            if policy.delete and (
                (policy.retention_ms is not None and policy.retention_ms >= 0)
                or policy.retention_bytes >= 0
            ):
                for queue in queues.of_topic(topic):
                    target = self._retention_start(queue, policy, now_ms)
                    if target > self.min_offset(topic, queue.queue_id, queue.min_offset):
                        moves[(topic, queue.queue_id)] = target
        if moves or self._gone:
            await self._move(moves)
        await compaction.forget_gone(self.run_blocking)
        for _, queue, policy, end in compaction.due(policies, now_ms):
            if self.stopping:
                return
            await compaction.compact(
                queue, policy, end, now_ms, self.run_blocking, lambda: self.stopping
            )

    async def _move(self, moves: dict[QueueKey, int]) -> None:
        async with self._moving:
            gone, self._gone = self._gone, set()
            table = self.starts.merged(moves, gone)
            await self.run_blocking(self.starts.save_blocking, table)
            self.starts.adopt(table)
        queues = self._queues
        for (topic, queue_id), offset in moves.items():
            queue = queues.find(topic, queue_id) if queues is not None else None
            if queue is not None:
                queue.advance_min_offset(offset)
        self.figures.log_start_moves += len(moves)

    # --- where retention puts a queue's start -------------------------------------------------
    def _retention_start(self, queue: ConsumeQueue, policy: TopicPolicy, now_ms: int) -> int:
        start = 0
        if policy.retention_ms is not None and policy.retention_ms >= 0:
            start = self._time_start(queue, now_ms - policy.retention_ms)
        if policy.retention_bytes >= 0:
            start = max(start, self._size_start(queue, policy.retention_bytes))
        return start

    def _time_start(self, queue: ConsumeQueue, cutoff_ms: int) -> int:
        """The first offset stored at or after ``cutoff_ms`` (the kept log first)."""
        kept = self.covering(queue.topic, queue.queue_id, 0)
        if kept is not None and kept.state.records:
            low, high = 0, kept.state.records
            while low < high:
                mid = (low + high) // 2
                if kept.entry(mid)[3] < cutoff_ms:
                    low = mid + 1
                else:
                    high = mid
            if low < kept.state.records:
                return kept.entry(low)[0]
        assert self.compaction is not None
        return queue.offset_by_time(cutoff_ms, self.compaction._stamp_reader())

    def _size_start(self, queue: ConsumeQueue, limit: int) -> int:
        """The first of the newest records whose sizes add up to at most ``limit``."""
        assert self.compaction is not None
        floor = self.compaction.cleaned_to(queue)
        total, offset = 0, queue.max_offset
        while offset > floor:
            step = min(SIZE_SCAN_UNITS, offset - floor)
            units = queue.read_unit_bytes(offset - step, step)
            sizes = [size for _, size, _ in CQ_UNIT.iter_unpack(units)]
            for size in reversed(sizes):
                size = 0 if size == BLANK_UNIT_SIZE else size
                if total + size > limit:
                    return offset
                total += size
                offset -= 1
            if len(sizes) < step:
                return offset
        kept = self.covering(queue.topic, queue.queue_id, 0)
        index = kept.state.records if kept is not None else 0
        while kept is not None and index > 0:
            entry = kept.entry(index - 1)
            if total + entry[2] > limit:
                return entry[0] + 1
            total += entry[2]
            index -= 1
        return 0
