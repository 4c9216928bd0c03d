"""DeleteRecords (API 21): move partitions' log start offsets up (Kafka Streams purges its
repartition topics with it; ``kafka-delete-records.sh``, ``AdminClient.delete_records``).

Per partition: ``offset`` -1 means the high watermark (Kafka's HIGH_WATERMARK sentinel); an
offset above the high watermark or below -1 is OFFSET_OUT_OF_RANGE; otherwise the core moves
the queue's log start offset (``Admin.delete_records``: the store writes it durably before
answering, ``store/retention/starts.py``; under SYNC_MASTER the in-sync replicas took it too,
else REQUEST_TIMED_OUT) and the answer's ``low_watermark`` is the new log
start offset (never lower than it was). An offset at or below the current start changes
nothing and answers the current start, as Kafka does. Every protocol sees the move: Kafka's
ListOffsets earliest and Fetch, RocketMQ's min offset and pulls (OFFSET_TOO_SMALL with the new
start). The records' disk space goes with the shared commit log's segments (the store's own
age and disk rules): Wharf's rule, written in store/README.md.

Authorization: Kafka asks DELETE on the topic; Wharf's ACL has publish and subscribe, so a
principal that may publish to the topic may delete its records.
"""

from __future__ import annotations

import logging
from typing import Any

from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, code_for
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Perm

log = logging.getLogger("broker.kafka")
HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


class DeleteRecordsHandler:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env

    async def delete_records(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        topics = []
        for t in body["topics"]:
            name = t["name"]
            allowed = self.env.allowed(conn, "topic", name, Perm.PUB)
            partitions = []
            for p in t["partitions"]:
                low, code = await self._one(name, p["partition_index"], p["offset"], allowed)
                partitions.append(
                    {
                        "partition_index": p["partition_index"],
                        "low_watermark": low,
                        "error_code": code,
                    }
                )
            topics.append({"name": name, "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    async def _one(self, name: str, partition: int, offset: int, allowed: bool) -> tuple[int, Code]:
        if not allowed:
            return -1, Code.TOPIC_AUTHORIZATION_FAILED
        port = self.env.ctx.port
        topic = port.topic(name)
        if topic is None:
            return -1, Code.UNKNOWN_TOPIC_OR_PARTITION
        queue, code = await self.env.queue_of(name, partition)
        if code != Code.NONE:
            return -1, code
        if queue >= topic.read_queue_nums:
            return -1, Code.UNKNOWN_TOPIC_OR_PARTITION
        high = port.max_offset(name, queue)
        if offset == HIGH_WATERMARK:
            offset = high
        if not 0 <= offset <= high:
            return -1, Code.OFFSET_OUT_OF_RANGE
        try:
            return await port.delete_records(name, queue, offset), Code.NONE
        except Exception as exc:  # a failed write of the start offsets: nothing moved
            log.warning("kafka: DeleteRecords of %s-%d failed: %s", name, partition, exc)
            return -1, code_for(exc)
