"""CreateTopics, DeleteTopics and CreatePartitions (admin accounts only under ACL).

- CreateTopics: a Wharf topic with ``num_partitions`` read and write queues (-1 = the
  broker's defaultTopicQueueNums; 1..1024); TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
  INVALID_TOPIC_EXCEPTION for a name Wharf cannot hold (Kafka's internal
  ``__consumer_offsets`` / ``__transaction_state`` included: Wharf keeps offsets in its own
  table). The replication factor is accepted and ignored (Wharf replicates a whole broker:
  SYNC_MASTER / controller mode); manual replica assignments are INVALID_REQUEST. Configs go
  through ``admin_configs`` (``broker/meta/topic_configs``): cleanup and retention configs are
  stored in the topic's attributes, a bad value or a config Wharf cannot honour is
  INVALID_CONFIG with the reason. ``validate_only`` checks without creating. In a cluster the
  topic is made on this broker's group only (``wharf topic create --cluster`` makes one on
  every group); a topic other groups hold is TOPIC_ALREADY_EXISTS.
- DeleteTopics: as AdminService.DeleteTopic: the topic, its committed offsets, its store
  files and metric series go (on this broker; in a cluster the other groups keep theirs).
- CreatePartitions: more read and write queues for the topic through the core's topic update
  (Kafka only grows a topic: a count not above the current is INVALID_PARTITIONS; manual
  assignments are INVALID_REPLICA_ASSIGNMENT). In a cluster, this broker group's queues.
"""

from __future__ import annotations

from typing import Any

from wharf.broker.core.admin import TopicSpec
from wharf.broker.core.send import is_own_topic
from wharf.broker.errors import AlreadyExistsError, InvalidArgumentError
from wharf.broker.frontends.kafka.admin_configs import ConfigHandlers
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, KafkaError, code_for
from wharf.broker.frontends.kafka.producers import ProducerTable
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Perm
from wharf.broker.meta.topics import MAX_QUEUE_NUMS, PERM_READ_WRITE, validate_topic_name

__all__ = ["AdminHandlers"]

KAFKA_INTERNAL = ("__consumer_offsets", "__transaction_state")


class AdminHandlers:
    def __init__(self, env: KafkaEnv, producers: ProducerTable, configs: ConfigHandlers) -> None:
        self.env = env
        self.producers = producers
        self.configs = configs

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
            attributes: dict[str, str] = {}
            if code == Code.NONE:
                try:
                    attributes = self.configs.create_attributes(t["configs"])
                except KafkaError as exc:
                    code, message = exc.code, exc.message
            if code != Code.NONE:
                row["error_code"], row["error_message"] = code, message
            elif not validate_only:
                spec = TopicSpec(t["name"], count, count, PERM_READ_WRITE, attributes)
                specs.append((row, spec))
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
        if name in KAFKA_INTERNAL:
            return Code.INVALID_TOPIC_EXCEPTION, (
                f"topic {name!r} is Kafka's internal topic and cannot be created on Wharf: "
                "Wharf keeps group offsets in its own table (there are no transactions)"
            ), 0  # fmt: skip
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

    async def create_partitions(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        admin = self.env.allowed(conn, "admin", "", Perm.ANY)
        results = []
        for t in body["topics"]:
            row = {"name": t["name"], "error_code": Code.NONE, "error_message": None}
            try:
                if not admin:
                    raise KafkaError(
                        Code.TOPIC_AUTHORIZATION_FAILED, "CreatePartitions needs an admin"
                    )
                await self._grow(t, bool(body["validate_only"]))
            except KafkaError as exc:
                row["error_code"], row["error_message"] = exc.code, exc.message
            results.append(row)
        return {"throttle_time_ms": 0, "results": results}

    async def _grow(self, t: dict[str, Any], validate_only: bool) -> None:
        """One topic's CreatePartitions: its queues raised to ``count`` (Kafka's checks)."""
        port = self.env.ctx.port
        name, count = t["name"], t["count"]
        topic = port.topic(name) if not is_own_topic(name) else None
        if topic is None:
            raise KafkaError(Code.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        now = max(topic.read_queue_nums, topic.write_queue_nums)
        if count <= now:
            raise KafkaError(Code.INVALID_PARTITIONS, f"Topic currently has {now} partitions, "
                             f"which is higher than or equal to the requested {count}.")  # fmt: skip
        if count > MAX_QUEUE_NUMS:
            raise KafkaError(Code.INVALID_PARTITIONS, f"Wharf holds at most {MAX_QUEUE_NUMS} "
                             f"partitions (queues) per topic; {count} were requested")  # fmt: skip
        if t["assignments"]:
            raise KafkaError(Code.INVALID_REPLICA_ASSIGNMENT,
                             "manual replica assignments are not supported")  # fmt: skip
        if validate_only:
            return
        if self.env.cluster is not None:
            self.env.cluster.forget(name)  # renumbered with this group's new queues
        try:
            await port.admin.update_topic(name, count, count, None, {})
        except Exception as exc:
            raise KafkaError(code_for(exc), str(exc)) from None
