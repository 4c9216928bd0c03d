"""AllocateMappedFileService: create the next and next-next segment ahead of the writer.

Creating a segment (open, posix_fallocate, a read pass that puts its pages in the page cache,
mmap, optional warm-up) costs milliseconds to seconds for 1 GiB files; the append path must
never pay that on the event loop. After every
roll (and at start) the queue asks for the two following segments; a thread creates them; the
next roll takes one that is ready. If none is ready the queue creates it synchronously and
counts it (``MappedFileQueue.sync_creations``): a symptom to watch, not an error.

A synchronous creation and a preallocation of the same offset cannot clobber each other:
segments are created under a temporary name and linked into place (the loser discards its
copy, see ``create_segment_blocking``).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor, Future, ThreadPoolExecutor

from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue, create_segment_blocking
from store.service import Service

log = logging.getLogger(__name__)

PREALLOCATE_AHEAD = 2  # next and next-next, as RocketMQ


class AllocateMappedFileService(Service):
    def __init__(self, queue: MappedFileQueue, executor: Executor | None = None) -> None:
        super().__init__("AllocateMappedFileService", interval_s=1.0)
        self._queue = queue
        self._own_executor = executor is None
        self._pool: Executor = executor or ThreadPoolExecutor(1, thread_name_prefix="allocate")
        self._ready: dict[int, MappedFile] = {}
        self._pending: list[int] = []
        self._inflight: dict[int, Future[MappedFile]] = {}
        self.created = 0
        self.blocking_takes = 0  # rolls that waited (on the loop) for an in-flight creation
        queue.take_preallocated = self.take
        queue.on_roll = self.request_after

    def request_after(self, start_offset: int) -> None:
        """Ask for the segments that follow the one starting at ``start_offset``."""
        size = self._queue.file_size
        for i in range(1, PREALLOCATE_AHEAD + 1):
            offset = start_offset + i * size
            known = offset in self._ready or offset in self._inflight or offset in self._pending
            if not known:
                self._pending.append(offset)
        self.wakeup()

    @property
    def idle(self) -> bool:
        """Nothing requested or being created."""
        return not self._pending and not self._inflight

    def take(self, offset: int) -> MappedFile | None:
        """The ready segment for ``offset``; waits for it if its creation is in flight (rare:
        the writer outran the thread), None if it was never requested or creation failed."""
        if offset in self._pending:
            self._pending.remove(offset)
        mapped = self._ready.pop(offset, None)
        if mapped is not None:
            return mapped
        future = self._inflight.pop(offset, None)
        if future is None:
            return None
        self.blocking_takes += 1
        try:
            return future.result()
        except Exception as exc:
            log.error("preallocating segment %d failed: %r; creating it synchronously", offset, exc)
            return None

    async def run_once(self) -> None:
        while self._pending and not self.stopping:
            offset = self._pending.pop(0)
            future = self._pool.submit(
                create_segment_blocking,
                self._queue.store_path,
                offset,
                self._queue.file_size,
                self._queue.warm,
                True,  # prefault: this is a thread, the page faults are cheap here
            )
            self._inflight[offset] = future
            try:
                mapped = await asyncio.wrap_future(future)
            except FileExistsError:
                self._inflight.pop(offset, None)
                continue  # already on disk (created synchronously): nothing to prepare
            if self._inflight.pop(offset, None) is future:  # not claimed by take() meanwhile
                self._ready[offset] = mapped
                self.created += 1

    async def on_stop(self) -> None:
        """Unused preallocated segments are deleted: they hold no data."""
        ready, self._ready = self._ready, {}
        self._pending.clear()
        for mapped in ready.values():
            await asyncio.to_thread(mapped.destroy_blocking)
        if self._own_executor:
            self._pool.shutdown(wait=True)
