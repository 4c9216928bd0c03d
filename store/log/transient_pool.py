"""TransientStorePool: segment-sized write buffers for ``transientStorePoolEnable``.

With the pool, appends copy into a resident bytearray instead of the mmap, and the
CommitRealTimeService pwrites the buffered range into the file from a thread (pwrite releases the
GIL, a slice copy into an mmap does not), so the page-cache copy can run on the second core.
Readers see data only once committed. When the pool is empty (all buffers attached to segments
not yet fully committed) a new segment is written directly, as RocketMQ does when the pool is
deficient. ``init_blocking`` allocates all ``pool_size`` buffers of ``file_size`` bytes and
touches every page (RocketMQ allocates and mlocks them at start): a first write into a fresh
buffer page-faults, which would otherwise land on the event loop.
"""

from __future__ import annotations


class TransientStorePool:
    def __init__(self, pool_size: int, file_size: int) -> None:
        if pool_size < 1:
            raise ValueError(f"transient store pool size must be >= 1, got {pool_size}")
        self.pool_size = pool_size
        self.file_size = file_size
        self._free: list[bytearray] = []
        self._allocated = 0
        self.deficient_borrows = 0  # segments written directly because no buffer was free

    def init_blocking(self) -> None:
        """Allocate and pre-fault the buffers (run in a thread: seconds for GiB segments)."""
        page = 4096
        touch = bytes(self.file_size // page + (1 if self.file_size % page else 0))
        while self._allocated < self.pool_size:
            buffer = bytearray(self.file_size)
            buffer[::page] = touch  # one write per page makes it resident
            self._allocated += 1
            self._free.append(buffer)

    def borrow(self) -> bytearray | None:
        if self._free:
            return self._free.pop()
        if self._allocated < self.pool_size:
            self._allocated += 1
            return bytearray(self.file_size)
        self.deficient_borrows += 1
        return None

    def give_back(self, buffer: bytearray) -> None:
        if len(buffer) != self.file_size:
            raise ValueError("buffer does not belong to this pool (wrong size)")
        self._free.append(buffer)

    @property
    def available(self) -> int:
        return len(self._free) + self.pool_size - self._allocated
