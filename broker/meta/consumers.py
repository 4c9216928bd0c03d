"""ConsumerManager: which clients are online in which consumer group (from heartbeats).

In memory only, as RocketMQ's ConsumerManager: clients re-announce themselves every ~30 s and
are dropped after channelExpiredTimeout (120 s) without a heartbeat. Each group has a version
that changes whenever its membership changes, so clients know to rebalance at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class ConsumerClient:
    client_id: str
    last_seen: float  # time.monotonic()
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> tag expression
    message_model: int = 0
    consume_from_where: int = 0


class ConsumerManager:
    def __init__(self, expire_after_s: float) -> None:
        self.expire_after_s = expire_after_s
        self.groups: dict[str, dict[str, ConsumerClient]] = {}
        self.versions: dict[str, int] = {}
        self.producers: dict[str, dict[str, float]] = {}  # producer group -> client -> seen

    def _bump(self, group: str) -> int:
        # Wall-clock based so a restarted broker never hands out an old version again.
        version = max(self.versions.get(group, 0) + 1, time.time_ns() // 1_000_000)
        self.versions[group] = version
        return version

    def heartbeat(
        self,
        client_id: str,
        group: str,
        subscriptions: dict[str, str],
        message_model: int,
        consume_from_where: int,
        now: float | None = None,
    ) -> int:
        """Record a heartbeat; returns the group's membership version."""
        now = time.monotonic() if now is None else now
        members = self.groups.setdefault(group, {})
        client = members.get(client_id)
        if client is None:
            members[client_id] = ConsumerClient(
                client_id, now, subscriptions, message_model, consume_from_where
            )
            return self._bump(group)
        client.last_seen = now
        client.subscriptions = subscriptions
        client.message_model = message_model
        client.consume_from_where = consume_from_where
        return self.versions[group]

    def producer_heartbeat(self, client_id: str, group: str, now: float | None = None) -> None:
        self.producers.setdefault(group, {})[client_id] = time.monotonic() if now is None else now

    def unregister(self, client_id: str, groups: list[str], producer_groups: list[str]) -> None:
        for group in groups:
            members = self.groups.get(group)
            if members is not None and members.pop(client_id, None) is not None:
                self._bump(group)
                if not members:
                    del self.groups[group]
        for group in producer_groups:
            self.producers.get(group, {}).pop(client_id, None)

    def groups_of(self, client_id: str) -> tuple[list[str], list[str]]:
        """(consumer groups, producer groups) ``client_id`` is a member of."""
        return (
            [g for g, members in self.groups.items() if client_id in members],
            [g for g, clients in self.producers.items() if client_id in clients],
        )

    def members(self, group: str) -> tuple[list[str], int]:
        """(sorted client ids, version) of a group."""
        return sorted(self.groups.get(group, {})), self.versions.get(group, 0)

    def online_count(self, group: str) -> int:
        return len(self.groups.get(group, {}))

    def subscribed_topics(self, group: str) -> set[str]:
        return {t for c in self.groups.get(group, {}).values() for t in c.subscriptions}

    def expire(self, now: float | None = None) -> list[tuple[str, str]]:
        """Drop clients silent for longer than the expiry; returns (group, client) dropped."""
        now = time.monotonic() if now is None else now
        deadline = now - self.expire_after_s
        dropped = []
        for group, members in list(self.groups.items()):
            stale = [cid for cid, c in members.items() if c.last_seen < deadline]
            for cid in stale:
                del members[cid]
                dropped.append((group, cid))
            if stale:
                self._bump(group)
                if not members:
                    del self.groups[group]
        for producers in self.producers.values():
            for cid in [cid for cid, seen in producers.items() if seen < deadline]:
                del producers[cid]
        return dropped
