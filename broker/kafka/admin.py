"""CreateTopics, DeleteTopics and DescribeConfigs (admin accounts only under ACL).

- CreateTopics: a Wharf topic with ``num_partitions`` read and write queues (-1 = the
  broker's defaultTopicQueueNums; 1..1024); TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
  INVALID_TOPIC_EXCEPTION for a name Wharf cannot hold. The replication factor is accepted
  and ignored (Wharf replicates a whole broker: SYNC_MASTER / controller mode); manual replica
  assignments are INVALID_REQUEST; ``cleanup.policy`` with ``compact`` is INVALID_CONFIG
  (no compaction); other configs are accepted and not stored (retention and sizes are the
  broker's: DescribeConfigs shows them). ``validate_only`` checks without creating. In a
  cluster the topic is made on this broker's group only (``wharf topic create --cluster``
  makes one on every group); a topic other groups hold is TOPIC_ALREADY_EXISTS.
- DeleteTopics: as AdminService.DeleteTopic: the topic, its committed offsets, its store
  files and metric series go (on this broker; in a cluster the other groups keep theirs).
- DescribeConfigs: topics (type 2) and this broker (type 4), what Wharf has, read-only:
  retention.ms (fileReservedTime), max.message.bytes (maxMessageSize), segment.bytes
  (mappedFileSizeCommitLog), cleanup.policy=delete, message.timestamp.type=CreateTime,
  num.partitions (defaultTopicQueueNums), auto.create.topics.enable, min.insync.replicas.
"""

from __future__ import annotations

from typing import Any

from wharf.broker.acl.rules import Perm
from wharf.broker.core.admin import TopicSpec
from wharf.broker.core.send import is_own_topic
from wharf.broker.errors import AlreadyExistsError, InvalidArgumentError
from wharf.broker.kafka.env import KafkaEnv
from wharf.broker.kafka.errors import Code, code_for
from wharf.broker.kafka.producers import ProducerTable
from wharf.broker.kafka.server import KafkaConnection
from wharf.broker.meta.topics import MAX_QUEUE_NUMS, PERM_READ_WRITE, validate_topic_name

__all__ = ["AdminHandlers"]

TOPIC = 2
BROKER = 4
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


