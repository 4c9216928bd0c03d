"""Throughput and latency bookkeeping for the benchmarks (no numpy: sorted float lists)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


@dataclass
class Window:
    messages: int = 0
    nbytes: int = 0
    latencies_ms: list[float] = field(default_factory=list)


class BenchStats:
    """Counts messages/bytes and latencies; ``snapshot()`` closes an interval."""

    def __init__(self, max_samples: int = 2_000_000) -> None:
        self.started = time.perf_counter()
        self._interval_start = self.started
        self._total = Window()
        self._interval = Window()
        self._max_samples = max_samples
        self.errors = 0

    def restart_clock(self) -> None:
        """Measure from now (after a warm-up whose messages were not recorded)."""
        self.started = self._interval_start = time.perf_counter()

    def record(self, messages: int, nbytes: int, latency_ms: float | None = None) -> None:
        self._total.messages += messages
        self._total.nbytes += nbytes
        self._interval.messages += messages
        self._interval.nbytes += nbytes
        if latency_ms is not None:
            self._interval.latencies_ms.append(latency_ms)
            if len(self._total.latencies_ms) < self._max_samples:
                self._total.latencies_ms.append(latency_ms)

    def record_latencies(self, latencies_ms: list[float]) -> None:
        self._interval.latencies_ms.extend(latencies_ms)
        room = self._max_samples - len(self._total.latencies_ms)
        if room > 0:
            self._total.latencies_ms.extend(latencies_ms[:room])

    @property
    def messages(self) -> int:
        return self._total.messages

    def snapshot(self) -> dict[str, float]:
        now = time.perf_counter()
        figures = _figures(self._interval, now - self._interval_start)
        figures["elapsed_s"] = round(now - self.started, 2)
        self._interval = Window()
        self._interval_start = now
        return figures

    def summary(self) -> dict[str, float]:
        figures = _figures(self._total, time.perf_counter() - self.started)
        figures["errors"] = self.errors
        return figures


def _figures(window: Window, seconds: float) -> dict[str, float]:
    seconds = max(seconds, 1e-9)
    lat = sorted(window.latencies_ms)
    return {
        "messages": window.messages,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(window.messages / seconds, 1),
        "mb_per_s": round(window.nbytes / seconds / 1e6, 2),
        "p50_ms": round(percentile(lat, 0.50), 3),
        "p99_ms": round(percentile(lat, 0.99), 3),
        "p999_ms": round(percentile(lat, 0.999), 3),
        "max_ms": round(lat[-1], 3) if lat else 0.0,
    }
