"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and ListGroups: the wire side of
``coordinator.py``.

A group id in use by RocketMQ-style consumers (members in the broker's client registry:
wharf.v1, apache.rocketmq.v2 or remoting consumers) is refused INCONSISTENT_GROUP_PROTOCOL:
the two rebalance models cannot share members, and every client reports that code as "the
group's protocol is inconsistent" (GROUP_AUTHORIZATION_FAILED would send the operator looking
at ACLs). The same refusal meets a commit to such a group (offsets.py). A Kafka group is
registered as a subscription group (the port's ``group_for_use``, when
autoCreateSubscriptionGroup is on) so ``wharf group`` commands list it.

ListGroups names the coordinator's groups and every group with committed offsets (protocol
type "" for those without members, as Kafka lists simple groups).

ACL: SUB on the group for all but DescribeGroups and ListGroups (admin). In a cluster,
JoinGroup, SyncGroup, Heartbeat and LeaveGroup (and the offset requests) sent to another
broker than the group's coordinator answer NOT_COORDINATOR.
"""

from __future__ import annotations

import contextlib
from typing import Any

from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.frontends.kafka.coordinator import DEAD, EMPTY, Coordinator, Member
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Perm
from wharf.broker.meta.groups import validate_group_name

__all__ = ["GroupHandlers", "check_coordinated", "check_group"]


def check_group(env: KafkaEnv, conn: KafkaConnection, group_id: str) -> None:
    """KafkaError unless ``group_id`` may be used by a Kafka client on ``conn``."""
    if not group_id:
        raise KafkaError(Code.INVALID_GROUP_ID, "the group id is empty")
    try:
        validate_group_name(group_id)
    except InvalidArgumentError as exc:
        raise KafkaError(Code.INVALID_GROUP_ID, str(exc)) from None
    if not env.allowed(conn, "group", group_id, Perm.SUB):
        raise KafkaError(Code.GROUP_AUTHORIZATION_FAILED)
    ids, _ = env.ctx.port.clients.members(group_id)
    if ids:
        raise KafkaError(
            Code.INCONSISTENT_GROUP_PROTOCOL,
            f"group {group_id!r} is used by RocketMQ consumers; pick another group id",
        )
    port = env.ctx.port
    group = port.group(group_id)
    if group is None:
        # autoCreateSubscriptionGroup off: Kafka groups still work, unlisted
        with contextlib.suppress(NotFoundError):
            group = port.group_for_use(group_id)
    if group is not None and not group.consume_enable:
        raise KafkaError(Code.GROUP_AUTHORIZATION_FAILED, f"group {group_id!r} is disabled")


async def check_coordinated(env: KafkaEnv, conn: KafkaConnection, group_id: str) -> None:
    """``check_group``, and NOT_COORDINATOR unless this broker coordinates the group (in a
    cluster, ``cluster.py`` picks one broker per group id: the client asks FindCoordinator
    again and goes there)."""
    check_group(env, conn, group_id)
    if not await env.coordinates(group_id):
        raise KafkaError(Code.NOT_COORDINATOR, f"another broker coordinates group {group_id!r}")


class GroupHandlers:
    def __init__(self, env: KafkaEnv, coordinator: Coordinator) -> None:
        self.env = env
        self.coordinator = coordinator

    async def join_group(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        group_id = body["group_id"]
        try:
            await check_coordinated(self.env, conn, group_id)
            session = body["session_timeout_ms"]
            rebalance = body["rebalance_timeout_ms"]
            member = Member(
                member_id=body["member_id"],
                client_id=conn.client_id,
                client_host=conn.peer_host,
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance if rebalance > 0 else session,
                protocol_type=body["protocol_type"],
                protocols=[(p["name"], p["metadata"]) for p in body["protocols"]],
                group_instance_id=body["group_instance_id"],
            )
            if not member.protocols:
                raise KafkaError(Code.INCONSISTENT_GROUP_PROTOCOL, "no protocols")
            return await self.coordinator.join(group_id, member, version >= 4)
        except KafkaError as exc:
            return {
                "error_code": exc.code,
                "generation_id": -1,
                "member_id": body["member_id"],
                "members": [],
            }

    async def sync_group(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            await check_coordinated(self.env, conn, body["group_id"])
            code, assignment = await self.coordinator.sync(
                body["group_id"],
                body["generation_id"],
                body["member_id"],
                {a["member_id"]: a["assignment"] for a in body["assignments"]},
            )
        except KafkaError as exc:
            code, assignment = exc.code, b""
        return {"error_code": code, "assignment": assignment}

    async def heartbeat(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            await check_coordinated(self.env, conn, body["group_id"])
            code = self.coordinator.heartbeat(
                body["group_id"], body["generation_id"], body["member_id"]
            )
        except KafkaError as exc:
            code = exc.code
        return {"error_code": code}

    async def leave_group(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        group_id = body["group_id"]
        try:
            await check_coordinated(self.env, conn, group_id)
        except KafkaError as exc:
            return {"error_code": exc.code, "members": []}
        if version < 3:
            return {"error_code": self.coordinator.leave(group_id, body["member_id"])}
        members = [
            {
                "member_id": m["member_id"],
                "group_instance_id": m["group_instance_id"],
                "error_code": self.coordinator.leave(group_id, m["member_id"]),
            }
            for m in body["members"]
        ]
        return {"error_code": 0, "members": members}

    async def describe_groups(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        allowed = self.env.allowed(conn, "admin", "", Perm.ANY)
        return {"groups": [self._describe(group_id, allowed) for group_id in body["groups"]]}

    def _describe(self, group_id: str, allowed: bool) -> dict[str, Any]:
        if not allowed:
            return {"error_code": Code.GROUP_AUTHORIZATION_FAILED, "group_id": group_id}
        group = self.coordinator.groups.get(group_id)
        if group is None:
            known = group_id in self.env.ctx.port.groups_with_offsets()
            return {"error_code": 0, "group_id": group_id, "group_state": EMPTY if known else DEAD}
        return {
            "error_code": 0,
            "group_id": group_id,
            "group_state": group.state,
            "protocol_type": group.protocol_type,
            "protocol_data": group.protocol,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata_for(group.protocol),
                    "member_assignment": m.assignment,
                }
                for m in group.members.values()
            ],
        }

    async def list_groups(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        if not self.env.allowed(conn, "admin", "", Perm.ANY):
            return {"error_code": Code.CLUSTER_AUTHORIZATION_FAILED, "groups": []}
        # Groups with committed offsets only (a restart forgot their members; RocketMQ groups
        # too) are listed as Kafka lists "simple" groups: protocol type "".
        groups = dict.fromkeys(self.env.ctx.port.groups_with_offsets(), "")
        for group in self.coordinator.groups.values():
            groups[group.group_id] = group.protocol_type or groups.get(group.group_id, "")
        return {
            "error_code": 0,
            "groups": [{"group_id": g, "protocol_type": t} for g, t in sorted(groups.items())],
        }