class AdminHandlers:
    def __init__(self, env: KafkaEnv, producers: ProducerTable) -> None:
        self.env = env
        self.producers = producers

    async def create_topics(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        admin = self.env.allowed(conn, "admin", "", Perm.ANY)
        validate_only = bool(body["validate_only"])
        results: list[dict[str, Any]] = []
        specs: list[tuple[dict[str, Any], TopicSpec]] = []
        for t in body["topics"]:
            row = {"name": t["name"], "error_code": Code.NONE, "error_message": None}
            results.append(row)
            if not admin:
                row["error_code"] = Code.TOPIC_AUTHORIZATION_FAILED
                row["error_message"] = "CreateTopics needs an admin"
                continue
            code, message, count = await self._check(t)
            if code != Code.NONE:
                row["error_code"], row["error_message"] = code, message
            elif not validate_only:
                specs.append((row, TopicSpec(t["name"], count, count, PERM_READ_WRITE, {})))
        # Made through the core as one batch: answered once they are all on disk (one persist
        # round for the request).
        outcomes = await self.env.ctx.port.admin.create_topics([spec for _, spec in specs])
        for (row, _), outcome in zip(specs, outcomes, strict=True):
            if isinstance(outcome, AlreadyExistsError):
                row["error_code"], row["error_message"] = Code.TOPIC_ALREADY_EXISTS, str(outcome)
            elif isinstance(outcome, InvalidArgumentError):
                row["error_code"], row["error_message"] = Code.INVALID_REQUEST, str(outcome)
            elif isinstance(outcome, Exception):
                row["error_code"], row["error_message"] = code_for(outcome), str(outcome)
        return {"topics": results}

    async def _check(self, t: dict[str, Any]) -> tuple[Code, str | None, int]:
        """Kafka's checks of one topic to create: (code, message, partition count)."""
        port = self.env.ctx.port
        name = t["name"]
        try:
            validate_topic_name(name)
        except InvalidArgumentError as exc:
            return Code.INVALID_TOPIC_EXCEPTION, str(exc), 0
        if is_own_topic(name):
            return Code.INVALID_TOPIC_EXCEPTION, f"topic {name!r} is reserved for the broker", 0
        if port.topic(name) is not None:
            return Code.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists", 0
        if self.env.cluster is not None and (await self.env.layout(name, fresh=True)).spans:
            return Code.TOPIC_ALREADY_EXISTS, f"topic {name!r} exists on other broker groups", 0
        count = t["num_partitions"]
        if count == -1:
            count = port.topic_defaults.queue_nums
        if not 1 <= count <= MAX_QUEUE_NUMS:
            return Code.INVALID_PARTITIONS, f"num_partitions must be 1..{MAX_QUEUE_NUMS}", 0
        if t["assignments"]:
            return Code.INVALID_REQUEST, "manual replica assignments are not supported", 0
        for config in t["configs"]:
            if config["name"] == "cleanup.policy" and "compact" in (config["value"] or ""):
                return Code.INVALID_CONFIG, "log compaction is not supported by Wharf", 0
        return Code.NONE, None, count

    async def delete_topics(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        admin = self.env.allowed(conn, "admin", "", Perm.ANY)
        ctx = self.env.ctx
        results = []
        for name in body["topic_names"]:
            if not admin:
                code = Code.TOPIC_AUTHORIZATION_FAILED
            elif is_own_topic(name):
                code = Code.INVALID_TOPIC_EXCEPTION
            elif ctx.port.topic(name) is None:
                code = Code.UNKNOWN_TOPIC_OR_PARTITION
            else:
                if self.env.cluster is not None:
                    self.env.cluster.forget(name)  # renumbered without this group's queues
                self.producers.forget_topic(name)
                code = Code.NONE
                try:  # the core's deletion: offsets, files, metrics; answered once on disk
                    await ctx.port.admin.delete_topic(name)
                except Exception as exc:  # gone from the table; its files may linger
                    code = code_for(exc)
            results.append({"name": name, "error_code": code})
        return {"responses": results}

    async def describe_configs(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        admin = self.env.allowed(conn, "admin", "", Perm.ANY)
        results = []
        for resource in body["resources"]:
            kind, name = resource["resource_type"], resource["resource_name"]
            row: dict[str, Any] = {
                "error_code": 0,
                "error_message": None,
                "resource_type": kind,
                "resource_name": name,
                "configs": [],
            }
            if not admin:
                row["error_code"] = Code.CLUSTER_AUTHORIZATION_FAILED
            elif kind == TOPIC and self.env.ctx.port.topic(name) is None:
                row["error_code"] = Code.UNKNOWN_TOPIC_OR_PARTITION
            elif kind not in (TOPIC, BROKER):
                row["error_code"] = Code.INVALID_REQUEST
                row["error_message"] = f"resource type {kind} is not described"
            else:
                keys = resource["configuration_keys"]
                row["configs"] = [
                    _config(n, v, source)
                    for n, v, source in self._configs(kind)
                    if keys is None or n in keys
                ]
            results.append(row)
        return {"throttle_time_ms": 0, "results": results}

    def _configs(self, kind: int) -> list[tuple[str, str, int]]:
        ctx = self.env.ctx
        store = ctx.port.store_config
        rows = [
            ("retention.ms", str(store.file_reserved_time * 3_600_000), SOURCE_STATIC_BROKER),
            ("max.message.bytes", str(store.max_message_size), SOURCE_STATIC_BROKER),
            ("segment.bytes", str(store.mapped_file_size_commit_log), SOURCE_STATIC_BROKER),
            ("cleanup.policy", "delete", SOURCE_DEFAULT),
            ("message.timestamp.type", "CreateTime", SOURCE_DEFAULT),
            ("min.insync.replicas", str(store.min_in_sync_replicas), SOURCE_STATIC_BROKER),
        ]
        if kind == BROKER:
            defaults = ctx.port.topic_defaults
            rows.append(("num.partitions", str(defaults.queue_nums), SOURCE_STATIC_BROKER))
            rows.append(
                (
                    "auto.create.topics.enable",
                    str(defaults.auto_create).lower(),
                    SOURCE_STATIC_BROKER,
                )
            )
        return rows


def _config(name: str, value: str, source: int) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": True,
        "is_default": source == SOURCE_DEFAULT,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": [],
    }
