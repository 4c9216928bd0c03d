"""ApiVersions, Metadata and FindCoordinator: who this broker is and what it holds.

- Metadata: brokers = ``env.nodes()`` (each broker's advertised Kafka address); every topic's
  partitions are ``env.layout()``'s: its queues (``read_queue_nums``) on this broker alone,
  or on every group of the cluster (``cluster.py``), each led by its group's master with that
  master as the only replica and in-sync replica (a group whose master is gone:
  LEADER_NOT_AVAILABLE, leader -1). A request naming no topics (v0: an empty list; v1+:
  null) lists every topic except the broker's own (``%RETRY%``, ``%DLQ%``, schedule, timer,
  transaction topics). A named topic that does not exist is created as a send would create it
  when ``allow_auto_topic_creation`` (v4+; always before) and autoCreateTopicEnable are both
  on (``defaultTopicQueueNums`` queues), else UNKNOWN_TOPIC_OR_PARTITION; a name Wharf cannot
  hold (``[%a-zA-Z0-9._-]`` up to 249, Kafka's limit, not ``.`` or ``..``) is
  INVALID_TOPIC_EXCEPTION.
- FindCoordinator: this broker for every group, or in a cluster the one ``cluster.py``
  picks for the group id (key type 0): COORDINATOR_NOT_AVAILABLE while a broker that is no
  master knows of none (a replica never names itself); key type 1 (a transactional id)
  is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients treat as fatal: Kafka
  transactions are not offered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from wharf.broker.core.errors import Refused
from wharf.broker.core.send import is_own_topic
from wharf.broker.frontends.kafka.cluster import NO_LEADER
from wharf.broker.frontends.kafka.codec import api_versions_body
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, code_for
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Perm
from wharf.broker.meta.topics import TopicConfig

__all__ = ["MetadataHandlers", "lookup_topic"]


def lookup_topic(env: KafkaEnv, name: str, create: bool) -> tuple[TopicConfig | None, Code]:
    """A topic by its Kafka name: (config, NONE), or (None, why not), by the core's admission
    (``SendCore.lookup``: the name rules, the broker's own topics, auto-creation and the
    shutting-down refusal) with its refusals as Kafka codes (``errors.code_for``). ``create``:
    made as a send would make it when autoCreateTopicEnable is on."""
    try:
        return env.ctx.port.send.lookup(name, create=create, own_topics=False), Code.NONE
    except Refused as exc:
        return None, code_for(exc)


class MetadataHandlers:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env

    async def api_versions(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        return api_versions_body()

    async def metadata(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        env = self.env
        requested = body["topics"]
        if requested is None or (version == 0 and not requested):
            names = [
                t.name
                for t in env.ctx.port.topics(include_system=False)
                if not is_own_topic(t.name)
            ]
            names = [n for n in names if env.allowed(conn, "topic", n, Perm.ANY)]
            create = fresh = False  # every topic: cached routes (1 s), not one lookup each
        else:
            names = [t["name"] for t in requested]
            create = version < 4 or bool(body["allow_auto_topic_creation"])
            fresh = True  # named: a client asks after an error, it wants the routes now
        topics = await asyncio.gather(*(self._topic(conn, n, create, fresh) for n in names))
        leaders = {p["leader_id"] for t in topics for p in t["partitions"]}
        return {
            "brokers": [
                {"node_id": n.node_id, "host": n.host, "port": n.port, "rack": None}
                for n in await env.nodes(conn, leaders - {NO_LEADER})
            ],
            "cluster_id": env.ctx.config.broker_cluster_name,
            "controller_id": env.node_id,
            "topics": topics,
        }

    async def _topic(
        self, conn: KafkaConnection, name: str, create: bool, fresh: bool
    ) -> dict[str, Any]:
        env = self.env
        if not env.allowed(conn, "topic", name, Perm.ANY):
            return {"error_code": Code.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []}
        # Held here, or (a cluster) on another group; else created here when allowed.
        topic, code = lookup_topic(env, name, create=False)
        layout = await env.layout(name, fresh) if code != Code.INVALID_TOPIC_EXCEPTION else None
        if layout is not None and not layout.spans and create:
            topic, code = lookup_topic(env, name, create)
            if topic is not None:
                layout = await env.layout(name, fresh=True)
        if layout is None or not layout.spans:
            if code == Code.NOT_LEADER_OR_FOLLOWER:  # shutting down: Metadata's retriable code
                code = Code.LEADER_NOT_AVAILABLE
            return {"error_code": code, "name": name, "partitions": []}
        partitions = [
            {
                "error_code": Code.NONE if span.leader != NO_LEADER else Code.LEADER_NOT_AVAILABLE,
                "partition_index": span.first + q,
                "leader_id": span.leader,
                "leader_epoch": 0,
                "replica_nodes": [span.leader] if span.leader != NO_LEADER else [],
                "isr_nodes": [span.leader] if span.leader != NO_LEADER else [],
                "offline_replicas": [],
            }
            for span in layout.spans
            for q in range(span.count)
        ]
        return {"error_code": 0, "name": name, "is_internal": False, "partitions": partitions}

    async def find_coordinator(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        env = self.env
        if body["key_type"] not in (0, 1):  # 0 a group, 1 a transactional id
            return {
                "error_code": Code.INVALID_REQUEST,
                "error_message": f"unknown coordinator key type {body['key_type']}",
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        node = await env.coordinator(conn, body["key"], fresh=True)
        if node is None:  # no master known, and this broker is none: the client asks again
            return {
                "error_code": Code.COORDINATOR_NOT_AVAILABLE,
                "error_message": "no master of any broker group is known",
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        return {
            "error_code": 0,
            "error_message": None,
            "node_id": node.node_id,
            "host": node.host,
            "port": node.port,
        }
