"""The daemon's garbage-collector policy: what survives a long full collection is frozen.

CPython's full collection walks every object the collector tracks, and a broker's long-lived
state grows with its queues and topics (a queue is ~4 tracked objects: the queue, its file,
their lists). The start freezes what it loaded (``gc.freeze`` in ``wharf.broker.__main__``);
queues and topics created later stayed in the collector's generations, so each full collection
walked them again: in ``tests.bench.topics``' daemon, holding 45,444 queues made after its
start, a full collection paused the loop 46-105 ms; with this policy 11.5 ms (2026-11-27).

``FreezeSurvivors`` freezes after a full collection that took at least ``FREEZE_AFTER_MS``:
everything still tracked then moves to the permanent generation (on the loop, right after the
collection, whose survivors are live), so the next full collections walk only what was made
since. A short full collection, or a young one, changes nothing.

The price: an object frozen that later becomes garbage inside a reference cycle is never
collected (garbage without a cycle is freed by its count, as always). A freeze follows only a
full collection long enough to matter, that is a burst of long-lived objects (new queues,
topics), not the passing of time, so what can be kept that way is what was in flight at a few
such moments.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

log = logging.getLogger(__name__)

# A full collection this long (ms) is followed by a freeze: ~40,000 tracked objects' walk.
FREEZE_AFTER_MS = 10.0


class FreezeSurvivors:
    """``install`` on the daemon's loop; ``remove`` at shutdown."""

    def __init__(self, loop: asyncio.AbstractEventLoop, after_ms: float = FREEZE_AFTER_MS) -> None:
        self._loop = loop
        self._after_s = after_ms / 1000
        self._started = 0.0
        self._pending = False
        self.freezes = 0  # freezes done (tests, figures)

    def install(self) -> None:
        gc.callbacks.append(self._on_collection)

    def remove(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        # Called by the collector, in whichever thread allocated: only a note and a wake-up.
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        if took >= self._after_s and not self._pending and not self._loop.is_closed():
            self._pending = True
            try:
                self._loop.call_soon_threadsafe(self._freeze, took)
            except RuntimeError:  # the loop closed meanwhile (shutdown): nothing to freeze for
                self._pending = False

    def _freeze(self, took: float) -> None:
        self._pending = False
        before = gc.get_freeze_count()
        gc.freeze()
        self.freezes += 1
        log.info(
            "a full garbage collection took %.0f ms: froze the %d objects it left, so the "
            "next ones walk only newer objects (%d frozen in all)",
            took * 1000,
            gc.get_freeze_count() - before,
            gc.get_freeze_count(),
        )
