"""StoreParts: what start-up and recovery opened, as one value the store's services share.

``MessageStore.start`` recovers (``wharf.store.recovery``), then builds ONE StoreParts
(``RecoveredState.parts``) and hands it to the services (``wharf.store.services``) and to ``wharf.store.stats``. A service takes
these parts plus named callables for the little live state it needs from the facade (the
dispatch position, where to report the disk state), never the facade itself: a child holding its
parent depended on the whole facade, reached into it through "package internal" hooks, and
made every service module import the facade (so the layers contract could not hold).

The fields never change after start: the objects they point at (the commit log, the queue
table...) do, and are shared, not copied.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from wharf.store.config import StoreConfig
from wharf.store.index.index_files import IndexService
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.commit_log import CommitLog
from wharf.store.observer import FlushTally
from wharf.store.paths import StorePaths
from wharf.store.queue.table import ConsumeQueueTable


@dataclass(frozen=True, slots=True)
class StoreParts:
    config: StoreConfig
    paths: StorePaths
    commit_log: CommitLog
    checkpoint: StoreCheckpoint
    queues: ConsumeQueueTable
    index: IndexService | None  # None unless message_index_enable
    # Held by whatever syncs, deletes or truncates ConsumeQueue/index files (queue flush,
    # retention, topic deletion): a sync never runs on a file closed under it.
    maintenance: asyncio.Lock
    observer: FlushTally
