"""DeleteGroups and OffsetDelete: a group's committed offsets removed through the core's admin
(``AdminCore.delete_group_and_offsets`` / ``delete_offsets``, answered once on disk), from
this broker's offset table (in a cluster, the offsets the other groups' masters keep stay).

- DeleteGroups: a group with members online (Kafka members of the coordinator, or RocketMQ
  consumers of the same group id) is NON_EMPTY_GROUP; a group nobody knows is
  GROUP_ID_NOT_FOUND; otherwise its subscription group, its offsets and its pop state go.
- OffsetDelete: the partitions' committed offsets of one group; a partition of a topic the
  group's online members subscribe to is GROUP_SUBSCRIBED_TO_TOPIC (a group whose protocol is
  not Kafka's "consumer" subscribes to every topic, as Kafka assumes).
- Both need an admin account under ACL (GROUP_AUTHORIZATION_FAILED), as the other protocols'
  group deletion does; on a broker that is not the group's coordinator, NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import Any

from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.frontends.kafka.coordinator import Coordinator
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, KafkaError, code_for
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Perm
from wharf.broker.meta.groups import validate_group_name

__all__ = ["GroupAdminHandlers"]


class GroupAdminHandlers:
    def __init__(self, env: KafkaEnv, coordinator: Coordinator) -> None:
        self.env = env
        self.coordinator = coordinator

    async def _check(self, conn: KafkaConnection, group_id: str) -> None:
        if not group_id:
            raise KafkaError(Code.INVALID_GROUP_ID, "the group id is empty")
        try:
            validate_group_name(group_id)
        except InvalidArgumentError as exc:
            raise KafkaError(Code.INVALID_GROUP_ID, str(exc)) from None
        if not self.env.allowed(conn, "admin", "", Perm.ANY):
            raise KafkaError(Code.GROUP_AUTHORIZATION_FAILED, "deleting needs an admin")
        if not await self.env.coordinates(group_id):
            raise KafkaError(Code.NOT_COORDINATOR)

    def _known(self, group_id: str) -> bool:
        port = self.env.ctx.port
        return (
            group_id in self.coordinator.groups
            or port.group(group_id) is not None
            or group_id in port.groups_with_offsets()
        )

    async def delete_groups(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        results = []
        for group_id in body["groups_names"]:
            code = Code.NONE
            try:
                await self._delete_group(conn, group_id)
            except KafkaError as exc:
                code = exc.code
            results.append({"group_id": group_id, "error_code": code})
        return {"throttle_time_ms": 0, "results": results}

    async def _delete_group(self, conn: KafkaConnection, group_id: str) -> None:
        await self._check(conn, group_id)
        port = self.env.ctx.port
        if port.clients.online_count(group_id):  # Kafka members or RocketMQ consumers
            raise KafkaError(Code.NON_EMPTY_GROUP)
        if not self._known(group_id):
            raise KafkaError(Code.GROUP_ID_NOT_FOUND)
        if not self.coordinator.forget(group_id):  # a Kafka member mid-join (KIP-394)
            raise KafkaError(Code.NON_EMPTY_GROUP)
        try:
            await port.admin.delete_group_and_offsets(group_id)
        except NotFoundError:
            pass  # known to the coordinator only: nothing stored
        except Exception as exc:
            raise KafkaError(code_for(exc), str(exc)) from None

    async def offset_delete(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        group_id = body["group_id"]
        try:
            await self._check(conn, group_id)
            if not self._known(group_id):
                raise KafkaError(Code.GROUP_ID_NOT_FOUND)
        except KafkaError as exc:
            return {"error_code": exc.code, "topics": []}
        subscribed = self._subscribed(group_id)
        topics = []
        for t in body["topics"]:
            name = t["name"]
            partitions = [p["partition_index"] for p in t["partitions"]]
            codes: dict[int, Code] = {}
            queues: set[int] = set()
            for partition in partitions:
                if subscribed is None or name in subscribed:
                    codes[partition] = Code.GROUP_SUBSCRIBED_TO_TOPIC
                    continue
                home = await self.env.offsets_home(name, partition)
                if home is None:
                    codes[partition] = Code.UNKNOWN_TOPIC_OR_PARTITION
                elif home[0] is not None:
                    codes[partition] = Code.NOT_COORDINATOR  # kept by another group's master
                else:
                    queues.add(home[1])
                    codes[partition] = Code.NONE
            if queues:
                try:
                    await self.env.ctx.port.admin.delete_offsets(group_id, name, queues)
                except Exception as exc:
                    failed = code_for(exc)
                    codes = {p: failed if c == Code.NONE else c for p, c in codes.items()}
            rows = [{"partition_index": p, "error_code": c} for p, c in codes.items()]
            topics.append({"name": name, "partitions": rows})
        return {"error_code": Code.NONE, "topics": topics}

    def _subscribed(self, group_id: str) -> set[str] | None:
        """The topics the group's online members subscribe to; None: every topic (members
        online whose subscriptions Wharf cannot read)."""
        group = self.coordinator.groups.get(group_id)
        if group is not None and group.members and group.protocol_type != "consumer":
            return None
        return self.env.ctx.port.clients.subscribed_topics(group_id)
