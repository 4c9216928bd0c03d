# Stub of the compiled module built from _syncer.c (the group commit's GIL-free sync thread,
# twin of store/log/sync_engine.py's ThreadSyncEngine); loaded through
# ``wharf.store.fast.load("_syncer")``.
from collections.abc import Sequence

class Syncer:
    MAX_FDS: int  # the fds a job may hold
    def __init__(self) -> None: ...
    def fileno(self) -> int:
        """The eventfd the loop watches: readable once a job ended."""
    def submit(self, job_id: int, fds: Sequence[int], /) -> None:
        """Sync these fds next (replaces a job the thread has not started)."""
    def take(self) -> tuple[int, int, float, int, int, int, int, int]:
        """(done_id, done_count, last_seconds, start_ns, done_ns, failed_id, failed_errno,
        busy), the counts since the last take."""
    def close(self) -> None:
        """Run what was submitted, stop the thread, close the eventfd (idempotent)."""
