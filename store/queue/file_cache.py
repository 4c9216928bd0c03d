"""A bounded cache of open ConsumeQueue files (LevelDB's table cache, RocksDB's
``max_open_files``): descriptors are bounded by a setting, never by the number of queues.

Why: a map per queue file for the life of the process ran a broker out of descriptors near
10,000 queues (CPython's ``mmap`` keeps a dup of the descriptor, so a file cost two) and then
dispatch, checkpoints and restart all failed with EMFILE. Here a file is opened on its first
read or write and closed, least recently used first, once ``capacity`` files are open; the next
access opens it again (~5 us here). Queue files are read and written with ``pread``/``pwrite``,
not mapped (``store.queue.consume_queue`` says why, with figures), so they hold no map at all.

The capacity adapts to the process's open-file limit: at most a quarter of ``RLIMIT_NOFILE``
(the rest is for connections, commit log and index files, metadata writes). When opening still
fails with EMFILE/ENFILE the cache closes half of what it holds and tries once more; if that
fails too the caller gets ``ResourceLimitError`` (RESOURCE_EXHAUSTED on every protocol) and the
cache stays at the lower bound for ``RELAX_S`` before growing back. One warning per episode.

Threads: the cache and the descriptors it holds are used on the event loop only. Threads that
sync a queue file open a descriptor of their own by path (``ConsumeQueueFile.flush_blocking``),
so a close on the loop never races them (a closed descriptor number can be reused at once by
another open). Recovery runs in a thread before anything else uses the store.
"""

from __future__ import annotations

import errno
import logging
import resource
import time
from typing import Protocol

from wharf.store.errors import ResourceLimitError

log = logging.getLogger(__name__)

# errno values of a limit the operator sets: descriptors of the process and of the system.
LIMIT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
MIN_CAPACITY = 16
RELAX_S = 60.0  # after an exhaustion the cache stays small this long


class Cached(Protocol):
    fd: int  # -1 while closed

    def open_now(self) -> int: ...

    def close_now(self) -> None: ...


def default_capacity(configured: int) -> int:
    """``configured``, capped at a quarter of the soft open-file limit (at least 16)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(MIN_CAPACITY, min(configured, soft // 4))


class QueueFileCache:
    """Open files, least recently used first (a dict keeps insertion order)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(MIN_CAPACITY, capacity)
        self._limit = self.capacity
        self._open: dict[Cached, None] = {}
        self._exhausted_at = 0.0  # monotonic time of the last exhaustion (0: none)
        self.opens = 0  # files opened (misses)
        self.closes = 0  # files closed to make room
        self.exhaustions = 0  # episodes of a limit met

    def __len__(self) -> int:
        return len(self._open)

    @property
    def limit(self) -> int:
        """How many files may be open now (the capacity, or less after an exhaustion)."""
        return self._limit

    def fd(self, file: Cached) -> int:
        """``file``'s descriptor, opening it (and closing the least recently used) if needed."""
        fd = file.fd
        opened = self._open
        if fd >= 0:
            # Most recently used goes last; pop + set is cheaper than OrderedDict.move_to_end.
            del opened[file]
            opened[file] = None
            return fd
        if self._exhausted_at and time.monotonic() - self._exhausted_at >= RELAX_S:
            self._exhausted_at = 0.0
            self._limit = self.capacity
            log.info("queue file cache back to %d open files", self._limit)
        while len(opened) >= self._limit:
            self._close_oldest()
        try:
            fd = file.open_now()
        except OSError as exc:
            if exc.errno not in LIMIT_ERRNOS:
                raise
            fd = self._open_after_shrinking(file, exc)
        opened[file] = None
        self.opens += 1
        return fd

    def _open_after_shrinking(self, file: Cached, first: OSError) -> int:
        if not self._exhausted_at:
            self.exhaustions += 1
            log.warning(
                "opening consume queue files met a limit (%s) with %d files open: keeping at "
                "most %d open for %.0f s; raise the open-file limit (ulimit -n) if this repeats",
                first.strerror,
                len(self._open),
                max(MIN_CAPACITY, len(self._open) // 2),
                RELAX_S,
            )
        self._exhausted_at = time.monotonic()
        self._limit = max(MIN_CAPACITY, len(self._open) // 2)
        while len(self._open) >= self._limit:
            self._close_oldest()
        try:
            return file.open_now()
        except OSError as exc:
            if exc.errno not in LIMIT_ERRNOS:
                raise
            raise ResourceLimitError(
                f"cannot open a consume queue file ({exc.strerror}): the broker's open-file "
                f"limit (ulimit -n) is taken by other files and connections; raise the limit, "
                f"close idle connections or use fewer queues"
            ) from exc

    def _close_oldest(self) -> None:
        oldest = next(iter(self._open))
        del self._open[oldest]
        oldest.close_now()
        self.closes += 1

    def forget(self, file: Cached) -> None:
        """``file`` is closed for good (deleted, truncated away, its queue closed)."""
        if self._open.pop(file, 0) is None:
            file.close_now()

    def close(self) -> None:
        for file in list(self._open):
            file.close_now()
        self._open.clear()
