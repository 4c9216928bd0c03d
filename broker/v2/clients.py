"""ClientRegistry: the v2 clients the broker knows, keyed by ``x-mq-client-id``.

A client is registered by its first Telemetry settings frame or Heartbeat and remembered with
its type, consumer group, topics, last settings and whether its Telemetry stream is open.
It is dropped when its Telemetry stream ends, on NotifyClientTermination, or after
``CLIENT_TIMEOUT_S`` (120 s, RocketMQ proxy's channel expiry) without a heartbeat or settings
frame. Expiry is swept lazily: the servicer calls ``sweep_if_due()`` on every RPC, which
scans at most once per ``SWEEP_INTERVAL_S`` (10 s): no timer task. At most ``MAX_CLIENTS`` (65536) are kept: past that, the
longest silent client is dropped first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wharf.rocketmq.v2 import definition_pb2

CLIENT_TIMEOUT_S = 120.0
SWEEP_INTERVAL_S = 10.0
MAX_CLIENTS = 65536


@dataclass(slots=True)
class ClientEntry:
    client_id: str
    client_type: int = definition_pb2.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    topics: tuple[str, ...] = ()
    settings: definition_pb2.Settings | None = None
    streams: int = 0  # open Telemetry streams
    last_seen: float = field(default=0.0)
    # The newest open Telemetry stream's way out: commands the broker sends the client
    # (RecoverOrphanedTransactionCommand), as ``send(command) -> bool`` (False: not queued).
    send: Callable[[Any], bool] | None = None


class ClientRegistry:
    def __init__(
        self,
        timeout_s: float = CLIENT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._max_clients = max_clients
        # Ordered by last_seen (a touch moves the entry to the end): the sweep stops at the
        # first live one.
        self._clients: OrderedDict[str, ClientEntry] = OrderedDict()
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, client_id: str) -> ClientEntry | None:
        return self._clients.get(client_id)

    def _touch(self, client_id: str) -> ClientEntry:
        now = self._clock()
        entry = self._clients.get(client_id)
        if entry is None:
            if len(self._clients) >= self._max_clients:
                self._clients.popitem(last=False)
            entry = self._clients[client_id] = ClientEntry(client_id)
        else:
            self._clients.move_to_end(client_id)
        entry.last_seen = now
        return entry

    def on_settings(self, client_id: str, settings: definition_pb2.Settings) -> ClientEntry:
        entry = self._touch(client_id)
        entry.client_type = settings.client_type
        entry.settings = settings
        if settings.HasField("subscription"):
            entry.group = settings.subscription.group.name
            entry.topics = tuple(s.topic.name for s in settings.subscription.subscriptions)
        elif settings.HasField("publishing"):
            entry.topics = tuple(t.name for t in settings.publishing.topics)
        return entry

    def heartbeat(self, client_id: str, client_type: int, group: str) -> ClientEntry:
        entry = self._touch(client_id)
        if client_type:
            entry.client_type = client_type
        if group:
            entry.group = group
        return entry

    def stream_opened(self, client_id: str, send: Callable[[Any], bool] | None = None) -> None:
        entry = self._touch(client_id)
        entry.streams += 1
        if send is not None:
            entry.send = send

    def stream_closed(self, client_id: str, send: Callable[[Any], bool] | None = None) -> None:
        """The client's Telemetry stream ended: the client is gone (it opens a new stream and
        sends its settings again if it is not)."""
        entry = self._clients.get(client_id)
        if entry is None:
            return
        entry.streams -= 1
        if send is not None and entry.send is send:
            entry.send = None
        if entry.streams <= 0:
            del self._clients[client_id]

    def producers_of(self, topic: str) -> list[ClientEntry]:
        """Producers with an open Telemetry stream whose settings list ``topic`` (the
        check-back targets: apache.rocketmq.v2 has no producer group), newest first."""
        return [
            entry
            for entry in reversed(self._clients.values())
            if entry.send is not None
            and entry.client_type == definition_pb2.PRODUCER
            and topic in entry.topics
        ]

    def terminate(self, client_id: str) -> bool:
        """NotifyClientTermination: True when the client was known."""
        return self._clients.pop(client_id, None) is not None

    def sweep_if_due(self) -> list[str]:
        """``sweep()`` at most once per SWEEP_INTERVAL_S (cheap to call on every RPC)."""
        now = self._clock()
        return self.sweep(now) if now >= self._next_sweep else []

    def sweep(self, now: float | None = None) -> list[str]:
        """Drop clients silent for longer than the timeout; their ids. Calls that register
        or touch a client run it at most once per SWEEP_INTERVAL_S."""
        if now is None:
            now = self._clock()
        self._next_sweep = now + SWEEP_INTERVAL_S
        dropped = []
        deadline = now - self._timeout_s
        while self._clients:
            client_id, entry = next(iter(self._clients.items()))
            if entry.last_seen > deadline:
                break
            del self._clients[client_id]
            dropped.append(client_id)
        return dropped
