"""Recovery orchestration at start (RocketMQ's DefaultMessageStore.load + recover), in one
blocking function that ``MessageStore.start`` runs in a thread before anything is served.

1. Abnormal = the ``abort`` file survived (the last run did not shut down cleanly).
2. Load the checkpoint, the CommitLog segments, every ConsumeQueue (from the positions journal
   after a clean stop or a process crash, else by reading each queue's newest file; nothing
   stays open) and IndexFile.
3. CommitLog recovery (S1's ``recover_blocking``) validates from the checkpoint / last segments
   and truncates a torn tail; it returns the valid end of the log.
4. ConsumeQueue units and index entries pointing at or past that end are dropped (a queue can
   be AHEAD of the log: its units were written, the records were torn).
5. Re-dispatch resumes at the ConsumeQueues' max physical offset -- not a full rescan -- or
   at the positions journal's last dispatch position when the queues came from it after a
   process crash (``store.queue.positions``). After a machine crash (the abort file's boot id
   is not this boot's), or a process crash that left no journal, the checkpoint's
   ``logics_offset`` (dispatch position whose queue/index data was fdatasynced) caps it, so
   units lost with the page cache or with the queues' tails in memory are rebuilt. The missing tail is
   dispatched here, synchronously, so the queue offset table built afterwards from the queues'
   max offsets is exact (new appends must not reuse a queue offset).
6. Each queue's min offset is corrected against the log's min offset (retention).
7. The positions journal starts from a fresh snapshot when the queues were read from their
   files or units were dropped (it must never list units past the log's end).

A queue whose files the layout refuses (a file of the wrong size, a gap: damage) does not stop
the start: the table moves it aside and re-dispatch runs over the whole commit log, which
rebuilds it (queue files are derived data; the others skip what they hold).

Power loss (which fsync makes what durable: store/README.md). The abort marker is durable
while the store runs (store/paths.py), so a power cut always gives an abnormal recovery. A
commit log segment is durable by name and size before any record in it is acknowledged
(store/log/mapped_file_queue.py); the newest segments, consume queue and index files may still
come back short or empty (created ahead, never synced): the loads drop them, a short file in
the middle is refused as damage. After an abnormal stop every loaded name is made durable
again (the crashed run's may sit in the page cache only): ``commitlog/`` here, the queue and
index directories by the first thorough queue flush; so are the commit log segments past the
checkpoint's flushed offset (the flushed offset restarts at the valid end, which vouches for
them: a replica reports it, readers see it). A checkpoint offset recovery lowers is
written back before anything is appended past it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from wharf.store.config import StoreConfig
from wharf.store.dispatch.reput import CommitLogSource, Dispatcher
from wharf.store.errors import DiskFullError
from wharf.store.index.index_files import IndexService
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.commit_log import CommitLog
from wharf.store.observer import FlushTally
from wharf.store.parts import StoreParts
from wharf.store.paths import StorePaths, fsync_dir_blocking, read_abort_marker_blocking
from wharf.store.queue.file_cache import QueueFileCache, default_capacity
from wharf.store.queue.table import ConsumeQueueTable

log = logging.getLogger(__name__)

RECOVERY_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass
class RecoveredState:
    commit_log: CommitLog
    checkpoint: StoreCheckpoint
    queues: ConsumeQueueTable
    index: IndexService | None
    abnormal: bool
    page_cache_survived: bool  # abnormal, but the same boot: a process crash
    commit_log_end: int
    reput_from_offset: int
    dropped_units: int = 0
    dropped_index_entries: int = 0
    redispatched_messages: int = 0
    redispatch_from: int = 0
    last_dispatch_timestamp: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    # The queue positions file after recovery: (size, snapshot size, last D).
    journal_file: tuple[int, int, int] = (0, 0, 0)

    def parts(
        self,
        config: StoreConfig,
        paths: StorePaths,
        maintenance: asyncio.Lock,
        observer: FlushTally,
    ) -> StoreParts:
        """What was opened, as the one value the services share (``wharf.store.parts``)."""
        return StoreParts(
            config=config,
            paths=paths,
            commit_log=self.commit_log,
            checkpoint=self.checkpoint,
            queues=self.queues,
            index=self.index,
            maintenance=maintenance,
            observer=observer,
        )


def recover_blocking(
    config: StoreConfig,
    paths: StorePaths,
    delay_levels_ms: list[int],
    observer: object = None,
    hold_tail: bool = False,
) -> RecoveredState:
    timings: dict[str, float] = {}
    mark = time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        timings[name] = now - mark
        mark = now

    opened = _load_blocking(config, paths, observer)
    abnormal, page_cache_survived, checkpoint, commit_log, queues, index = opened
    lap("load")

    end = _recover_commit_log_blocking(commit_log, checkpoint, abnormal)
    lap("commit_log")

    dropped_units = sum(queue.truncate_from_physical(end) for queue in queues)
    dropped_entries = index.truncate_from_physical_blocking(end) if index is not None else 0
    if page_cache_survived:
        _mark_unsynced(queues, index, checkpoint)
    lap("truncate")

    reput_from = _redispatch_start(opened, end, paths)
    redispatch_from = reput_from
    # A controller-mode store dispatches nothing new here: its log past ``reput_from`` may be
    # a deposed master's writes that no replica has (store/role.py ``attach``); the reput
    # dispatches them once a master's handshake agrees with this log, or after a promotion.
    redispatch_to = reput_from if hold_tail else end
    reput_from, redispatched, last_timestamp = _redispatch_blocking(
        opened, delay_levels_ms, reput_from, redispatch_to
    )
    lap("redispatch")
    if queues.damaged_listed:
        queues.forget_damaged_blocking()  # rebuilt (or the reput goes on from reput_from)

    for queue in queues:
        queue.correct_min_offset(commit_log.min_offset)
    lap("min_offsets")

    journal_file = queues.journal_file
    if journal_file is None or dropped_units:
        # Read from the files, or units were dropped that the journal still lists: a fresh
        # snapshot before anything is appended past ``end`` (store.queue.positions).
        size = queues.save_positions_blocking(paths.consume_queue_positions_file, reput_from)
        journal_file = (size, size, reput_from)
        lap("positions")

    state = RecoveredState(
        commit_log=commit_log,
        checkpoint=checkpoint,
        queues=queues,
        index=index,
        abnormal=abnormal,
        page_cache_survived=page_cache_survived,
        commit_log_end=end,
        reput_from_offset=reput_from,
        dropped_units=dropped_units,
        dropped_index_entries=dropped_entries,
        redispatched_messages=redispatched,
        redispatch_from=redispatch_from,
        last_dispatch_timestamp=last_timestamp,
        timings=timings,
        journal_file=journal_file,
    )
    _log_recovered(state)
    return state


def _log_recovered(state: RecoveredState) -> None:
    log.info(
        "store recovered (%s): log end %d, dropped %d queue units and %d index entries past it, "
        "re-dispatched %d messages from %d; %s",
        "abnormal" if state.abnormal else "normal",
        state.commit_log_end,
        state.dropped_units,
        state.dropped_index_entries,
        state.redispatched_messages,
        state.redispatch_from,
        ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in state.timings.items()),
    )


class _Loaded(NamedTuple):
    """What step 2 opened, and how the last run ended (step 1)."""

    abnormal: bool
    page_cache_survived: bool
    checkpoint: StoreCheckpoint
    commit_log: CommitLog
    queues: ConsumeQueueTable
    index_service: IndexService | None  # (``index`` is a tuple's method)


def _load_blocking(config: StoreConfig, paths: StorePaths, observer: object) -> _Loaded:
    """Steps 1 and 2: the abort marker, then the checkpoint, the log's segments, the queues
    and the IndexFiles, loaded."""
    paths.create_dirs_blocking()
    abnormal, page_cache_survived = read_abort_marker_blocking(paths.abort_file)
    checkpoint = StoreCheckpoint(str(paths.checkpoint_file))
    checkpoint.load_blocking()
    commit_log = CommitLog(config, observer, checkpoint)
    commit_log.load_blocking()
    queues = ConsumeQueueTable.load_blocking(
        paths.consume_queue_root,
        config.mapped_file_size_consume_queue,
        QueueFileCache(default_capacity(config.max_open_queue_files)),
        paths.consume_queue_positions_file,
        clean=not abnormal,
        page_cache_survived=page_cache_survived,
        tail_budget=config.consume_queue_tail_budget,
    )
    index = None
    if config.message_index_enable:
        index = IndexService.load_blocking(
            paths.index_dir, config.max_hash_slot_num, config.max_index_num
        )
    if abnormal:
        # The crashed run's entries may be in the page cache only (a process crash): durable
        # before recovery trusts them (cheap: once per abnormal start; the table adds the
        # queue directories itself).
        fsync_dir_blocking(paths.commit_log_dir)
        if index is not None:
            index.dir_syncs.add(paths.index_dir)
    return _Loaded(abnormal, page_cache_survived, checkpoint, commit_log, queues, index)


def _recover_commit_log_blocking(
    commit_log: CommitLog, checkpoint: StoreCheckpoint, abnormal: bool
) -> int:
    """Step 3: the log's valid end, its torn tail cut; a checkpoint that vouched for more is
    lowered, durably."""
    vouched = (checkpoint.physic_offset, checkpoint.logics_offset)
    end = commit_log.recover_blocking(abnormal, checkpoint)
    if abnormal:
        commit_log.sync_tail_blocking(vouched[0])
    if checkpoint.logics_offset > end:
        checkpoint.logics_offset = end  # it vouched for data the log no longer has
    if checkpoint.valid and (checkpoint.physic_offset, checkpoint.logics_offset) != vouched:
        # Lowered: on disk before new records are written past ``end``, or a crash before the
        # next checkpoint write would start a recovery past records never synced.
        checkpoint.flush_blocking()
    return end


def _mark_unsynced(
    queues: ConsumeQueueTable, index: IndexService | None, checkpoint: StoreCheckpoint
) -> None:
    """Step 4, after a process crash: what the crashed run wrote past the last thorough flush
    (the checkpoint's logics offset) may be in the page cache only, though loaded as flushed.
    Synced by the next flush, before a checkpoint or a clean shutdown's positions snapshot
    vouches for it (the fault campaign, seed 7: a clean shutdown's snapshot listed units a
    power cut then took; the start after trusted it and wrote past a hole, and the one after
    that refused the short queue file)."""
    synced_to = checkpoint.logics_offset if checkpoint.valid else 0
    for queue in queues:
        if queue.max_physical_offset > synced_to:
            queue.mark_unsynced()
    if index is not None:
        index.mark_unsynced()


def _redispatch_start(opened: _Loaded, end: int, paths: StorePaths) -> int:
    """Step 5: where re-dispatch resumes."""
    queues, checkpoint = opened.queues, opened.checkpoint
    reput_from = queues.max_physical_offset
    if queues.journal_position is not None:
        # Queues loaded from the positions journal after a process crash hold every unit of
        # the records before its last D (a deleted topic's excepted: not lower, or they come
        # back), maybe more: re-dispatch from there.
        reput_from = queues.journal_position
    # After a machine crash queue units may be lost with the page cache: re-dispatch from the
    # last position whose queues were synced. After a process crash (same boot) the units
    # written survived, but not the queues' tails in memory (consume_queue's "Tails"), so the
    # queues' own ends are not exact either: without the journal's D, the checkpoint's.
    # A checkpoint never written (or damaged) vouches for nothing: from the log's start.
    if opened.abnormal and (not opened.page_cache_survived or queues.journal_position is None):
        reput_from = min(reput_from, checkpoint.logics_offset if checkpoint.valid else 0)
    if queues.rebuild:
        # Queues set aside at load (damaged files, or mappedFileSizeConsumeQueue changed) or
        # met damaged by the last run: rebuilt from the whole log.
        log.warning("%d consume queues set aside or damaged under %s: re-dispatching the whole "
                    "commit log", len(queues.set_aside) + len(queues.damaged_listed),
                    paths.consume_queue_root)  # fmt: skip
        reput_from = 0
    return min(max(reput_from, opened.commit_log.min_offset), end)


def _redispatch_blocking(
    opened: _Loaded, delay_levels_ms: list[int], reput_from: int, redispatch_to: int
) -> tuple[int, int, int]:
    """Step 5, the missing tail dispatched here: (where dispatch stands, messages
    re-dispatched, the last one's store timestamp)."""
    index = opened.index_service
    dispatcher = Dispatcher(opened.queues, index, delay_levels_ms)
    # The reput's own reader: large chunks are decoded as columns, as in live dispatch.
    source = CommitLogSource(opened.commit_log, sync_flush=False)
    redispatched = 0
    last_timestamp = 0
    while reput_from < redispatch_to:
        records, next_offset = source.read_dispatch_chunk(
            reput_from, redispatch_to, RECOVERY_CHUNK_BYTES
        )
        if next_offset <= reput_from:
            break
        plan = dispatcher.plan(records)
        try:
            _, leftover = dispatcher.apply(plan)
            if len(leftover) and index is not None:
                index.put_entries_blocking(leftover)
        except DiskFullError as exc:
            # A store must start on a full disk: the ReputService retries from here (units and
            # index entries already written are skipped) once there is room.
            log.warning("re-dispatch stopped at commit log offset %d: %s", reput_from, exc)
            break
        redispatched += plan.record_count
        if plan.record_count:
            last_timestamp = plan.last_timestamp
        rewind = dispatcher.gaps.rewind(reput_from)  # a queue's gap: back to its records
        reput_from = next_offset if rewind is None else rewind
    return reput_from, redispatched, last_timestamp
