# Stub of the compiled module built from _syncer.c (the group commit's GIL-free sync thread,
# twin of store/log/sync_engine.py's ThreadSyncEngine); loaded through
# ``wharf.store.fast.load("_syncer")``.
from collections.abc import Sequence

class Syncer:
    MAX_FDS: int  # the fds a job may hold
    MAX_DEFERRED: int  # deferred writes held at once (queued, sending, or not yet taken)
    NOT_SYNCED: int  # outcome: not written, the sync failed (-1000)
    CLOSED: int  # outcome: not written, the syncer closed first (-1001)
    def __init__(self) -> None: ...
    def fileno(self) -> int:
        """The eventfd the loop watches: readable once a job ended."""
    def prewake(self) -> None:
        """A job follows soon: wake the idle thread now, to spin for it (0.2 ms at most)."""
    def thread_id(self) -> int:
        """The sync thread's id (0 until it runs)."""
    def submit(self, job_id: int, fds: Sequence[int], /) -> None:
        """Sync these fds next (replaces a job the thread has not started); the thread's
        affinity leaves out the caller's CPU (so its wake-up does not preempt the caller)."""
    def take(self) -> tuple[int, int, float, int, int, int, int, int]:
        """(done_id, done_count, last_seconds, start_ns, done_ns, failed_id, failed_errno,
        busy), the counts since the last take."""
    def defer(
        self, job_id: int, fd: int, data: bytes | bytearray | memoryview, token: int, /
    ) -> int:
        """Send ``data`` on ``fd`` (dup'ed) right after job ``job_id`` is synced: 1 durable
        already (nothing of this socket waits: write it yourself), 0 deferred (the outcome
        comes from take_deferred), -1 refused (failed sync, closing, bad fd, dup failed, full)."""
    def take_deferred(self) -> list[tuple[int, int]]:
        """(token, outcome) of the deferred writes finished since the last call, in order:
        bytes written (the caller writes the rest), -errno, NOT_SYNCED or CLOSED."""
    def close(self) -> None:
        """Run what was submitted, stop the thread, finish the deferred writes left with
        CLOSED, close the eventfd (idempotent)."""
