"""``StoreInsides``: a running store's parts, for tests and benchmarks that look inside it.

Nothing in the store or the broker uses it: the facade's methods are the only door for them.
``MessageStore.insides`` builds one from what ``start()`` opened (a fresh value per access, so it
always shows the current parts; before ``start()`` the parts recovery opens are missing).
"""

from __future__ import annotations

from dataclasses import dataclass

from wharf.store.dispatch.reput import ReputService
from wharf.store.index.index_files import IndexService
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.commit_log import CommitLog
from wharf.store.paths import StorePaths
from wharf.store.queue.table import ConsumeQueueTable
from wharf.store.services.cleanup import CleanupService
from wharf.store.services.queue_flush import FlushConsumeQueueService
from wharf.store.services.schedule import ScheduleMessageService
from wharf.store.write import Writer

__all__ = ["StoreInsides"]


@dataclass(frozen=True, slots=True)
class StoreInsides:
    commit_log: CommitLog
    queues: ConsumeQueueTable
    index: IndexService | None
    paths: StorePaths
    checkpoint: StoreCheckpoint
    reput_service: ReputService
    queue_flush_service: FlushConsumeQueueService
    cleanup_service: CleanupService
    schedule_service: ScheduleMessageService
    writer: Writer  # the queue offsets, put totals, disk-check threshold
