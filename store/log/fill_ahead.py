"""FillAhead: the segment being written zero-filled a little ahead of the writer (SYNC_FLUSH).

Why: a segment is created with ``posix_fallocate``, whose extents ext4 keeps *unwritten*. The
first write into an unwritten block converts it at writeback, and the group commit's
fdatasync then also logs that extent change (a fast-commit or journal write, one more
synchronous I/O). Measured with ftrace (``ext4_ext_handle_unwritten_extents`` inside
``ext4_sync_file``, 2026-11-29, 2 vCPUs, ext4 on virtio): at 1k msg/s over the wire port,
72% of the commit log's fdatasyncs handled unwritten extents and their p50 was 235 us; in a
zero-written segment, none did and the p50 was 176 us. ``ZeroFill`` (allocate.py) fills the
segments made ahead, in a thread, but only once a roll has shown the log to be slow: the
first two segments of a broker (1 GiB each by default: hours at low rates) and the segment
a restart resumes in were never filled. This fills whichever segment the writer is in.

How: after an append, when the zeros written ahead of the write position are fewer than
``FILL_LEAD`` bytes, steps of ``ZERO_FILL_STEP`` zeros are written, one after another until
the lead is there, at the end of what is known written (``MappedFile.zeroed_to``), ON THE
LOOP, each in a callback of its own: appends and fills then never overlap, since both only write at or past the write position and one
thread does both (a fill in another thread could land its zeros over a record appended
meanwhile). The step's write-back is started in a thread (``sync_file_range``, which takes
50-100 us to submit on this VM), so the group commit's next fdatasync finds it done or in
flight rather than dirty. One step costs the loop one 256 KiB copy into the page cache;
steps are paced to ``zeroFillAheadMbps``, and none is made for a writer that wrote more than
``FAST_WRITER_BPS`` in the current second: it writes into fallocated extents, as before (its
syncs are large, the extent change a small part of each).

Safety: zeros are what recovery reads past the last record either way (an unwritten extent
reads as zeros), so a fill interrupted by a crash or a power cut changes nothing on restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor, Future

from wharf.store.log.mapped_file import ZERO_FILL_STEP, MappedFile

log = logging.getLogger(__name__)

# Zeros kept written ahead of the write position: 1 MiB is ~1 s of a lone writer at 1k msg/s
# of 1 KiB, ~0.1 s at 10k msg/s.
FILL_LEAD = 1 << 20
# A writer past this many bytes in a second is not filled ahead (SYNC_FLUSH produce at 160k
# msg/s: 190 MB/s, where a fill at 32 MB/s only copies zeros the writer overwrites ~1 ms
# later, and writes them back twice); 16 MiB/s is ~14k msg/s of 1 KiB.
FAST_WRITER_BPS = 16 << 20


class FillAhead:
    """Owned by the CommitLog; ``after_append(mapped)`` runs on the loop after each append."""

    def __init__(self, bytes_per_s: int, executor: Executor) -> None:
        self._step_s = ZERO_FILL_STEP / bytes_per_s
        self._executor = executor
        self._next_at = 0.0  # loop time before which no step starts (the pace)
        self._scheduled: asyncio.Handle | None = None
        self.clock = time.monotonic  # the writer's pace is measured on it (tests replace it)
        self._window_at = -1.0  # the second in which the writer's pace is measured
        self._window_from = 0  # the log's write position when it began
        self.steps = 0  # bytes filled / ZERO_FILL_STEP, for tests and the curious
        self.failed = False  # a fill's write failed: no more fills (the appends go on)

    def after_append(self, mapped: MappedFile) -> None:
        if (
            self._scheduled is not None
            or self.failed
            or mapped.zeroed_to >= mapped.file_size
            or mapped.zeroed_to >= mapped.wrote_position + FILL_LEAD
        ):
            return
        now = self.clock()
        position = mapped.file_from_offset + mapped.wrote_position
        if now - self._window_at >= 1.0:
            self._window_at, self._window_from = now, position
        elif position - self._window_from > FAST_WRITER_BPS:
            return  # a fast writer: its syncs are large, the zeros would be written twice
        loop = asyncio.get_running_loop()
        # After the append's own callback (its sync request first), at the fill's pace.
        self._scheduled = loop.call_at(max(loop.time(), self._next_at), self._step, mapped)

    def _step(self, mapped: MappedFile) -> None:
        self._scheduled = None
        if mapped.closed or mapped.write_buffer is not None:
            return
        start = max(mapped.zeroed_to, mapped.wrote_position)
        end = min(start + ZERO_FILL_STEP, mapped.file_size)
        if end <= start:
            return
        try:
            mapped.write_zeros(start, end)
        except OSError as exc:
            # A fallocated range needs no new block, so this is not a full disk: say it once
            # and leave the rest fallocated (slower syncs, nothing wrong).
            self.failed = True
            log.warning("zero fill ahead of the commit log's writer stopped: %s", exc)
            return
        self.steps += 1
        self._next_at = asyncio.get_running_loop().time() + self._step_s
        future = self._executor.submit(mapped.start_writeback_blocking, start, end)
        future.add_done_callback(_log_writeback_error)
        self.after_append(mapped)  # the next step, at the pace, until the lead is written

    def cancel(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None


def _log_writeback_error(future: Future[None]) -> None:
    exc = future.exception()
    if exc is not None:
        log.debug("starting the write-back of a zero fill failed: %s", exc)
