"""OffsetLedger: which entries of a system queue are still open, kept exact across kill -9 with
no log of its own -- the pattern the timer and the transaction services share.

An entry is a queue offset of a system queue (a timer message, a half message). It is opened
when its unit is read and closed by a record the service writes to the commit log carrying the
entry's offset in a property (``mark_property``): a delivered timer copy, a committed message,
a rollback marker. So the commit log alone says what is closed.

IN MEMORY: ``open`` (offset -> the service's value), ``closed`` (offsets at or above the
watermark W, the lowest open offset), the read cursor (units below it are open or closed).

CHECKPOINT (JSON, atomic write + .bak): W, closed offsets >= W as ranges, the cursor, extra
fields of the service, and P: a commit-log offset below every closing record not yet counted in
``closed`` (``begin_write`` / ``end_write`` bracket the writes of closing records, so P stays
below those in flight). ``checkpoint_loop`` writes it after bursts and, while idle, every
``IDLE_CHECKPOINT_S`` the commit log moved, so P trails the log's end by seconds. START: ``load`` the checkpoint, then ``close_marked`` the offsets found
in the commit log from P on; the service then reads its queue from W, skipping closed offsets.

BOUND: ``closed`` holds offsets closed above the oldest open entry: one entry open for days in
front of a million closed ones keeps a million ints (~60 MB); the checkpoint stores ranges,
compact for runs of consecutive offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

from wharf.store.paths import read_json_with_backup_blocking, write_json_atomic_blocking

V = TypeVar("V")
log = logging.getLogger(__name__)
# An idle service still checkpoints this often while the commit log grows, so P stays close to
# the log's end and a start-up after kill -9 walks at most ~this much log for closing records
# (a checkpoint written only after activity left P at the last clean stop: hours of log).
IDLE_CHECKPOINT_S = 10.0


def ranges(offsets: Iterable[int]) -> list[list[int]]:
    """Sorted offsets as [start, end) runs."""
    out: list[list[int]] = []
    for offset in sorted(offsets):
        if out and out[-1][1] == offset:
            out[-1][1] = offset + 1
        else:
            out.append([offset, offset + 1])
    return out


class OffsetLedger(Generic[V]):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.open: dict[int, V] = {}
        self.closed: set[int] = set()
        self.cursor = 0
        self.extra: dict[str, object] = {}  # the service's own checkpoint fields
        self.log_offset = 0  # P of the checkpoint loaded or last written
        self._by_offset: list[int] = []  # open offsets, lazily pruned
        self._writes: dict[int, int] = {}  # write id -> log end before it
        self._next_write = 0

    # --- start ----------------------------------------------------------------------------
    def load_blocking(self) -> None:
        data = read_json_with_backup_blocking(self.path)
        data = data if isinstance(data, dict) else {}
        watermark = int(data.get("watermark", 0))
        self.closed = {o for lo, hi in data.get("closed", []) for o in range(int(lo), int(hi))}
        self.cursor = watermark
        self.log_offset = int(data.get("logOffset", 0))
        self.extra = dict(data.get("extra", {}))

    def close_marked(self, offsets: Iterable[int]) -> None:
        """Offsets found marked in the commit log after the checkpoint: closed."""
        watermark = self.cursor
        self.closed.update(o for o in offsets if o >= watermark)

    # --- entries --------------------------------------------------------------------------
    def add(self, offset: int, value: V) -> None:
        self.open[offset] = value
        heapq.heappush(self._by_offset, offset)

    def close(self, offset: int) -> V | None:
        self.closed.add(offset)
        return self.open.pop(offset, None)

    def watermark(self) -> int:
        """The lowest open offset (the cursor when none is open)."""
        heap = self._by_offset
        while heap and heap[0] not in self.open:
            heapq.heappop(heap)
        return heap[0] if heap else self.cursor

    # --- closing writes -------------------------------------------------------------------
    def begin_write(self, log_end: int) -> int:
        """Before writing closing records: returns an id for ``end_write``."""
        write_id = self._next_write
        self._next_write += 1
        self._writes[write_id] = log_end
        return write_id

    def end_write(self, write_id: int) -> None:
        del self._writes[write_id]

    # --- checkpoint -----------------------------------------------------------------------
    def snapshot(self, log_end: int) -> dict[str, object]:
        """The checkpoint payload now (prunes ``closed`` below the watermark)."""
        watermark = self.watermark()
        self.closed = {o for o in self.closed if o >= watermark}
        low = min([log_end, *self._writes.values()])
        self.log_offset = low
        return {
            "watermark": watermark,
            "closed": ranges(self.closed),
            "cursor": self.cursor,
            "logOffset": low,
            "extra": self.extra,
        }

    def write_blocking(self, payload: dict[str, object]) -> None:
        write_json_atomic_blocking(self.path, payload)


def lower_log_offset_blocking(path: Path, offset: int) -> None:
    """The commit log was cut at ``offset`` (a replica's truncation): a checkpoint whose P lies
    past it is rewritten with P = ``offset``. Its closed offsets stay: a closing record is
    counted once its put returned, which under SYNC_MASTER means the group has it, so it lies
    below any cut. (A put answered FLUSH_SLAVE_TIMEOUT is counted too; if cut, the entry stays
    closed here while the new master, whose ledger never saw it, delivers or resolves it.)
    Idempotent: the truncation repeats it after a crash."""
    data = read_json_with_backup_blocking(path)
    if isinstance(data, dict) and int(data.get("logOffset", 0)) > offset:
        data["logOffset"] = offset
        write_json_atomic_blocking(path, data)


async def checkpoint_loop(
    write: Callable[[], Awaitable[None]],
    dirty: asyncio.Event,
    interval_s: float,
    log_moved: Callable[[], bool],
    what: str,
    idle_s: float = IDLE_CHECKPOINT_S,
) -> None:
    """A service's checkpoint writer: after each burst of closings (``dirty``), at most every
    ``interval_s``; and every ``idle_s`` while the commit log moved since the last one. A
    failed write is logged and retried."""
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(idle_s):
                await dirty.wait()
        if not dirty.is_set() and not log_moved():
            continue
        dirty.clear()
        try:
            await write()
        except OSError:
            log.exception("%s checkpoint failed; will retry", what)
            dirty.set()
        await asyncio.sleep(interval_s)
