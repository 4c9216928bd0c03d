"""Per-topic and per-group rates from counters the console has seen before.

A topic's throughput is the growth of the sum of its queues' max offsets (messages written), a
group's consume TPS the growth of the sum of its committed offsets, divided by the seconds
between two page views. ``CounterRates.observe`` keeps, per key, the last sample at least
``min_gap_s`` (1 s) old, so reloading a page quickly still compares with an older sample;
samples older than ``max_age_s`` (600 s) give no rate (``None``, shown as "-"): the first view of
a page after a while shows "-" until the next one. At most ``max_keys`` (200,000) keys are kept;
past that the oldest half is dropped. Counters that went backwards (a reset, a restart) give
no rate.
"""

from __future__ import annotations

import time


class CounterRates:
    def __init__(
        self, *, min_gap_s: float = 1.0, max_age_s: float = 600.0, max_keys: int = 200_000
    ) -> None:
        self.min_gap_s = min_gap_s
        self.max_age_s = max_age_s
        self.max_keys = max_keys
        # key -> (older sample, newest sample); a sample is (time, value)
        self._samples: dict[object, tuple[tuple[float, int], tuple[float, int]]] = {}

    def observe(self, key: object, value: int, now: float | None = None) -> float | None:
        """Record ``value`` for ``key`` and return the rate per second since the reference
        sample (None when there is none young enough, or the counter went backwards)."""
        now = time.monotonic() if now is None else now
        entry = self._samples.get(key)
        if entry is None:
            if len(self._samples) >= self.max_keys:
                for old in list(self._samples)[: self.max_keys // 2]:
                    del self._samples[old]
            self._samples[key] = ((now, value), (now, value))
            return None
        reference, newest = entry
        if now - newest[0] >= self.min_gap_s:
            reference = newest  # the newest becomes the reference once it is old enough
        self._samples[key] = (reference, (now, value))
        seconds = now - reference[0]
        if seconds < self.min_gap_s or seconds > self.max_age_s or value < reference[1]:
            return None
        return round((value - reference[1]) / seconds, 1)
