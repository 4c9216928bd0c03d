"""The group coordinator of Kafka's classic rebalance protocol, membership in memory.

States (Kafka's names): Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to
PreparingRebalance whenever a member joins, leaves, changes its protocols or is expired.

- JoinGroup: a first join with an empty member id gets an id ``<client id>-<uuid>``; from v4
  it is answered MEMBER_ID_REQUIRED with that id at once and must join again with it
  (KIP-394), otherwise it joins directly. A join starts (or joins) a rebalance; the rebalance
  completes when every known member has rejoined (and no KIP-394 id is outstanding) or when
  the longest rebalance timeout of the members passes, dropping those that did not rejoin.
  Completing bumps the generation, picks the protocol every member supports (by vote of
  their preference order), keeps the leader if it stayed (else the first member), answers
  every waiting join, and hands all members' metadata to the leader only.
- A group forming from Empty waits ``initial_delay_ms`` first (Kafka's
  group.initial.rebalance.delay.ms, kafkaGroupInitialRebalanceDelayMs, 3 s): consumers started
  together form one generation, not one per arrival, and the leader has fetched the topics'
  metadata before it assigns. Each member added during the wait extends it by the delay, up to
  the longest rebalance timeout; then the rebalance completes as any other (all joined, no
  KIP-394 id outstanding, or the rebalance timeout).
- SyncGroup: the leader's assignments are handed to every member (opaque bytes); the others
  wait for them.
- Heartbeat: REBALANCE_IN_PROGRESS while a rebalance waits for rejoins; a member silent for its
  session timeout is removed (checked every ``SWEEP_S``), as is a KIP-394 id not used within
  it. OffsetCommit counts as a heartbeat.
- A member joining with a protocol type or protocols the group cannot share is refused
  INCONSISTENT_GROUP_PROTOCOL.
- Nothing survives a restart: members rejoin (UNKNOWN_MEMBER_ID) and resume from the
  committed offsets, which do survive (ConsumerOffsetManager).
- The broker's client registry sees the members through ``online`` and ``topics`` (a
  ``MembershipView``): a Kafka group's progress shows its members online and the topics of
  their "consumer" protocol subscriptions, as a RocketMQ group's does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.wire import DecodeError, Reader

__all__ = ["Coordinator", "Group", "Member", "subscribed_topics"]

SWEEP_S = 0.25
MIN_SESSION_TIMEOUT_MS = 1_000  # Kafka's group.min.session.timeout.ms is 6000; tests use less
MAX_SESSION_TIMEOUT_MS = 30 * 60_000  # Kafka's group.max.session.timeout.ms

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    group_instance_id: str | None = None
    assignment: bytes = b""
    last_seen: float = field(default_factory=time.monotonic)
    join: asyncio.Future[dict[str, Any]] | None = None
    sync: asyncio.Future[tuple[Code, bytes]] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")


@dataclass(slots=True)
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # KIP-394 id -> expiry
    timer: asyncio.TimerHandle | None = None
    forming: bool = False  # in the initial delay: only its timer completes the rebalance
    newcomer: bool = False  # a member was added during the current delay window


class Coordinator:
    def __init__(self, initial_delay_ms: int = 0) -> None:
        self.groups: dict[str, Group] = {}
        self.initial_delay_ms = initial_delay_ms
        self._sweeper: asyncio.Task[None] | None = None

    # --- life -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for group in self.groups.values():
            for member in list(group.members.values()):
                self._release(member, Code.NOT_COORDINATOR)
            if group.timer is not None:
                group.timer.cancel()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            self.expire(time.monotonic())

    # --- the registry's view (core.clients.MembershipView) ----------------------------------------
    def online(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        return len(group.members) if group is not None else 0

    def topics(self, group_id: str) -> set[str]:
        """The topics the members subscribe to: the ``consumer`` protocol's subscription
        (version, then its topic names) of the group's protocol, or of the member's first."""
        group = self.groups.get(group_id)
        if group is None or group.protocol_type != "consumer":
            return set()
        out: set[str] = set()
        for member in group.members.values():
            metadata = member.metadata_for(group.protocol) if group.protocol else b""
            if not metadata and member.protocols:
                metadata = member.protocols[0][1]
            out |= subscribed_topics(metadata)
        return out

    def forget(self, group_id: str) -> bool:
        """DeleteGroups: drop a group with no member and no KIP-394 id outstanding (its
        generation and timer go); False when it has either (NON_EMPTY_GROUP)."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members or group.pending:
            return False
        if group.timer is not None:
            group.timer.cancel()
        del self.groups[group_id]
        return True

    # --- requests -------------------------------------------------------------------------------
    async def join(self, group_id: str, member: Member, member_id_required: bool) -> dict[str, Any]:
        if not MIN_SESSION_TIMEOUT_MS <= member.session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise KafkaError(
                Code.INVALID_SESSION_TIMEOUT,
                f"session timeout {member.session_timeout_ms} ms is outside "
                f"[{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}]",
            )
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        if group.members and not self._compatible(group, member):
            raise KafkaError(Code.INCONSISTENT_GROUP_PROTOCOL)
        now = time.monotonic()
        if not member.member_id:
            member.member_id = f"{member.client_id or 'member'}-{uuid.uuid4()}"
            if member_id_required:
                group.pending[member.member_id] = now + member.session_timeout_ms / 1000
                return _join_reply(Code.MEMBER_ID_REQUIRED, member_id=member.member_id)
            return await self._add_and_wait(group, member)
        if group.pending.pop(member.member_id, None) is not None:
            return await self._add_and_wait(group, member)
        current = group.members.get(member.member_id)
        if current is None:
            raise KafkaError(Code.UNKNOWN_MEMBER_ID)
        changed = current.protocols != member.protocols
        current.protocols = member.protocols
        current.session_timeout_ms = member.session_timeout_ms
        current.rebalance_timeout_ms = member.rebalance_timeout_ms
        current.last_seen = now
        if (
            group.state in (STABLE, COMPLETING)
            and not changed
            and current.member_id != group.leader
        ):
            return self._reply_for(group, current)  # a resent join: this generation again
        if group.state != PREPARING:
            self._prepare(group)
        return await self._wait_join(group, current)

    async def sync(
        self, group_id: str, generation: int, member_id: str, assignments: dict[str, bytes]
    ) -> tuple[Code, bytes]:
        group, member = self._member(group_id, member_id)
        if generation != group.generation:
            return Code.ILLEGAL_GENERATION, b""
        member.last_seen = time.monotonic()
        if group.state == PREPARING:
            return Code.REBALANCE_IN_PROGRESS, b""
        if group.state == STABLE:
            return Code.NONE, member.assignment
        member.sync = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            for other in group.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            group.state = STABLE
            for other in group.members.values():
                if other.sync is not None and not other.sync.done():
                    other.sync.set_result((Code.NONE, other.assignment))
                other.sync = None
            return Code.NONE, member.assignment
        return await member.sync

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> Code:
        group, member = self._member(group_id, member_id)
        member.last_seen = time.monotonic()
        if generation != group.generation:
            return Code.ILLEGAL_GENERATION
        if group.state == PREPARING:
            return Code.REBALANCE_IN_PROGRESS
        return Code.NONE

    def leave(self, group_id: str, member_id: str) -> Code:
        group = self.groups.get(group_id)
        if group is None:
            return Code.UNKNOWN_MEMBER_ID
        if group.pending.pop(member_id, None) is not None:
            return Code.NONE
        member = group.members.get(member_id)
        if member is None:
            return Code.UNKNOWN_MEMBER_ID
        self._remove(group, member)
        return Code.NONE

    def check_commit(self, group_id: str, generation: int, member_id: str) -> Code:
        """May this commit go through (generation and member checks)?"""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return Code.NONE if generation < 0 else Code.ILLEGAL_GENERATION
        member = group.members.get(member_id)
        if member is None:
            return Code.UNKNOWN_MEMBER_ID
        member.last_seen = time.monotonic()
        if generation != group.generation:
            return Code.ILLEGAL_GENERATION
        if group.state == COMPLETING:
            return Code.REBALANCE_IN_PROGRESS
        return Code.NONE

    def expire(self, now: float) -> None:
        """Drop members silent past their session timeout and unused KIP-394 ids."""
        for group in list(self.groups.values()):
            for member_id, expiry in list(group.pending.items()):
                if now > expiry:
                    del group.pending[member_id]
                    self._try_complete(group)
            for member in list(group.members.values()):
                waiting = member.join is not None and not member.join.done()
                if not waiting and now > member.last_seen + member.session_timeout_ms / 1000:
                    self._remove(group, member)

    # --- the state machine ----------------------------------------------------------------------
    def _member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            raise KafkaError(Code.UNKNOWN_MEMBER_ID)
        return group, member

    def _compatible(self, group: Group, member: Member) -> bool:
        if member.protocol_type != group.protocol_type:
            return False
        names = {name for name, _ in member.protocols}
        for other in group.members.values():
            if other.member_id != member.member_id:
                names &= {name for name, _ in other.protocols}
        return bool(names)

    async def _add_and_wait(self, group: Group, member: Member) -> dict[str, Any]:
        if not group.members:
            group.protocol_type = member.protocol_type
        group.members[member.member_id] = member
        group.newcomer = True
        if group.state != PREPARING:
            self._prepare(group)
        return await self._wait_join(group, member)

    async def _wait_join(self, group: Group, member: Member) -> dict[str, Any]:
        if member.join is not None and not member.join.done():  # a second join replaces it
            member.join.set_result(_join_reply(Code.REBALANCE_IN_PROGRESS, member.member_id))
        future = member.join = asyncio.get_running_loop().create_future()
        self._try_complete(group)
        return await future

    def _prepare(self, group: Group) -> None:
        for member in group.members.values():  # members waiting for the leader's sync
            if member.sync is not None and not member.sync.done():
                member.sync.set_result((Code.REBALANCE_IN_PROGRESS, b""))
            member.sync = None
        from_empty = group.state == EMPTY
        group.state = PREPARING
        if group.timer is not None:
            group.timer.cancel()
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if from_empty and self.initial_delay_ms > 0:
            group.forming = True
            self._delay_window(group, max(timeout_ms, 0))
            return
        group.timer = asyncio.get_running_loop().call_later(
            max(timeout_ms, 0) / 1000, self._rebalance_timeout, group
        )

    def _delay_window(self, group: Group, budget_ms: int) -> None:
        """One window of the initial delay, within ``budget_ms`` of the rebalance timeout."""
        group.newcomer = False
        delay = min(self.initial_delay_ms, budget_ms)
        group.timer = asyncio.get_running_loop().call_later(
            delay / 1000, self._initial_delay_over, group, budget_ms - delay
        )

    def _initial_delay_over(self, group: Group, remaining_ms: int) -> None:
        """The initial delay's window closed: another window if a member came during it and
        the rebalance timeout leaves room, else the rebalance completes as any other."""
        group.timer = None
        if group.state != PREPARING or not group.forming:
            return
        if group.newcomer and remaining_ms > 0:
            self._delay_window(group, remaining_ms)
            return
        group.forming = False
        group.timer = asyncio.get_running_loop().call_later(
            remaining_ms / 1000, self._rebalance_timeout, group
        )
        self._try_complete(group)

    def _rebalance_timeout(self, group: Group) -> None:
        group.timer = None
        if group.state != PREPARING:
            return
        for member in list(group.members.values()):
            if member.join is None or member.join.done():
                del group.members[member.member_id]
                self._release(member, Code.UNKNOWN_MEMBER_ID)
        group.pending.clear()
        self._complete(group)

    def _try_complete(self, group: Group) -> None:
        if group.state != PREPARING or group.pending or group.forming:
            return
        if all(m.join is not None and not m.join.done() for m in group.members.values()):
            self._complete(group)

    def _complete(self, group: Group) -> None:
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        group.generation += 1
        group.forming = group.newcomer = False
        if not group.members:
            group.state, group.protocol, group.leader, group.protocol_type = EMPTY, "", "", ""
            return
        group.protocol = _vote(list(group.members.values()))
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING
        now = time.monotonic()
        for member in group.members.values():
            member.last_seen = now
            if member.join is not None and not member.join.done():
                member.join.set_result(self._reply_for(group, member))
            member.join = None

    def _reply_for(self, group: Group, member: Member) -> dict[str, Any]:
        members = []
        if member.member_id == group.leader:
            members = [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata_for(group.protocol),
                }
                for m in group.members.values()
            ]
        return {
            "error_code": 0,
            "generation_id": group.generation,
            "protocol_name": group.protocol,
            "leader": group.leader,
            "member_id": member.member_id,
            "members": members,
        }

    def _remove(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        self._release(member, Code.UNKNOWN_MEMBER_ID)
        if group.state in (STABLE, COMPLETING) or (group.state == EMPTY and group.members):
            self._prepare(group)
        if not group.members and group.state == PREPARING:
            self._complete(group)
        else:
            self._try_complete(group)

    def _release(self, member: Member, code: Code) -> None:
        if member.join is not None and not member.join.done():
            member.join.set_result(_join_reply(code, member.member_id))
        if member.sync is not None and not member.sync.done():
            member.sync.set_result((code, b""))
        member.join = member.sync = None


def _join_reply(code: Code, member_id: str = "") -> dict[str, Any]:
    return {
        "error_code": code,
        "generation_id": -1,
        "protocol_name": "",
        "leader": "",
        "member_id": member_id,
        "members": [],
    }


def _vote(members: list[Member]) -> str:
    """The protocol every member supports that most members list first among those."""
    common = set.intersection(*({name for name, _ in m.protocols} for m in members))
    if not common:  # (joins are checked against the group: only a member's own list is left)
        return members[0].protocols[0][0] if members[0].protocols else ""
    votes: Counter[str] = Counter()
    for m in members:
        votes[next(name for name, _ in m.protocols if name in common)] += 1
    return votes.most_common(1)[0][0]


def subscribed_topics(metadata: bytes) -> set[str]:
    """The topic names of a ConsumerProtocolSubscription (every version starts with int16
    version, then an array of strings); none when it does not parse (a client's own format)."""
    reader = Reader(metadata)
    try:
        reader.int16()
        count = reader.int32()
        if count < 0 or count > reader.remaining // 2:
            return set()
        return {reader.string() for _ in range(count)}
    except DecodeError:
        return set()
