"""Broker metrics (Prometheus, RocketMQ 5 metric names). CONTRACT SKELETON.

The broker calls these hooks on its hot paths; they must be cheap (a counter increment, no
locks held across awaits, no file walking). Store figures are collected at scrape time from
``MessageStore.stats()`` and the broker's managers. The same object is the store's
``StoreObserver`` (on_flush, on_group_commit).

Label rules: ``topic``, ``consumer_group``, ``method``, ``status``, ``kind`` only -- never a
client id or message id (bounded cardinality).
"""

from __future__ import annotations

from typing import Any


class BrokerMetrics:
    def __init__(self) -> None:
        pass

    # --- called by the broker's processors -------------------------------------------------
    def observe_rpc(self, method: str, status: str, seconds: float) -> None:
        """One finished RPC: method name (e.g. 'SendMessage'), gRPC status name ('OK')."""

    def on_messages_in(self, topic: str, sizes: list[int]) -> None:
        """Messages stored for ``topic``; ``sizes`` are body sizes in bytes."""

    def on_messages_out(self, topic: str, consumer_group: str, count: int, nbytes: int) -> None:
        """Messages delivered by a pull."""

    def on_send_to_dlq(self, topic: str, consumer_group: str) -> None:
        """A message moved to %DLQ%<group>; ``topic`` is its original topic."""

    # --- StoreObserver -----------------------------------------------------------------------
    def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
        """kind: 'sync' | 'async' | 'cq'."""

    def on_group_commit(self, waiters: int) -> None:
        """One fdatasync served ``waiters`` put requests."""

    # --- wiring ------------------------------------------------------------------------------
    def attach(self, controller: Any) -> None:
        """Called once at start with the BrokerController, so scrape-time collectors can read
        the store's stats(), topic/group managers, consumer offsets and the long-poll holder."""

    async def serve(self, host: str, port: int) -> int:
        """Serve /metrics on host:port without blocking the event loop; returns the bound port
        (port 0 picks an ephemeral one)."""
        return port

    async def close(self) -> None:
        """Stop the metrics HTTP server."""
