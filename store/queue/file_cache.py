"""A bounded cache of mapped ConsumeQueue files (LevelDB's table cache, RocksDB's
``max_open_files``): descriptors and maps are bounded by a setting, never by the number of
queues.

Why: a map per queue file for the life of the process ran a broker out of descriptors near
10,000 queues (CPython's ``mmap`` keeps a dup of the descriptor, so a file cost two) and then
dispatch, checkpoints and restart all failed with EMFILE. Here a file is mapped on its first
read or write and unmapped, least recently used first, once ``capacity`` files are mapped; the
next access maps it again. A mapped file holds ONE descriptor (the map's own dup: the one
opened to map it is closed at once) and one map. Python 3.13's ``trackfd=False`` would drop
that descriptor too; 3.11 has no such switch.

Cost of a miss (open + fstat + mmap + close, and the munmap of the evicted file): ~12 us here
(``python -m tests.bench.queue_scale`` prints it). Dispatch appends a chunk's units per queue
in one call, so a produce over more queues than the cache holds pays it once per queue per
chunk, not per message.

The capacity adapts to the process's open-file limit: at most a quarter of ``RLIMIT_NOFILE``
(the rest is for connections, commit log and index files, metadata writes). When mapping still
fails with EMFILE/ENFILE, or ENOMEM (``vm.max_map_count`` reached), the cache unmaps half of
what it holds and tries once more; if that fails too the caller gets
``ResourceLimitError`` (RESOURCE_EXHAUSTED on every protocol) and the cache stays at the lower
bound for ``RELAX_S`` before growing back. One warning per episode.

Threads: the cache and every map are used on the event loop only (reads copy bytes out, so no
view outlives an unmap). Threads that sync or allocate a queue file open their own descriptor
by path (``ConsumeQueueFile.flush_blocking``), so an unmap on the loop never races them.
Recovery runs in a thread before anything else uses the store.
"""

from __future__ import annotations

import errno
import logging
import mmap
import resource
import time
from typing import Protocol

from wharf.store.errors import ResourceLimitError

log = logging.getLogger(__name__)

# errno values of a limit the operator sets: descriptors (process, system) and maps (ENOMEM
# from mmap once vm.max_map_count is reached).
LIMIT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
MIN_CAPACITY = 16
RELAX_S = 60.0  # after an exhaustion the cache stays small this long


class Mappable(Protocol):
    mm: mmap.mmap | None

    def map_now(self) -> mmap.mmap: ...

    def unmap(self) -> None: ...


def default_capacity(configured: int) -> int:
    """``configured``, capped at a quarter of the soft open-file limit (at least 16)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(MIN_CAPACITY, min(configured, soft // 4))


class QueueFileCache:
    """Mapped files, least recently used first (a dict keeps insertion order)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(MIN_CAPACITY, capacity)
        self._limit = self.capacity
        self._mapped: dict[Mappable, None] = {}
        self._exhausted_at = 0.0  # monotonic time of the last exhaustion (0: none)
        self.maps = 0  # files mapped (misses)
        self.unmaps = 0  # files unmapped to make room
        self.exhaustions = 0  # episodes of a limit met

    def __len__(self) -> int:
        return len(self._mapped)

    @property
    def limit(self) -> int:
        """How many files may be mapped now (the capacity, or less after an exhaustion)."""
        return self._limit

    def map(self, file: Mappable) -> mmap.mmap:
        """``file``'s map, mapping it (and unmapping the least recently used) if needed."""
        mm = file.mm
        mapped = self._mapped
        if mm is not None:
            # Most recently used goes last; pop + set is cheaper than OrderedDict.move_to_end.
            del mapped[file]
            mapped[file] = None
            return mm
        if self._exhausted_at and time.monotonic() - self._exhausted_at >= RELAX_S:
            self._exhausted_at = 0.0
            self._limit = self.capacity
            log.info("queue file cache back to %d mapped files", self._limit)
        while len(mapped) >= self._limit:
            self._unmap_oldest()
        try:
            mm = file.map_now()
        except OSError as exc:
            if exc.errno not in LIMIT_ERRNOS:
                raise
            mm = self._map_after_shrinking(file, exc)
        mapped[file] = None
        self.maps += 1
        return mm

    def _map_after_shrinking(self, file: Mappable, first: OSError) -> mmap.mmap:
        if not self._exhausted_at:
            self.exhaustions += 1
            log.warning(
                "mapping consume queue files met a limit (%s) with %d files mapped: keeping at "
                "most %d mapped for %.0f s; raise the open-file limit (ulimit -n) or "
                "vm.max_map_count if this repeats",
                first.strerror,
                len(self._mapped),
                max(MIN_CAPACITY, len(self._mapped) // 2),
                RELAX_S,
            )
        self._exhausted_at = time.monotonic()
        self._limit = max(MIN_CAPACITY, len(self._mapped) // 2)
        while len(self._mapped) >= self._limit:
            self._unmap_oldest()
        try:
            return file.map_now()
        except OSError as exc:
            if exc.errno not in LIMIT_ERRNOS:
                raise
            raise ResourceLimitError(
                f"cannot map a consume queue file ({exc.strerror}): the broker's open-file "
                f"limit (ulimit -n) or vm.max_map_count is reached by other files and "
                f"connections; raise the limit, close idle connections or use fewer queues"
            ) from exc

    def _unmap_oldest(self) -> None:
        oldest = next(iter(self._mapped))
        del self._mapped[oldest]
        oldest.unmap()
        self.unmaps += 1

    def forget(self, file: Mappable) -> None:
        """``file`` is closed for good (deleted, truncated away, its queue closed)."""
        if self._mapped.pop(file, 0) is None:
            file.unmap()

    def close(self) -> None:
        for file in list(self._mapped):
            file.unmap()
        self._mapped.clear()
