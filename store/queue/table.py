"""All ConsumeQueues of a store (RocketMQ's consumeQueueTable): loading the
``consumequeue/<topic>/<queueId>/`` tree, lookup, creation on first dispatch, topic removal.

The table owns the one ``QueueFileCache`` its queues map their files through (the bound on
descriptors and maps, whatever the number of queues) and the summary a clean shutdown leaves
(``store.queue.summary``): a start after one builds every queue from it and opens nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from wharf.store.paths import DirectorySyncs
from wharf.store.queue import summary
from wharf.store.queue.consume_queue import ConsumeQueue
from wharf.store.queue.file_cache import QueueFileCache

log = logging.getLogger(__name__)

# Files mapped at once by default (maxOpenQueueFiles): one descriptor and one map each, ~12 us
# to map again after an eviction. Capped at a quarter of the open-file limit (file_cache).
DEFAULT_OPEN_FILES = 2048
# Threads reading queue files at a start after a crash. 100,000 queues of one file each, this
# VM, 2026-11-24: cold cache (a machine crash) 62 s with 1 thread, 12 s with 4, 15 s with 8;
# warm (a process crash) 3.3 s with 1, 5-7 s with 4 or 8 (the GIL, busy VM). The cold case
# decides: its reads wait on the disk.
LOAD_THREADS = 4


class ConsumeQueueTable:
    """All ConsumeQueues of a store, created on first use (RocketMQ's consumeQueueTable)."""

    def __init__(self, root: Path, file_size: int, cache: QueueFileCache | None = None) -> None:
        self.root = root
        self.file_size = file_size
        self.cache = cache if cache is not None else QueueFileCache(DEFAULT_OPEN_FILES)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.dirty: set[ConsumeQueue] = set()  # queues with unflushed units (loop only)
        # Directories with queue files (or queue directories) created since the last thorough
        # flush: fsynced by it before the checkpoint vouches for their units (power loss).
        self.dir_syncs = DirectorySyncs()
        self.from_summary = False  # how the last load found the queues

    @classmethod
    def load_blocking(
        cls,
        root: Path,
        file_size: int,
        cache: QueueFileCache | None = None,
        summary_file: Path | None = None,
        clean: bool = False,
    ) -> ConsumeQueueTable:
        """The queues under ``root``: from ``summary_file`` after a ``clean`` shutdown, else by
        reading each queue's files (one descriptor at a time, no maps)."""
        table = cls(root, file_size, cache)
        started = time.monotonic()
        entries = summary.take_blocking(summary_file, file_size) if summary_file else None
        if not root.is_dir():
            return table
        base = os.fspath(root)
        topics = []
        for entry in os.scandir(base):
            if not entry.is_dir():
                continue
            if entry.name.startswith(".deleted-"):
                shutil.rmtree(entry.path, ignore_errors=True)  # a deletion cut short
                continue
            topics.append(entry.name)
        if entries is not None and clean:
            for topic, queue_id, state in entries:
                directory = os.path.join(base, topic, str(queue_id))
                table.queues[(topic, queue_id)] = ConsumeQueue.from_summary(
                    topic,
                    queue_id,
                    directory,
                    file_size,
                    table.cache,
                    state,
                    table.dirty,
                    table.dir_syncs,
                )
            table.from_summary = True
        else:
            if not clean:
                # A crashed run's new files may sit in the page cache only (a process crash):
                # make every loaded name durable before the checkpoint vouches for it.
                table.dir_syncs.add(base, *(os.path.join(base, topic) for topic in topics))

            # Threads: the listing and reads release the GIL, so a cold cache (a machine
            # crash) is read with LOAD_THREADS requests in flight instead of one.
            def load_topics(names: list[str]) -> list[ConsumeQueue]:
                loaded = []
                for topic in names:
                    for entry in os.scandir(os.path.join(base, topic)):
                        if entry.is_dir() and entry.name.isdigit():
                            if not clean:
                                table.dir_syncs.add(entry.path)
                            loaded.append(
                                ConsumeQueue.load_blocking(
                                    topic,
                                    int(entry.name),
                                    entry.path,
                                    file_size,
                                    table.cache,
                                    table.dirty,
                                    table.dir_syncs,
                                )
                            )
                return loaded

            chunks = [topics[i::LOAD_THREADS] for i in range(LOAD_THREADS)]
            with ThreadPoolExecutor(LOAD_THREADS, thread_name_prefix="cq-load") as pool:
                for loaded in pool.map(load_topics, chunks):
                    for queue in loaded:
                        table.queues[(queue.topic, queue.queue_id)] = queue
        log.info(
            "loaded %d consume queues in %.1f ms (%s)",
            len(table.queues),
            (time.monotonic() - started) * 1000,
            "from the shutdown summary" if table.from_summary else "reading their files",
        )
        return table

    def save_summary_blocking(self, summary_file: Path) -> None:
        """At a clean shutdown, after the last flush: what the next start loads instead of
        reading every queue."""
        summary.write_blocking(
            summary_file,
            self.file_size,
            ((q.topic, q.queue_id, q.summary()) for q in self.queues.values()),
        )

    def unflushed(self, least_bytes: int) -> list[ConsumeQueue]:
        """The queues with at least ``least_bytes`` unflushed (at least one unit when 0): the
        dirty ones only, so an idle broker of 100,000 queues visits none."""
        floor = max(least_bytes, 1)
        return [queue for queue in self.dirty if queue.unflushed_bytes >= floor]

    def flushed(self, queues: list[ConsumeQueue]) -> None:
        """After a flush of ``queues`` (loop): those with nothing unflushed are clean."""
        for queue in queues:
            if queue.unflushed_bytes <= 0:
                self.dirty.discard(queue)

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            directory = os.path.join(self.root, topic, str(queue_id))
            queue = ConsumeQueue(
                topic,
                queue_id,
                directory,
                self.file_size,
                self.cache,
                self.dirty,
                self.dir_syncs,
            )
            self.queues[(topic, queue_id)] = queue
        return queue

    def of_topic(self, topic: str) -> list[ConsumeQueue]:
        return sorted(
            (q for (t, _), q in self.queues.items() if t == topic), key=lambda q: q.queue_id
        )

    def remove_topic(self, topic: str) -> list[ConsumeQueue]:
        """Forget the topic's queues (unmapping their files) and move its directory aside (one
        rename, so a queue re-created at once starts in a fresh directory); the caller destroys
        the returned queues in a thread."""
        removed = [q for (t, _), q in self.queues.items() if t == topic]
        for queue in removed:
            del self.queues[(queue.topic, queue.queue_id)]
            self.dirty.discard(queue)
            queue.close()
        topic_dir = self.root / topic
        if topic_dir.is_dir():
            trash = self.root / f".deleted-{topic}-{uuid.uuid4().hex[:8]}"
            os.rename(topic_dir, trash)
            for queue in removed:
                queue.directory = os.path.join(trash, str(queue.queue_id))
                for file in queue.files:
                    file.path = os.path.join(queue.directory, os.path.basename(file.path))
        return removed

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self.queues.values()))

    def __len__(self) -> int:
        return len(self.queues)

    @property
    def max_physical_offset(self) -> int:
        """The end of the newest record any queue points at (where re-dispatch resumes)."""
        return max((q.max_physical_offset for q in self.queues.values()), default=0)

    @property
    def file_count(self) -> int:
        return sum(len(q.files) for q in self.queues.values())

    def close(self) -> None:
        self.cache.close()
