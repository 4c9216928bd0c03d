"""ClientRegistry: the one registry of the clients the broker knows, for every front end.

In memory only, as RocketMQ's ConsumerManager / ProducerManager and the RocketMQ 5 proxy's
client channels:

- Membership (wharf.v1 and remoting heartbeats): which clients are online in which consumer
  group, with their subscriptions, and which in which producer group. Each consumer group has
  a version that changes whenever its membership changes, so clients rebalance at once.
- Sessions: one per client id, with its kind, group and topics (v2 settings or heartbeats) and
  its way back to the client: v2's ``send`` (the newest open Telemetry stream's way out, for
  transaction check-backs), remoting's ``connection`` (the one it last heartbeat on, for
  NOTIFY_CONSUMER_IDS_CHANGED and check-backs; ``attach`` / ``detach``). A session ends when its
  last channel closes, on termination, or by expiry. At most ``max_sessions`` (65536) are
  kept: past that, the longest silent one is dropped first.
- Expiry, one scheme for all: a member, a producer or a session silent for longer than
  ``expire_after_s`` (channelExpiredTimeout, 120 s: clients heartbeat every ~30 s) is dropped
  by ``expire()``, which the ClientExpiry part runs every 10 s (``core/background.py``).

It speaks neutral values (``ClientKind``, ``MessageModel``, ``ConsumeFrom``, strings, a ``send``
callable): each front end maps its protocol's client types and settings onto them at its edge. A front end whose groups live elsewhere (Kafka's
coordinator) lends a ``MembershipView``: a group's online count and subscribed topics then
include its members, as ``wharf group progress`` and the console show them.
"""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from wharf.broker.errors import PermissionDeniedError
from wharf.broker.kit.acl.caller import ANYONE, Caller

CLIENT_TIMEOUT_S = 120.0  # channelExpiredTimeout's default (RocketMQ's 2 min)
MAX_SESSIONS = 65536

# A server-to-client channel: sends one command in the client's protocol; False: not queued.
Send = Callable[[Any], bool]


class MembershipView(Protocol):
    """Members a front end keeps itself (Kafka's group coordinator)."""

    def online(self, group: str) -> int: ...

    def topics(self, group: str) -> set[str]: ...


class ClientKind(enum.Enum):
    UNKNOWN = "unknown"  # announced no type yet
    PRODUCER = "producer"
    CONSUMER = "consumer"


class MessageModel(enum.Enum):
    """How a consumer group shares a topic (RocketMQ's names as values)."""

    CLUSTERING = "CLUSTERING"  # each message to one member of the group
    BROADCASTING = "BROADCASTING"  # each message to every member


