"""The broker's background parts over its tables, each a ``store.service.Service`` (a named
loop with start, stop and failure accounting for health) the controller only starts and stops.

- ``ClientExpiry``: clients that stopped heartbeating leave their groups and sessions end (every
  10 s; the registry's one expiry, ``core/clients.py``).
- ``PopProgress``: pop consumers' progress becomes committed offsets (every 1 s; RocketMQ's pop
  commits the consumer offset too), so replicas follow it and, after a failover, the new
  master's pop starts where this one's had finished, not at the queue's oldest message; never
  lowers an offset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from wharf.store import Service
from wharf.store.errors import StoreError

log = logging.getLogger("broker")

CLIENT_EXPIRY_SCAN_S = 10.0
# How often pop progress becomes committed offsets (and so reaches replicas, whose metadata is
# checked every second): a master elected after a failover re-delivers at most about this
# long's acknowledgements, plus what was in flight.
POP_PROGRESS_S = 1.0


class Expiring(Protocol):
    def expire(self) -> Iterable[tuple[str, str]]: ...


class ClientExpiry(Service):
    def __init__(self, clients: Expiring, interval_s: float = CLIENT_EXPIRY_SCAN_S) -> None:
        super().__init__("ClientExpiry", interval_s)
        self.clients = clients

    async def run_once(self) -> None:
        for group, client in self.clients.expire():
            log.info("client %s left%s (no heartbeat)", client, f" group {group}" if group else "")


class PopSource(Protocol):
    def progress(self) -> Iterable[tuple[str, str, int, int]]: ...


class Offsets(Protocol):
    def query(self, group: str, topic: str, queue_id: int) -> int: ...

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...


class PopProgress(Service):
    def __init__(
        self,
        pop: Callable[[], PopSource],
        offsets: Offsets,
        interval_s: float = POP_PROGRESS_S,
    ) -> None:
        """``pop()``: the store's pop service (StoreError on a replica or before start)."""
        super().__init__("PopProgress", interval_s)
        self.pop = pop
        self.offsets = offsets

    async def run_once(self) -> None:
        try:
            pop = self.pop()
        except StoreError:  # a replica, or not started: no pop served here
            return
        offsets = self.offsets
        for group, topic, queue_id, offset in pop.progress():
            if offset > offsets.query(group, topic, queue_id):
                offsets.commit(group, topic, queue_id, offset)
