"""The store's flush observer: the hooks the broker's metrics implement (the store imports no
prometheus), and ``FlushTally``, which counts flushes for ``MessageStore.stats()`` on the way.

The facade wraps the broker's observer in one FlushTally at construction and hands that to every
flushing part (commit log, queue flush service), so ``stats()`` sees the same counts the broker's
metrics do. It sits in the store's base layer: any part may report to it.
"""

from __future__ import annotations

from typing import Protocol


class StoreObserver(Protocol):
    """Hooks the broker's metrics implement (the store imports no prometheus)."""

    def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
        """kind: 'sync' (group commit), 'async' (FlushRealTimeService), 'cq' (queues/index)."""

    def on_group_commit(self, waiters: int) -> None:
        """One group commit served ``waiters`` put requests with a single fdatasync."""

    def on_unconsumed_deleted(self, topic: str, consumer_group: str, count: int) -> None:
        """Retention deleted ``count`` messages of ``topic`` that ``consumer_group`` had not
        consumed yet (``consumer_group`` is "" for a topic no group has committed on)."""


class FlushTally:
    """Counts flushes for ``stats()`` and forwards to the broker's observer."""

    def __init__(self, observer: StoreObserver | None) -> None:
        self.observer = observer
        self.flush_count = 0
        self.last_flush_seconds = 0.0

    def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
        self.flush_count += 1
        self.last_flush_seconds = seconds
        if self.observer is not None:
            self.observer.on_flush(kind, seconds, nbytes)

    def on_group_commit(self, waiters: int) -> None:
        if self.observer is not None:
            self.observer.on_group_commit(waiters)

    def on_unconsumed_deleted(self, topic: str, consumer_group: str, count: int) -> None:
        hook = getattr(self.observer, "on_unconsumed_deleted", None)  # optional for test fakes
        if hook is not None:
            hook(topic, consumer_group, count)
