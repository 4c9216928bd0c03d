"""All ConsumeQueues of a store (RocketMQ's consumeQueueTable): loading the
``consumequeue/<topic>/<queueId>/`` tree, lookup, creation on first dispatch, topic removal.

The table owns the one ``QueueFileCache`` its queues open their files through (the bound on
descriptors, whatever the number of queues) and captures what the positions journal records
(``store.queue.positions``): a start after a clean shutdown or a process crash builds every
queue from it and opens nothing.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from operator import attrgetter
from pathlib import Path

from wharf.store.paths import DirectorySyncs, write_bytes_atomic_blocking
from wharf.store.queue import positions
from wharf.store.queue.consume_queue import (
    TAIL_BUDGET,
    ConsumeQueue,
    DamagedQueueError,
    QueueLinks,
    TailWrite,
    Unit,
    write_tails_blocking,
)
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
# Queues set aside at a load named one log line each (a changed file size refuses them all).
SET_ASIDE_LOG_LINES = 10
# Queues captured per loop step by ``capture_written`` (~2 us each, a tail's copy included:
# ~8 ms, then other work runs), whose tails are written in a thread before the next chunk is
# captured: the copies in flight are at most 4,096 tails of 4 KiB (16 MiB), not every tail of
# the budget (64 MiB) at once.
CAPTURE_CHUNK = 4096
# The queues met damaged while serving (JSON [[topic, queue id], ...]), for the next start to
# set aside and rebuild; a file, so never taken for a topic. Removed once recovery rebuilt them.
DAMAGED_FILE = ".damaged.json"

_unflushed_bytes = attrgetter("unflushed_bytes")


class ConsumeQueueTable:
    """All ConsumeQueues of a store, created on first use (RocketMQ's consumeQueueTable)."""

    def __init__(
        self,
        root: Path,
        file_size: int,
        cache: QueueFileCache | None = None,
        tail_budget: int = TAIL_BUDGET,
    ) -> None:
        self.root = root
        self.file_size = file_size
        self.cache = cache if cache is not None else QueueFileCache(DEFAULT_OPEN_FILES)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        # topic -> its queues by id: ``of_topic`` walked every queue of every topic (100,000 at
        # scale) on each v2 receive and queue-stats call. Kept with ``queues`` by ``_add`` and
        # ``remove_topic``, the only places that change the table.
        self._by_topic: dict[str, dict[int, ConsumeQueue]] = {}
        # Shared with every queue: the dirty and changed sets (loop only) and the directories
        # with entries created since the last thorough flush, which fsyncs them before the
        # checkpoint vouches for their units (power loss).
        self.links = QueueLinks(tail_budget=tail_budget)
        self.loaded_from = "files"  # how the last load found the queues: "files" / "journal"
        # After a crash, the dispatch position of the journal's last record: re-dispatch
        # resumes there (None: the queues' own ends are exact, or were read from the files).
        self.journal_position: int | None = None
        # The positions file as loaded: (bytes kept, bytes of its snapshot, last D), or None.
        self.journal_file: tuple[int, int, int] | None = None
        # Queues whose files the load refused, moved aside (``set_aside``): recovery rebuilds
        # them by re-dispatching the whole commit log.
        self.set_aside: list[str] = []
        # Queues recorded damaged by the last run (``DAMAGED_FILE``), set aside or gone.
        self.damaged_listed: list[tuple[str, int]] = []

    @property
    def dirty(self) -> set[ConsumeQueue]:
        return self.links.dirty

    @property
    def dir_syncs(self) -> DirectorySyncs:
        return self.links.dir_syncs

    @classmethod
    def load_blocking(
        cls,
        root: Path,
        file_size: int,
        cache: QueueFileCache | None = None,
        positions_file: Path | None = None,
        clean: bool = False,
        page_cache_survived: bool = False,
        tail_budget: int = TAIL_BUDGET,
    ) -> ConsumeQueueTable:
        """The queues under ``root``: from the positions journal after a ``clean`` shutdown or a
        process crash (``page_cache_survived``), else by reading each queue's files (one
        descriptor at a time, no maps). See ``store.queue.positions`` for what is trusted when.
        ``tail_budget``: the bytes all queue tails may hold (``consumeQueueTailBudget``)."""
        table = cls(root, file_size, cache, tail_budget)
        started = time.monotonic()
        if not root.is_dir():
            return table
        damaged = table.damaged_listed = table._read_damaged_blocking()
        loaded = None
        if positions_file is not None and (clean or page_cache_survived) and not damaged:
            loaded = positions.read_blocking(positions_file, file_size)
        base = os.fspath(root)
        topics = []
        for entry in os.scandir(base):
            if not entry.is_dir():
                continue
            if entry.name.startswith(".deleted-"):
                shutil.rmtree(entry.path, ignore_errors=True)  # a deletion cut short
                continue
            if entry.name.startswith("."):  # a damaged queue set aside (no topic starts so)
                continue
            topics.append(entry.name)
        for topic, queue_id in damaged:
            directory = os.path.join(base, topic, str(queue_id))
            if os.path.isdir(directory):
                table._set_aside(topic, queue_id, directory, "met damaged while serving")
        if not clean:
            # A crashed run's new files may sit in the page cache only (a process crash):
            # make every loaded name durable before the checkpoint vouches for it.
            table.dir_syncs.add(base, *(os.path.join(base, topic) for topic in topics))
        if loaded is not None:
            assert positions_file is not None
            table._load_journal(base, set(topics), loaded, clean)
            if not clean:
                positions.cut_torn_tail_blocking(positions_file, loaded)
            table.journal_file = (loaded.good_length, loaded.snapshot_length, loaded.position)
        else:
            table._load_files(base, topics, clean)
        log.info(
            "loaded %d consume queues in %.1f ms (%s)",
            len(table.queues),
            (time.monotonic() - started) * 1000,
            "from the positions journal" if loaded is not None else "reading their files",
        )
        return table

    def _load_journal(
        self, base: str, topics: set[str], loaded: positions.Loaded, clean: bool
    ) -> None:
        """Queues as the journal recorded them. After a crash, a queue whose first file is gone
        (retention deleted it after the last record) is read from its files; one whose topic
        directory is gone (deleted) is dropped; re-dispatch from ``journal_position`` brings
        every queue up to the log's end."""
        file_size, cache, links = self.file_size, self.cache, self.links
        join, exists = os.path.join, os.path.exists
        for topic, queue_id, state in loaded.entries():
            if not clean and topic not in topics:
                continue
            directory = join(base, topic, str(queue_id))
            queue = ConsumeQueue.from_summary(
                topic, queue_id, directory, file_size, cache, state, links
            )
            if not clean:
                links.dir_syncs.add(directory)
                if queue.files and not exists(queue.files[0].path):
                    if not exists(directory):
                        continue
                    loaded_queue = self._load_queue(topic, queue_id, directory)
                    if loaded_queue is None:
                        continue
                    queue = loaded_queue
            self._add(queue)
        self.loaded_from = "journal"
        if not clean:
            self.journal_position = loaded.position

    def _load_files(self, base: str, topics: list[str], clean: bool) -> None:
        links = self.links

        # Threads: the listing and reads release the GIL, so a cold cache (a machine crash)
        # is read with LOAD_THREADS requests in flight instead of one.
        def load_topics(names: list[str]) -> list[ConsumeQueue]:
            loaded = []
            for topic in names:
                for entry in os.scandir(os.path.join(base, topic)):
                    if entry.is_dir() and entry.name.isdigit():
                        if not clean:
                            links.dir_syncs.add(entry.path)
                        queue = self._load_queue(topic, int(entry.name), entry.path)
                        if queue is not None:
                            loaded.append(queue)
            return loaded

        chunks = [topics[i::LOAD_THREADS] for i in range(LOAD_THREADS)]
        with ThreadPoolExecutor(LOAD_THREADS, thread_name_prefix="cq-load") as pool:
            for loaded in pool.map(load_topics, chunks):
                for queue in loaded:
                    self._add(queue)
        self.loaded_from = "files"

    def _load_queue(self, topic: str, queue_id: int, directory: str) -> ConsumeQueue | None:
        """The queue read from its files, or None when the layout refuses them: queue files are
        derived data, so the directory is renamed aside (``.damaged-<topic>-<id>-<uuid>``, kept
        for a look, never read) and recovery rebuilds the queue from the commit log instead of
        the broker refusing to start."""
        try:
            return ConsumeQueue.load_blocking(
                topic, queue_id, directory, self.file_size, self.cache, self.links
            )
        except DamagedQueueError as exc:
            self._set_aside(topic, queue_id, directory, str(exc))
            return None

    @property
    def rebuild(self) -> bool:
        """Queues were set aside or recorded damaged (their directory may be gone too):
        recovery re-dispatches the whole commit log."""
        return bool(self.set_aside or self.damaged_listed)

    def _set_aside(self, topic: str, queue_id: int, directory: str, why: str) -> None:
        """Rename a damaged queue's directory aside (kept for a look, never read); recovery
        rebuilds the queue by re-dispatching the whole commit log."""
        aside = os.path.join(
            os.fspath(self.root), f".damaged-{topic}-{queue_id}-{uuid.uuid4().hex[:8]}"
        )
        os.rename(directory, aside)
        self.links.dir_syncs.add(os.fspath(self.root), os.path.dirname(directory))
        self.set_aside.append(aside)
        if len(self.set_aside) <= SET_ASIDE_LOG_LINES:  # recovery logs how many in all
            log.warning(
                "consume queue %s/%d set aside to %s (%s): it is rebuilt from the commit log",
                topic,
                queue_id,
                aside,
                why,
            )

    def save_damaged_blocking(self) -> None:
        """Record the queues met damaged while serving (``links.damaged``): the next start
        sets them aside and rebuilds them, whatever the positions journal says."""
        names = sorted([queue.topic, queue.queue_id] for queue in self.links.damaged)
        write_bytes_atomic_blocking(self.root / DAMAGED_FILE, json.dumps(names).encode())

    def _read_damaged_blocking(self) -> list[tuple[str, int]]:
        try:
            return [
                (str(t), int(q)) for t, q in json.loads((self.root / DAMAGED_FILE).read_bytes())
            ]
        except FileNotFoundError:
            return []
        except (ValueError, TypeError) as exc:  # a torn file cannot be: written atomically
            log.warning("ignoring %s (%s)", self.root / DAMAGED_FILE, exc)
            return []

    def forget_damaged_blocking(self) -> None:
        """After recovery rebuilt the queues set aside: the record of them goes."""
        (self.root / DAMAGED_FILE).unlink(missing_ok=True)

    def entries(self, queues: Iterable[ConsumeQueue]) -> list[positions.Entry]:
        return [(q.topic, q.queue_id, q.summary()) for q in queues]

    def take_changed(self) -> list[ConsumeQueue]:
        """The queues whose state moved since the last call; the set starts over. A queue
        joins ``changed`` when it becomes dirty, not at each append (the compiled append of
        the usual run stays one step shorter), so the dirty ones appended to since their last
        record are added here, not every dirty one: a queue stays dirty until the thorough
        flush (60 s), and after a 10,000-topic run each record for a minute would capture and
        write its 40,000 idle queues again (~80 ms of the loop and 2.2 MB each). So every
        queue moved since its last record is in one of the two sets: a flush that cleans one
        moves it to ``changed`` (``flushed``)."""
        links = self.links
        changed, links.changed = links.changed, set()
        changed.update(filter(ConsumeQueue.moved_since_record, links.dirty))
        return list(changed)

    def save_positions_blocking(self, positions_file: Path, position: int) -> int:
        """A snapshot of every queue as it is now (a clean shutdown after the last flush, the
        end of a recovery): what the next start loads instead of reading every queue. The
        changed set starts over. Returns the file's size."""
        self.links.changed = set()
        items, count = positions.encode_entries(self.entries(self.queues.values()))
        return positions.write_snapshot_blocking(
            positions_file, self.file_size, position, items, count
        )

    async def spill_tails(self) -> None:
        """Write every queue's tail to its file (consume_queue's "Tails"), in a thread: what
        was dispatched before this call is in the files (page cache) after it."""
        await self.capture_written(list(self.links.tails), states=False)

    def capture(
        self, queues: list[ConsumeQueue], states: bool = True
    ) -> tuple[list[positions.Entry], list[TailWrite]]:
        """(loop) ``ConsumeQueue.capture`` of ``queues`` (the caller bounds them:
        ``capture_written`` takes ``CAPTURE_CHUNK`` a loop step): their entries (``states``)
        and tails."""
        entries: list[positions.Entry] = []
        writes: list[TailWrite] = []
        for queue in queues:
            state, write = queue.capture()
            if states:
                entries.append((queue.topic, queue.queue_id, state))
            if write is not None:
                writes.append(write)
        return entries, writes

    async def capture_written(
        self, queues: list[ConsumeQueue], states: bool = True
    ) -> list[positions.Entry]:
        """``capture`` and ``write_tails``, ``CAPTURE_CHUNK`` queues at a time (the copies of
        tails in flight are one chunk's): when this returns, every tail captured is in its
        file and trimmed. Their entries (``states``); a chunk's failure is raised after its
        other tails are trimmed (the chunks before it are written, the later ones untouched).
        A queue captured later may count more units; its tail then holds them too."""
        entries: list[positions.Entry] = []
        for start in range(0, len(queues), CAPTURE_CHUNK):
            if start:
                await asyncio.sleep(0)  # a chunk without tails awaited no thread
            chunk, writes = self.capture(queues[start : start + CAPTURE_CHUNK], states)
            entries.extend(chunk)
            await self.write_tails(writes)
        return entries

    async def write_tails(self, writes: list[TailWrite]) -> None:
        """Write captured tails in a thread, then trim them on the loop
        (``ConsumeQueue.tail_written``). Raises the first failure still owed after the others
        are trimmed (a full disk: DiskFullError): what vouches for units must not go on."""
        if not writes:
            return
        errors = await asyncio.to_thread(write_tails_blocking, writes)
        failure: Exception | None = None
        for write, error in zip(writes, errors, strict=True):
            owed = write.queue.tail_written(write, error)
            failure = failure or owed
        if failure is not None:
            raise failure

    def unflushed(self, least_bytes: int) -> list[ConsumeQueue]:
        """The queues with at least ``least_bytes`` unflushed (at least one unit when 0): the
        dirty ones only, so an idle broker of 100,000 queues visits none."""
        floor = max(least_bytes, 1)
        return [queue for queue in self.dirty if queue.unflushed_bytes >= floor]

    def most_unflushed(self, least_bytes: int, most: int) -> list[ConsumeQueue]:
        """Of the queues with at least ``least_bytes`` unflushed, the ``most`` with the most."""
        return heapq.nlargest(most, self.unflushed(least_bytes), key=_unflushed_bytes)

    def flushed(self, queues: list[ConsumeQueue]) -> None:
        """After a flush of ``queues`` (loop): those with nothing unflushed are clean. One
        appended to since the positions journal last recorded it joins ``changed`` as it
        leaves ``dirty``: while dirty, its appends add it to neither (``take_changed`` finds
        it in ``dirty``), so without this the next record left it out at its older state
        with a newer D, and a restart after a kill -9 re-dispatched past its missing units
        (the fault campaign, seed 31337: 169 blank units in a replica turned master)."""
        links = self.links
        for queue in queues:
            if queue.unflushed_bytes <= 0:
                links.dirty.discard(queue)
                if queue.moved_since_record():
                    links.changed.add(queue)

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            directory = os.path.join(self.root, topic, str(queue_id))
            queue = ConsumeQueue(topic, queue_id, directory, self.file_size, self.cache, self.links)
            self._add(queue)
        return queue

    def _add(self, queue: ConsumeQueue) -> None:
        self.queues[(queue.topic, queue.queue_id)] = queue
        self._by_topic.setdefault(queue.topic, {})[queue.queue_id] = queue

    def read_units(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[Unit]:
        """Up to ``max_count`` units from ``offset`` (from the minimum when below it); none
        past the end or of a queue that does not exist."""
        queue = self.queues.get((topic, queue_id))
        if queue is None or offset >= queue.max_offset:
            return []
        return list(queue.read_units(max(offset, queue.min_offset), max_count))

    def queue_counts(self) -> dict[str, int]:
        """Each topic with a queue: its highest queue id + 1."""
        counts: dict[str, int] = {}
        for queue in self.queues.values():
            counts[queue.topic] = max(counts.get(queue.topic, 0), queue.queue_id + 1)
        return counts

    def of_topic(self, topic: str) -> list[ConsumeQueue]:
        """The topic's queues by queue id (a few; never a walk of the whole table)."""
        queues = self._by_topic.get(topic)
        if not queues:
            return []
        return [queues[queue_id] for queue_id in sorted(queues)]

    def remove_topic(self, topic: str) -> list[ConsumeQueue]:
        """Forget the topic's queues (unmapping their files) and move its directory aside (one
        rename, so a queue re-created at once starts in a fresh directory); the caller destroys
        the returned queues in a thread."""
        removed = list(self._by_topic.pop(topic, {}).values())
        links = self.links
        for queue in removed:
            del self.queues[(queue.topic, queue.queue_id)]
            links.dirty.discard(queue)
            links.changed.discard(queue)
            links.damaged.discard(queue)  # nothing to rebuild for a deleted topic
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

    async def close_durably(self, positions_file: Path, dispatched: int) -> int:
        """A clean shutdown's last step for the queues, after their final flush: record what
        the next start loads, then close. Only what is durable goes into the positions
        snapshot: a failed final flush leaves the next start to read the files, as does a
        queue found damaged (that start sets it aside and rebuilds it). Returns how many
        queues hold units no file has (a tail the final flush could not write, consume_queue's
        "Tails"): while any, the caller keeps the abort marker, so the next start re-dispatches
        them from the commit log."""
        damaged = bool(self.links.damaged)
        if not damaged and all(queue.unflushed_bytes == 0 for queue in self):
            await asyncio.to_thread(self.save_positions_blocking, positions_file, dispatched)
        else:
            await asyncio.to_thread(positions.remove_blocking, positions_file)
        if damaged:
            await asyncio.to_thread(self.save_damaged_blocking)
        lost_tails = len(self.links.tails)
        self.close()
        return lost_tails


async def destroy_queues(queues: Iterable[ConsumeQueue], maintenance: asyncio.Lock) -> None:
    """Delete the files of queues ``remove_topic`` returned, one queue at a time in a thread,
    under the store's maintenance lock (no flush syncs a file deleted under it)."""
    async with maintenance:
        for queue in queues:
            await asyncio.to_thread(queue.destroy_blocking)
