"""Retention: CleanCommitLogService + CleanConsumeQueueService (RocketMQ's names), one task.

Every ``clean_resource_interval`` (10 s):

1. Disk use of the commit log's filesystem (``os.statvfs``, injectable for tests) is sampled
   and reported through ``on_disk_state(ratio, reason)``: the facade caches the ratio for
   ``stats()`` and, while ``reason`` is not empty (use above ``disk_space_warning_level_ratio``,
   90 %), refuses writes with DiskFullError; an empty reason makes it writable again.
2. Commit log segments older than ``file_reserved_time`` hours are deleted when the hour is in
   ``delete_when`` ("04" or "04;16"), or disk use is above ``disk_max_used_space_ratio`` (75 %),
   or a manual deletion was requested. Above ``disk_space_clean_forcibly_ratio`` (85 %, with
   ``clean_file_forcibly_enable``) the oldest segments go even if unexpired. Retention is by
   file, not by consumption, as RocketMQ: unconsumed messages are deleted too; but never a
   segment holding records not yet flushed or not yet dispatched to their ConsumeQueues.
3. ConsumeQueue and index files wholly below the commit log's new minimum offset are deleted
   and each queue's min offset is corrected. Messages that left a queue this way and that a
   consumer group had not consumed yet (its committed offset, from ``consumer_progress``, was
   below the new minimum) are counted per topic and group: one WARNING line per pass and
   ``StoreObserver.on_unconsumed_deleted`` (a metric). A topic no group has committed on counts
   under the group "".

``clean_file_forcibly_enable`` off (RocketMQ's cleanFileForciblyEnable): above
``disk_space_clean_forcibly_ratio`` the store refuses writes (DiskFullError) instead of deleting
unexpired segments; expiry by ``file_reserved_time`` still runs, as it is the retention the
operator configured.

All unlinks run in threads; queue/index deletions hold the store's maintenance lock so a
concurrent flush never syncs a closed file.

The service works on ``StoreParts`` and named callables (``dispatch_offset``,
``on_disk_state``), not on the facade (see ``wharf.store.parts``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping

from wharf.store.config import parse_delete_when
from wharf.store.errors import DamagedQueueError
from wharf.store.parts import StoreParts
from wharf.store.service import Service

log = logging.getLogger(__name__)

# Queues a retention pass visits per loop step: a queue whose first unit is known to be in the
# log costs ~1 us, one that must be read ~10 us (open, pread, close), so a step holds the loop
# ~0.3-3 ms; in one step 100,000 queues held it for ~1 s.
SCAN_STEP = 256

# Disk usage source: path on the filesystem -> used ratio 0..1.
DiskUsage = Callable[[str], float]
# (topic, queue_id) -> {consumer group: committed offset}, from the broker's offset table.
ConsumerProgress = Callable[[], Mapping[tuple[str, int], Mapping[str, int]]]
# Where a pass reports the disk state: (used ratio 0..1, not-writable reason or "" if writable).
DiskStateSink = Callable[[float, str], None]


def statvfs_used_ratio(path: str) -> float:
    """Used fraction of the filesystem holding ``path``, as RocketMQ's
    getDiskPartitionSpaceUsedPercent and ``df`` compute it: used / (used + available), where
    used = total - free. Blocks reserved for root (ext4 keeps 5% by default; some volumes far
    more) count neither as used nor as available. Taking (total - available) / total instead
    counted them as used: on this machine that read 87% while ``df`` said 68%, and retention
    force-deleted segments holding unconsumed messages."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = used + st.f_bavail * st.f_frsize
    if usable <= 0:
        return 0.0
    return used / usable