class ConsumeFrom(enum.Enum):
    """Where a consumer without a committed offset starts (RocketMQ's names as values)."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


@dataclass(slots=True)
class ConsumerClient:
    """A member of a consumer group (from heartbeats)."""

    client_id: str
    last_seen: float  # the registry's clock (time.monotonic)
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> tag expression
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFrom = ConsumeFrom.LAST_OFFSET
    owner: str = ""  # the account that registered it (aclEnable), "" without ACL


@dataclass(slots=True)
class Session:
    """A client known by its id, with its channel back (apache.rocketmq.v2)."""

    client_id: str
    kind: ClientKind = ClientKind.UNKNOWN
    group: str = ""
    topics: tuple[str, ...] = ()
    channels: int = 0  # open channels (Telemetry streams)
    last_seen: float = 0.0
    send: Send | None = None  # the newest open channel's way out
    # A front end's own handle of the connection the client last spoke on (remoting's
    # Connection: NOTIFY_CONSUMER_IDS_CHANGED, check-backs, the connection list), opaque here.
    connection: Any = None
    owner: str = ""  # the account that registered it (aclEnable), "" without ACL


class ClientRegistry:
    def __init__(
        self,
        expire_after_s: float = CLIENT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.expire_after_s = expire_after_s
        self._clock = clock
        self._max_sessions = max_sessions
        self.groups: dict[str, dict[str, ConsumerClient]] = {}
        self.versions: dict[str, int] = {}
        self.producers: dict[str, dict[str, float]] = {}  # producer group -> client -> seen
        # Ordered by last_seen (a touch moves the entry to the end): expiry stops at the first
        # live one, and the bound drops the longest silent.
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self.views: list[MembershipView] = []  # add_view / remove_view

    # --- membership ---------------------------------------------------------------------------
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
        message_model: MessageModel,
        consume_from_where: ConsumeFrom,
        now: float | None = None,
        caller: Caller = ANYONE,
    ) -> int:
        """Record a consumer's heartbeat; returns the group's membership version. A client id
        another account registered is refused (it would take over its queues)."""
        now = self._clock() if now is None else now
        client = self.groups.get(group, {}).get(client_id)
        if client is not None:  # checked before the group is made: a refusal creates nothing
            _check_owner(caller, client.owner, client_id)
        members = self.groups.setdefault(group, {})
        if client is None:
            members[client_id] = ConsumerClient(
                client_id, now, subscriptions, message_model, consume_from_where, caller.name
            )
            return self._bump(group)
        client.last_seen = now
        client.subscriptions = subscriptions
        client.message_model = message_model
        client.consume_from_where = consume_from_where
        return self.versions[group]

    def producer_heartbeat(self, client_id: str, group: str, now: float | None = None) -> None:
        self.producers.setdefault(group, {})[client_id] = self._clock() if now is None else now

    def unregister(
        self,
        client_id: str,
        groups: list[str],
        producer_groups: list[str],
        caller: Caller = ANYONE,
    ) -> None:
        """The client leaves these groups; refused (nothing removed) when another account
        registered it in one of them."""
        for group in groups:
            client = self.groups.get(group, {}).get(client_id)
            if client is not None:
                _check_owner(caller, client.owner, client_id)
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

    def add_view(self, view: MembershipView) -> None:
        self.views.append(view)

    def remove_view(self, view: MembershipView) -> None:
        if view in self.views:
            self.views.remove(view)

    def online_count(self, group: str) -> int:
        """The group's members online: heartbeating clients and every view's."""
        return len(self.groups.get(group, {})) + sum(v.online(group) for v in self.views)

    def subscribed_topics(self, group: str) -> set[str]:
        topics = {t for c in self.groups.get(group, {}).values() for t in c.subscriptions}
        for view in self.views:
            topics |= view.topics(group)
        return topics

    # --- sessions -----------------------------------------------------------------------------
    def __len__(self) -> int:
        """Sessions known."""
        return len(self._sessions)

    def get(self, client_id: str) -> Session | None:
        return self._sessions.get(client_id)

    def touch(
        self,
        client_id: str,
        kind: ClientKind = ClientKind.UNKNOWN,
        group: str = "",
        topics: tuple[str, ...] | None = None,
        caller: Caller = ANYONE,
    ) -> Session:
        """A session's settings or heartbeat: registers it (or keeps it alive); a known
        ``kind``, a ``group`` and ``topics`` (None: unchanged) replace what it had. A client id
        another account registered is refused."""
        now = self._clock()
        session = self._sessions.get(client_id)
        if session is None:
            if len(self._sessions) >= self._max_sessions:
                self._sessions.popitem(last=False)
            session = self._sessions[client_id] = Session(client_id, owner=caller.name)
        else:
            _check_owner(caller, session.owner, client_id)
            if not session.owner:  # made by a channel's opening, before its first settings
                session.owner = caller.name
            self._sessions.move_to_end(client_id)
        session.last_seen = now
        if kind is not ClientKind.UNKNOWN:
            session.kind = kind
        if group:
            session.group = group
        if topics is not None:
            session.topics = topics
        return session

    def channel_opened(self, client_id: str, send: Send | None = None) -> None:
        session = self.touch(client_id)
        session.channels += 1
        if send is not None:
            session.send = send

    def channel_closed(self, client_id: str, send: Send | None = None) -> None:
        """A channel ended; with its last one the client is gone (it opens a new one and
        announces itself again if it is not)."""
        session = self._sessions.get(client_id)
        if session is None:
            return
        session.channels -= 1
        if send is not None and session.send is send:
            session.send = None
        if session.channels <= 0:
            del self._sessions[client_id]

    def attach(self, client_id: str, connection: Any) -> None:
        """The client spoke on ``connection`` (a heartbeat): its session keeps it as the way
        back to the client, replacing an older one."""
        self.touch(client_id).connection = connection

    def connection_of(self, client_id: str) -> Any:
        """The connection the client last spoke on, or None (unknown, expired, detached)."""
        session = self._sessions.get(client_id)
        return None if session is None else session.connection

    def detach(self, client_id: str, connection: Any) -> bool:
        """``connection`` closed: the client's session ends if it was the client's last one
        (True); False when the client has moved to another connection meanwhile."""
        session = self._sessions.get(client_id)
        if session is None or session.connection is not connection:
            return False
        del self._sessions[client_id]
        return True

    def terminate(self, client_id: str, caller: Caller = ANYONE) -> bool:
        """The client said it stops: True when it was known. Refused for another account's."""
        session = self._sessions.get(client_id)
        if session is None:
            return False
        _check_owner(caller, session.owner, client_id)
        del self._sessions[client_id]
        return True

    def producers_on(self, topic: str) -> list[Session]:
        """Producer sessions with an open channel whose topics list ``topic`` (the check-back
        targets where the protocol has no producer group), newest first."""
        return [
            session
            for session in reversed(self._sessions.values())
            if session.send is not None
            and session.kind is ClientKind.PRODUCER
            and topic in session.topics
        ]

    # --- expiry -------------------------------------------------------------------------------
    def expire(self, now: float | None = None) -> list[tuple[str, str]]:
        """Drop members, producers and sessions silent for longer than the expiry; returns
        (group, client id) of the members and sessions dropped (a session's group may be "")."""
        now = self._clock() if now is None else now
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
        sessions = self._sessions
        while sessions:
            client_id, session = next(iter(sessions.items()))
            if session.last_seen >= deadline:
                break
            del sessions[client_id]
            dropped.append((session.group, client_id))
        return dropped


def _check_owner(caller: Caller, owner: str, client_id: str) -> None:
    if not caller.may_act_for(owner):
        raise PermissionDeniedError(
            f"user {caller.name!r} may not act for client {client_id!r}: "
            "another account registered it"
        )
