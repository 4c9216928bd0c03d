"""``StoreHost``: the one view of the store the message services (delay levels, timers,
transactions) get. The facade provides it structurally (nothing here imports it): a service
reads ConsumeQueue units and records, waits for dispatch and re-puts through these calls. The
walk of the log at start for the records that closed a ledger's entries is a named callable
its ``load_blocking`` gets (``read.lookups.marks_since`` over the commit log)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from wharf.store.model import MessageInput, PutResult, StoredMessage
from wharf.store.queue.consume_queue import Unit

__all__ = ["StoreHost"]


class StoreHost(Protocol):
    def get_min_offset(self, topic: str, queue_id: int) -> int: ...

    def read_consume_queue(
        self, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[Unit]: ...

    def look_message_by_offset(self, commit_log_offset: int) -> StoredMessage | None: ...

    def commit_log_end(self) -> int: ...

    async def wait_dispatched(self, timeout_s: float = 5.0) -> bool: ...

    async def put(
        self, topic: str, queue_id: int, messages: Sequence[MessageInput]
    ) -> PutResult: ...