class CleanupService(Service):
    def __init__(
        self,
        parts: StoreParts,
        disk_usage: DiskUsage,
        *,
        dispatch_offset: Callable[[], int],
        on_disk_state: DiskStateSink,
        consumer_progress: ConsumerProgress = lambda: {},
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``dispatch_offset()``: the reput position (no segment at or past it is deleted)."""
        config = parts.config
        super().__init__("CleanupService", config.clean_resource_interval / 1000)
        self.parts = parts
        self.config = config
        self.disk_usage = disk_usage
        self.dispatch_offset = dispatch_offset
        self.on_disk_state = on_disk_state
        self.consumer_progress = consumer_progress
        self.clock = clock
        self.unconsumed_deleted = 0
        self.delete_hours = parse_delete_when(config.delete_when)
        self.manual_delete_requests = 0
        self._check_only = False
        self._next_full_pass = 0.0
        self.deleted_segments = 0
        self.deleted_queue_files = 0
        self.deleted_index_files = 0

    def request_disk_check(self) -> None:
        """Sample disk use now, between the periodic passes: the facade asks after every
        ``disk_check_bytes`` appended, so the guard keeps up with any write rate (at 10 s a
        pass, a 256 MiB filesystem filled from 90 % to 100 % between two samples)."""
        self._check_only = True
        self.wakeup()

    def request_manual_delete(self) -> None:
        """RocketMQ's executeDeleteFilesManually: the next pass deletes expired files."""
        self.manual_delete_requests += 1
        self.wakeup()

    async def run_once(self) -> None:
        check_only, self._check_only = self._check_only, False
        if check_only and time.monotonic() < self._next_full_pass:
            await self.check_disk()
            return
        self._next_full_pass = time.monotonic() + self.interval_s
        await self.clean_commit_log()
        await self.clean_queues_and_index()

    # --- commit log ----------------------------------------------------------------------
    async def check_disk(self) -> float:
        """Sample disk use, report it and the writable state (``on_disk_state``); returns the
        used percentage."""
        cfg = self.config
        ratio = await asyncio.to_thread(self.disk_usage, str(self.parts.paths.commit_log_dir))
        percent = ratio * 100
        reason = ""
        if percent > cfg.disk_space_warning_level_ratio:
            reason = (
                f"disk full: {percent:.1f}% of the commit log's filesystem is used, above "
                f"diskSpaceWarningLevelRatio {cfg.disk_space_warning_level_ratio}%; writes are "
                "refused until retention frees space"
            )
        elif not cfg.clean_file_forcibly_enable and percent > cfg.disk_space_clean_forcibly_ratio:
            reason = (
                f"disk full: {percent:.1f}% of the commit log's filesystem is used, above "
                f"diskSpaceCleanForciblyRatio {cfg.disk_space_clean_forcibly_ratio}%, and "
                "cleanFileForciblyEnable is off: writes are refused instead of deleting "
                "messages consumers may not have read; free space, lower fileReservedTime or "
                "enable cleanFileForciblyEnable"
            )
        self.on_disk_state(ratio, reason)
        return percent

    async def clean_commit_log(self) -> int:
        cfg = self.config
        parts = self.parts
        percent = await self.check_disk()
        space_full = percent > cfg.disk_max_used_space_ratio
        force = cfg.clean_file_forcibly_enable and percent > cfg.disk_space_clean_forcibly_ratio
        hour = time.localtime(self.clock()).tm_hour
        time_up = hour in self.delete_hours
        manual = self.manual_delete_requests > 0
        if not (time_up or space_full or manual or force):
            return 0
        self.manual_delete_requests = max(self.manual_delete_requests - 1, 0)
        deleted = await parts.commit_log.delete_expired(
            expired_ms=cfg.file_reserved_time * 3_600_000,
            delete_interval_ms=cfg.delete_commit_log_files_interval,
            force=force,
            max_batch=cfg.delete_file_batch_max,
            now_ms=int(self.clock() * 1000),
            # Records past the dispatch offset have no ConsumeQueue unit yet: deleting their
            # segment would lose them for every consumer. Dispatch only moves forward, so this
            # snapshot stays a safe bound while the deletion runs in its thread.
            keep_from_offset=self.dispatch_offset(),
        )
        if deleted:
            self.deleted_segments += deleted
            # Deleting because the disk is filling up (not by age) may take unconsumed
            # messages with it: an operator must see that at the default log level.
            log.log(
                logging.WARNING if space_full or force else logging.INFO,
                "retention deleted %d commit log segment(s) (disk %.1f%%, force=%s)",
                deleted,
                percent,
                force,
            )
        return deleted

    # --- queues and index ----------------------------------------------------------------
    async def clean_queues_and_index(self) -> int:
        parts = self.parts
        log_min = parts.commit_log.min_offset
        removed = 0
        dropped: dict[tuple[str, int], tuple[int, int]] = {}  # queue -> (old min, new min)
        async with parts.maintenance:
            queues = parts.queues
            for n, queue in enumerate(queues, 1):
                if not n % SCAN_STEP:
                    await asyncio.sleep(0)  # puts and pulls between steps
                if queues.find(queue.topic, queue.queue_id) is not queue:
                    continue  # its topic was deleted meanwhile (destroyed after this pass)
                old_min = queue.min_offset  # before detaching files, which moves it too
                try:
                    expired = queue.expired_files(log_min)
                    if expired:
                        queue.detach_files(expired)  # unmapped there, on the loop
                        await asyncio.to_thread(_unlink_blocking, [f.path for f in expired])
                        removed += len(expired)
                    queue.correct_min_offset(log_min)
                except DamagedQueueError:
                    continue  # logged by the queue; the next start rebuilds it
                if queue.min_offset > old_min:
                    dropped[(queue.topic, queue.queue_id)] = (old_min, queue.min_offset)
            index = parts.index
            if index is not None:
                expired_index = index.expired_files(log_min)
                if expired_index:
                    index.detach_files(expired_index)
                    await asyncio.to_thread(_destroy_blocking, expired_index)
                    self.deleted_index_files += len(expired_index)
        self.deleted_queue_files += removed
        if dropped:
            self._report_unconsumed(dropped)
        return removed

    def _report_unconsumed(self, dropped: dict[tuple[str, int], tuple[int, int]]) -> None:
        """Count, per topic and group, the deleted messages the group had not consumed."""
        progress = self.consumer_progress()
        lost: dict[tuple[str, str], int] = {}
        for (topic, queue_id), (old_min, new_min) in dropped.items():
            groups = progress.get((topic, queue_id)) or {}
            if not groups and not any(t == topic for t, _ in progress):
                lost[(topic, "")] = lost.get((topic, ""), 0) + new_min - old_min
            for group, committed in groups.items():
                gone = new_min - max(committed, old_min)
                if gone > 0:
                    lost[(topic, group)] = lost.get((topic, group), 0) + gone
        if not lost:
            return
        for (topic, group), count in lost.items():
            self.parts.observer.on_unconsumed_deleted(topic, group, count)
        total = sum(lost.values())
        self.unconsumed_deleted += total
        worst = sorted(lost.items(), key=lambda item: -item[1])[:10]
        log.warning(
            "retention deleted %d message(s) not yet consumed (topic/group: count): %s%s",
            total,
            ", ".join(f"{t}/{g or '<no group>'}: {n}" for (t, g), n in worst),
            f" and {len(lost) - len(worst)} more" if len(lost) > len(worst) else "",
        )


def _unlink_blocking(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _destroy_blocking(files: list) -> None:  # type: ignore[type-arg]
    for file in files:
        file.close()
        file.path.unlink(missing_ok=True)
